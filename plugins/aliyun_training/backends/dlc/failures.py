"""Why a DLC job failed: DLC's verdict, its sanity checks, AIMaster's restart records, the job's
and pods' events in the order DLC produced them, then the failing node's own output."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from aliyun_training.backends.dlc.status import QUEUE_STATUSES
from aliyun_training.failures import (
    COMMAND_NOT_RUN,
    REGISTRY_HICCUP,
    TEXT_RULES,
    Failure,
    FailureClass,
    Rules,
    class_from_text,
)
from aliyun_training.failures.torchrun import read_node_output

if TYPE_CHECKING:
    from aliyun_training.backends.base import (
        JobStatus,
    )

#: How many recent platform events a failure message shows, of the job and of each pod.
FAILURE_EVENTS = 20


#: How ``classify`` reads a failed job; the first step that applies decides:
#:
#: 1. DLC's verdict (ReasonCode, ReasonMessage, the job's and its pods' SubStatus) against these
#:    rules; the evidence is that verdict ("ReasonCode=...");
#: 2. a failed sanity check: infrastructure (DLC checks the machines, not the script);
#: 3. AIMaster's restart records (``restart: ...``, the newest first) against these rules and the
#:    text rules: the platform's own diagnosis of a fault it restarted the job for;
#: 4. the job's and its failed pods' events (``event: ...``, ``pod event <pod>: ...``) against these
#:    rules in the order DLC produced them (:func:`in_platform_order`: a capacity line gives way to a
#:    later failure), capacity only while the job never ran: the events of a job that ran still
#:    hold the words of its queuing;
#: 5. ``failures.class_from_text`` over DLC's words, then the failing node's output read from where
#:    its failure began (``failures.torchrun.read_node_output``: NCCL and GPU faults, CUDA out of
#:    memory, a missing file, a torchrun stopped from outside);
#: 6. the script's own failure: a Python traceback, or an exit code of 1 to 125, is user code; 126
#:    and 127 (the shell's "not executable" and "not found") are config;
#: 7. otherwise infrastructure. DLC named no cause and the script did not say it failed (no
#:    traceback, no exit code of its own), so what ended it was under it: a signal from outside,
#:    a node that went away, a runtime that never started it. Calling that user code would blame
#:    a script that may never have run.
#:
#: The rules are (class, pattern), case-insensitive, the first rule any line matches winning; each
#: names a failure, never a step every job takes (events also tell of queuing, mounting and
#: checking that went well). DLC publishes no list of ReasonCodes, so they are keywords, and the
#: exact codes and messages are unverified. Sources: the SDK's docstrings (GetJob SubStatus "such
#: as the preemption retry status", a pod's SubStatus "Normal" or "Evicted") and the failure
#: patterns of Alibaba Cloud's own PAI-DLC diagnostics skill (repository
#: aliyun/alibabacloud-aiops-skills, skill alibabacloud-pai-dlc-job-diagnostics,
#: references/diagnostic-patterns.md): ResourceAllocateFailed, "resource type is not enough",
#: OutOfGPU, NotEnoughGPU, ErrImagePull, ImagePullBackOff, "image not found", "manifest unknown",
#: "unauthorized", Evicted, "preempted", spot reclamation, GPUUnhealthy, AIMasterBlackList,
#: DriverVersionMismatch, hang detection. The other words are Kubernetes' (NodeNotReady,
#: FailedMount, "Insufficient nvidia.com/gpu") and Alibaba Cloud's general error codes (Forbidden,
#: NoPermission, InvalidParameter). Preemption comes first, as the pods of a reclaimed node then
#: fail in other ways too; config before capacity, as no permission to use a quota is no shortage
#: of it.
DLC_FAILURE_RULES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        FailureClass.PREEMPTION,
        re.compile(r"preempted|preemption|reclaim|evict|NodeNotReady|node\s*lost|lost\s+node", re.I),
    ),
    (
        # A registry limiting or failing the pull (``failures.REGISTRY_HICCUP``), and the kubelet's
        # ContainerStatusUnknown (pkg/kubelet/kubelet_pods.go: a container it lost track of, exit
        # 137): the same job runs when retried later, unlike the image errors below.
        FailureClass.TRANSIENT,
        re.compile(rf"{REGISTRY_HICCUP.pattern}|ContainerStatusUnknown", re.I),
    ),
    (
        FailureClass.CONFIG,
        re.compile(
            r"ErrImagePull|ImagePullBackOff|fail\w*\s+to\s+pull|image\s+not\s+found|manifest\s+unknown"
            r"|unauthorized|forbidden|NoPermission|permission\s+denied|access\s*denied"
            r"|InvalidParameter|invalid\s+(?:command|argument|parameter|spec)",
            re.I,
        ),
    ),
    (
        FailureClass.CAPACITY,
        re.compile(
            r"ResourceAllocateFailed|resource\s+type\s+is\s+not\s+enough|insufficient|OutOfGPU|NotEnoughGPU"
            r"|exceed\w*\s+(?:the\s+)?quota|quota\w*\s+exceed|queu\w*\s+(?:timeout|timed\s+out|too\s+long)",
            re.I,
        ),
    ),
    (
        FailureClass.DATA,
        re.compile(
            r"FailedMount|MountFailed|mount\w*\s+(?:fail|error)|(?:fail\w*|unable)\s+to\s+mount"
            r"|MountVolume\.\w+ failed|unable to attach or mount volumes"
            r"|(?:dataset|data\s*source)\b.*\b(?:not\s+found|missing|unavailable|fail)|NoSuchBucket|NoSuchKey",
            re.I,
        ),
    ),
    (
        FailureClass.INFRASTRUCTURE,
        re.compile(
            r"GPUUnhealthy|AIMasterBlackList|DriverVersionMismatch|hardware\s+(?:fault|failure|error)"
            r"|sanity\s*check\w*\s*fail|\bhang\b.*\bdetect|detect\w*\s+(?:a\s+)?hang|\bhung\b",
            re.I,
        ),
    ),
)


#: A Python traceback: the script itself raised.
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


#: An exit code as a pod's message, an event or torchrun's failure summary writes it ("exited with
#: code 1", "exit status 2", "exitcode  : 1"). 126 and 127 are the shell's "not executable" and
#: "not found"; 128 and above mean a signal ended the process (from outside: no verdict on the
#: script), as does torchrun's negative exitcode, which this does not match.
EXIT_CODE = re.compile(
    r"exit(?:ed)?\s+(?:with\s+)?(?:code|status)\s*[:=]?\s*(\d+)|exitcode\s*:\s*(\d+)", re.I
)


def describe_failure(job: Any, events: Any, pod_events: dict[str, list[str]], checks: Any) -> list[str]:
    """Restart records, the job's events, the pods' events, then failed sanity checks, as lines
    for the task error and the classifier, each kind oldest first."""
    lines = [_restart_line(record, error) for record in job.restart_record or [] for error in _errors(record)]
    lines += [f"event: {event}" for event in (events.events or [])[-FAILURE_EVENTS:]]
    for pod, recorded in pod_events.items():
        lines += [f"pod event {pod}: {event}" for event in recorded[-FAILURE_EVENTS:]]
    for round_ in checks.sanity_check_results or []:
        for check in round_:
            if check.status not in ("Succeeded", "Passed"):
                lines.append(
                    f"sanity check #{check.check_number} {check.phase}: {check.status} {check.message}"
                )
    return lines


def _errors(record: Any) -> list[Any]:
    """A restart record's fault details; one empty entry when it has none, so the record shows."""
    return list(record.detail_error_info_list or []) or [None]


