"""Why an ACK job failed: the pods' own reasons, the kubelet's and the scheduler's events and the
training-operator's, then the failing node's output, then its exit code."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from aliyun_training.backends.ack.status import pod_problem_lines
from aliyun_training.backends.base import JobState
from aliyun_training.failures import (
    COMMAND_NOT_RUN,
    REGISTRY_HICCUP,
    Failure,
    FailureClass,
    class_from_text,
)
from aliyun_training.failures.torchrun import read_node_output

if TYPE_CHECKING:
    from aliyun_training.backends.base import JobStatus


#: A failed job's evidence -> class, checked in order (the first match wins) over its status reason
#: and ``failure_details`` lines, which name each pod and its reason; then the log tail's text rules
#: (``failures.class_from_text``), then the exit code. A data rule comes first because the scheduler
#: words an unbound claim as Unschedulable too; config and a pod's own limits before preemption: no
#: retry fixes them. Transient evidence comes before both: a pull the registry only limited or failed
#: (``failures.REGISTRY_HICCUP``: 429 toomanyrequests, a 5xx) and a container the kubelet lost track
#: of clear by themselves, whatever else the pods say. Sources:
#: - the kubelet's reason strings: pkg/kubelet/images/types.go (ImagePullBackOff, ErrImagePull,
#:   InvalidImageName, ErrImageNeverPull), pkg/kubelet/container/sync_result.go
#:   (CreateContainerConfigError, CreateContainerError, RunContainerError), the container runtime's
#:   StartError (its exec found no such executable), pkg/kubelet/events/event.go (FailedMount,
#:   FailedAttachVolume, "MountVolume.SetUp failed"), pkg/kubelet/eviction (a pod's reason Evicted),
#:   pkg/kubelet/preemption (Preempting), pkg/kubelet/nodeshutdown (Terminated), the container
#:   runtime's OOMKilled; the node lifecycle controller's NodeLost reason and NodeNotReady event;
#: - the Normal events ``TELLING_NORMAL_REASONS`` keeps: the scheduler's Preempted on a victim, the
#:   taint-eviction controller's TaintManagerEviction on a pod it deletes;
#: - "Pod disruption conditions" (Kubernetes docs, Disruptions): DisruptionTarget with reasons
#:   PreemptionByScheduler, DeletionByTaintManager (the node lifecycle controller's NoExecute
#:   eviction), EvictionByEvictionAPI, DeletionByPodGC, TerminationByKubelet;
#: - "Pod Lifecycle": PodScheduled False with reason Unschedulable; the scheduler's FailedScheduling
#:   event, its "Insufficient <resource>" and VolumeBinding's "pod has unbound immediate
#:   PersistentVolumeClaims" / 'persistentvolumeclaim "<name>" not found'; the kubelet's admission
#:   reasons OutOf<resource>;
#: - the API server's denials: 'admission webhook "<name>" denied the request', '<Kind> "<name>" is
#:   invalid: '; the shell's exit codes 126 (cannot execute) and 127 (command not found).
ACK_RULES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        # A pull the registry limited or failed (the kubelet's ImagePullBackOff/ErrImagePull
        # waiting reasons and its "Failed to pull image" event, pkg/kubelet/images/image_manager.go,
        # carry the runtime's error), not one it refused: "manifest unknown", "unauthorized",
        # "denied", not found and InvalidImageName stay config below. And a container the kubelet
        # could not find any more (pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses:
        # terminated, reason "ContainerStatusUnknown", exit code 137, message "The container could
        # not be located when the pod was terminated" / "... was deleted.  The container used to be
        # Running"): the node or its runtime lost it, the script did not end it.
        FailureClass.TRANSIENT,
        re.compile(
            rf"^(?=.*\b(?:ImagePullBackOff|ErrImagePull|Failed to pull image)\b)"
            rf"(?!.*(?:manifest unknown|unauthorized|denied|not found|InvalidImageName))"
            rf"(?=.*(?:{REGISTRY_HICCUP.pattern}))"
            r"|\bContainerStatusUnknown\b",
            re.I,
        ),
    ),
    (
        FailureClass.DATA,
        re.compile(
            r"\b(?:FailedMount|FailedAttachVolume)\b|MountVolume\.\w+ failed|AttachVolume\.Attach failed"
            r"|unbound immediate PersistentVolumeClaims|persistentvolumeclaim \"[^\"]*\" not found"
        ),
    ),
    (
        FailureClass.CONFIG,
        re.compile(
            r"\b(?:ImagePullBackOff|ErrImagePull|InvalidImageName|ErrImageNeverPull|CreateContainerConfigError"
            r"|CreateContainerError|RunContainerError|StartError)\b|\(exit code 12[67]\)"
            r"|admission webhook \"[^\"]+\" denied the request"
            r"|\bis invalid: "
        ),
    ),
    (
        # An eviction for the pod's own storage limit, not the node's pressure: the kubelet's
        # eviction messages (pkg/kubelet/eviction/helpers.go: containerEphemeralStorageMessageFmt,
        # podEphemeralStorageMessageFmt, emptyDirMessageFmt). Like OOMKilled, the job outgrew
        # what it asked for, and a retry on another node outgrows it again.
        FailureClass.USER_CODE,
        re.compile(
            r"exceeded its local ephemeral storage limit"
            r"|Pod ephemeral local storage usage exceeds the total limit"
            r"|Usage of EmptyDir volume \"[^\"]*\" exceeds the limit"
        ),
    ),
    (
        FailureClass.PREEMPTION,
        re.compile(
            r"\b(?:Evicted|Preempted|Preempting|PreemptionBy\w+|DeletionByTaintManager|TaintManagerEviction"
            r"|DeletionByPodGC"
            r"|EvictionByEvictionAPI|TerminationByKubelet|DisruptionTarget|NodeLost|NodeNotReady)\b"
            r"|^pod \S+: (?:Terminated|Shutdown)\b"
        ),
    ),
    (FailureClass.USER_CODE, re.compile(r"\bOOMKilled\b")),
    (
        # The kubelet's admission refusal (pkg/kubelet/lifecycle/predicate.go, "Node didn't have
        # enough resource: %s, requested: %d, used: %d, capacity: %d") on a node that reports none
        # of the resource at all: its device plugin lost the GPUs, not a full cluster.
        FailureClass.INFRASTRUCTURE,
        re.compile(r"Node didn't have enough resource: \S+, requested: \d+, used: \d+, capacity: 0\b"),
    ),
    (FailureClass.CAPACITY, re.compile(r"\b(?:Unschedulable|FailedScheduling|OutOf\w+)\b|Insufficient \S+")),
)


def classify_ack(status: JobStatus, details: list[str], tail: list[str]) -> Failure:
    """The class of a failed (or given up) job: the first of ``ACK_RULES`` its status reason and
    ``details`` match, else what the log tail says (``class_from_text``), else its exit code
    (126/127: config; any other: user code), else capacity for a job that never left pending,
    else infrastructure. (A job deleted from outside ends ``stopped``, which is not a failure:
    the operator does not retry it.)"""
    lines = list(dict.fromkeys(line for line in (*status.reason.split("; "), *details) if line))
    if status.reason_code and not any(status.reason_code in line for line in lines):
        lines.insert(0, f"reason {status.reason_code}")
    for failure_class, pattern in ACK_RULES:
        matched = [line for line in lines if pattern.search(line)]
        if matched:
            return Failure(failure_class=failure_class, evidence=matched)
    text = class_from_text(lines)
    if text is not None:
        return Failure(failure_class=text[0], evidence=[text[1]])
    # The failing pod's output, read from the rank torchrun saw fail first (not the siblings it
    # terminated, not the traceback of a torchrun the kubelet stopped).
    verdict = read_node_output(tail, status.failed_node)
    if verdict.failure_class is not None:
        return Failure(failure_class=verdict.failure_class, evidence=verdict.evidence)
    exit_code = status.exit_code or _exit_code_in_events(lines)
    if exit_code:
        exited = [
            line for line in lines if f"(exit code {exit_code})" in line or f"with code {exit_code}" in line
        ]
        evidence = (exited or [f"exit code {exit_code}"]) + tail[-1:]
        code_class = FailureClass.CONFIG if exit_code in COMMAND_NOT_RUN else FailureClass.USER_CODE
        return Failure(failure_class=code_class, evidence=evidence)
    if status.state is JobState.PENDING:
        return Failure(
            failure_class=FailureClass.CAPACITY, evidence=[f"the job stayed pending: {status.reason}"]
        )
    return Failure(failure_class=FailureClass.INFRASTRUCTURE, evidence=lines[:3] or [status.raw])


#: Normal events of a pod that say what ended it, kept beside its Warnings: the scheduler's on a
#: victim it preempts (pkg/scheduler/framework/preemption/preemption.go, ``Eventf(victim, preemptor,
#: Normal, "Preempted", "Preempting", "Preempted by pod %v on node %v")``) and the taint-eviction
#: controller's on a pod it deletes from a NoExecute-tainted node (pkg/controller/tainteviction/
#: taint_eviction.go ``emitPodDeletionEvent``: Normal "TaintManagerEviction", "Marking for deletion
#: Pod %s"). Without them a victim whose pod is gone reads only as its replacement's wait (capacity).
#: Every other Normal event of a pod (Scheduled, Pulling, Created, Started, Killing...) is progress.
TELLING_NORMAL_REASONS = frozenset({"Preempted", "TaintManagerEviction"})


def describe_failure(
    pods: list[dict[str, Any]], events: dict[str, list[dict[str, Any]]], job: str
) -> list[str]:
    """The pods' problems, their Warning events and the Normal ones that say what ended them
    (``TELLING_NORMAL_REASONS``), and every event of the job itself, oldest first (the
    training-operator's are few and Normal ones say which pod exited how). ``events`` may name pods
    no longer listed (cleanPodPolicy deleted them): their events are all that is left of them."""
    lines = pod_problem_lines(pods)
    for name, recorded in events.items():
        for event in recorded:
            if name == job or event.get("type") == "Warning" or event.get("reason") in TELLING_NORMAL_REASONS:
                lines.append(f"event {name}: {event.get('reason')}: {event.get('message')}")
    return lines


#: The training-operator's event on the job for each pod it creates (pkg/controller.v1/control/
#: pod_control.go ``CreatePodsWithControllerRef``: Normal "SuccessfulCreatePod", "Created pod: %v"):
#: the names of the job's pods once cleanPodPolicy deleted them.
_CREATED_POD = re.compile(r"^Created pod: (\S+)$")


def created_pods(job_events: list[dict[str, Any]]) -> list[str]:
    """The pods the job's own events say the training-operator created, oldest first, once each."""
    names = (
        _CREATED_POD.match(event.get("message") or "")
        for event in job_events
        if event.get("reason") == "SuccessfulCreatePod"
    )
    return list(dict.fromkeys(match.group(1) for match in names if match))


def of_job(events: list[dict[str, Any]], uid: str) -> list[dict[str, Any]]:
    """The job's events about the CR of ``uid``: one that names another uid is about an earlier
    CR of the same name (an earlier attempt)."""
    return [event for event in events if (event.get("involvedObject") or {}).get("uid") in (None, "", uid)]


def since(events: list[dict[str, Any]], start: str) -> list[dict[str, Any]]:
    """A pod's events from ``start`` (the job's first event) on: earlier ones are about a pod of
    the same name of an earlier attempt. (Not by uid: the operator recreates a preempted pod under
    its name, and the victim's events, under its own uid, are the ones that tell; the
    taint-eviction controller's name no uid at all.)"""
    return [event for event in events if not start or not _when(event) or _when(event) >= start]


def first_event(events: list[dict[str, Any]]) -> str:
    """When the earliest of ``events`` happened ("" when none says)."""
    return min((when for event in events if (when := _when(event))), default="")


def _when(event: dict[str, Any]) -> str:
    """When an event last happened, as the API serves it (core/v1 ``lastTimestamp``, or the
    ``eventTime`` of one written through events.k8s.io, as the scheduler writes them)."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")


#: The training-operator's event on the job for a pod that exited non-zero (pkg/controller.v1/common,
#: ``Eventf(job, Normal, "ExitedWithCode", "Pod: %v.%v exited with code %v")``): what remains of a
#: failed pod's exit once cleanPodPolicy deleted it.
_EXITED_EVENT = re.compile(r"ExitedWithCode: Pod: \S+ exited with code (\d+)")


def _exit_code_in_events(lines: list[str]) -> int | None:
    """The exit code of the first pod the job's events say exited non-zero, or None."""
    for line in lines:
        match = _EXITED_EVENT.search(line)
        if match:
            return int(match.group(1))
    return None