def _restart_line(record: Any, error: Any) -> str:
    """One fault a restart record names: ``restart: <when> <reason> [<status>]: <source> <code>:
    <message> (pod, node)``, as AIMaster recorded it (GetJob RestartRecord, DetailErrorInfoList)."""
    head = " ".join(
        part
        for part in (
            record.occur_time,
            record.reason,
            f"[{record.restart_status}]" if record.restart_status else "",
            record.restart_fail_reason,
        )
        if part
    )
    if error is None:
        return f"restart: {head}"
    fault = " ".join(
        part
        for part in (error.error_source, error.error_code, error.error_msg, error.detail_error_msg)
        if part
    )
    where = ", ".join(
        f"{name} {value}" for name, value in (("pod", error.pod), ("node", error.node)) if value
    )
    return f"restart: {head}: {fault}" + (f" ({where})" if where else "")


def classify_dlc(status: JobStatus, details: list[str], tail: list[str]) -> Failure:
    """The class of a failed DLC job, by the steps ``DLC_FAILURE_RULES`` describes."""
    verdict = _verdict(status)
    said = [verdict] if verdict else []
    matched = class_from_text(said, DLC_FAILURE_RULES)
    if matched is not None:
        return Failure(failure_class=matched[0], evidence=said)
    checks = [line for line in details if line.startswith("sanity check #")]
    if checks:
        return Failure(failure_class=FailureClass.INFRASTRUCTURE, evidence=[*said, *checks])
    restarts = [line for line in details if line.startswith("restart: ")]
    events = [line for line in details if line.startswith(("event: ", "pod event "))]
    ran = any(phase.get("status") == "Running" for phase in status.history)
    rules = tuple(rule for rule in DLC_FAILURE_RULES if not (ran and rule[0] is FailureClass.CAPACITY))
    matched = (
        _newest_named(restarts, (*DLC_FAILURE_RULES, *TEXT_RULES))
        or in_platform_order(events, rules)
        or class_from_text([*said, *events])
    )
    if matched is None:
        # The failing pod's own output, read from the rank torchrun saw fail first: a torchrun the
        # platform stopped prints a traceback as it dies, which is not the script's failure.
        output = read_node_output(tail, status.failed_node)
        if output.failure_class is not None:
            return Failure(failure_class=output.failure_class, evidence=[*said, *output.evidence])
        matched = _script_failure([*said, *events, *tail])
    if matched is not None:
        return Failure(failure_class=matched[0], evidence=list(dict.fromkeys([*said, matched[1]])))
    if status.raw in QUEUE_STATUSES | {"Creating"}:
        # Given up on while still waiting for its resources, with no other word: no room.
        stayed = f"the job stayed {status.raw}" + (f": {status.reason}" if status.reason else "")
        return Failure(failure_class=FailureClass.CAPACITY, evidence=[stayed])
    return Failure(failure_class=FailureClass.INFRASTRUCTURE, evidence=said or ["DLC named no reason"])


def _newest_named(lines: list[str], rules: Rules) -> tuple[FailureClass, str] | None:
    """The failure the newest of ``lines`` that names one names (restart records: the last fault
    AIMaster restarted the job for)."""
    return next((found for line in reversed(lines) if (found := class_from_text([line], rules))), None)


def in_platform_order(lines: list[str], rules: Rules) -> tuple[FailureClass, str] | None:
    """The failure ``lines`` name, read in the order the platform produced them: the first line any
    rule matches decides, except that a line of capacity (waiting for room) gives way to any later
    line naming another failure: the job left that queue, and what happened after ended it."""
    found = None
    for line in lines:
        matched = class_from_text([line], rules)
        if matched is None:
            continue
        if found is None or (found[0] is FailureClass.CAPACITY and matched[0] is not FailureClass.CAPACITY):
            found = matched
    return found


def _verdict(status: JobStatus) -> str:
    """DLC's reason as evidence: ``ReasonCode=<code>: <message>; SubStatus=...``."""
    if status.reason_code and status.reason.startswith(status.reason_code):
        return f"ReasonCode={status.reason}"
    if status.reason_code:
        return "; ".join(part for part in (f"ReasonCode={status.reason_code}", status.reason) if part)
    return status.reason


def _script_failure(lines: list[str]) -> tuple[FailureClass, str] | None:
    """User code for a traceback or the script's own exit code, config for 126/127; None for none
    (an exit code of 128 or more is a signal's)."""
    for line in lines:
        if TRACEBACK.search(line):
            return FailureClass.USER_CODE, line.strip()
        for match in EXIT_CODE.finditer(line):
            code = int(match.group(1) or match.group(2))
            if code in COMMAND_NOT_RUN:
                return FailureClass.CONFIG, line.strip()
            if 0 < code < 128:
                return FailureClass.USER_CODE, line.strip()
    return None
