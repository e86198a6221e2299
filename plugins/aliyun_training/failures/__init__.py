"""Why a job failed, in the words that decide what a retry should do.

Every backend reads its platform's own evidence (DLC's ReasonCode and events, a pod's container
states, a local process's exit code or signal) and names one :class:`FailureClass`; the retry
policy maps the class to an action. What the platforms share, the text a failing training script
prints (an NCCL error, CUDA running out of memory, a missing file), is matched here once, by
:func:`class_from_text`, so the three backends read a log tail the same way.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class FailureClass(StrEnum):
    """What kind of failure ended a job; the retry policy decides per class."""

    #: The request can never run as given: bad image, command, permissions, invalid request.
    CONFIG = "config"
    #: No room: the quota or cluster cannot place the job, or it stayed pending too long.
    CAPACITY = "capacity"
    #: The platform took the machines away: spot reclaimed, node lost or drained, pod evicted.
    PREEMPTION = "preemption"
    #: The machines misbehaved: NCCL/RDMA errors, GPU faults, hangs.
    INFRASTRUCTURE = "infrastructure"
    #: The training script failed or ran out of memory.
    USER_CODE = "user_code"
    #: The dataset is missing or unreadable.
    DATA = "data"
    #: The run used up its ``max_gpu_hours``; the job was stopped.
    BUDGET = "budget"
    #: A platform hiccup that clears by itself: a registry's rate limit or 5xx while pulling the
    #: image, a container the kubelet lost track of, an MPI daemon or a torchrun rendezvous that
    #: dropped before the script ran. The same request succeeds later; waiting longer each try
    #: keeps a retry from meeting the same limit.
    TRANSIENT = "transient"


class Failure(BaseModel):
    """One classified failure: the class and the lines of platform evidence that selected it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    failure_class: FailureClass
    #: Why this class, in the platform's words first ("ReasonCode=...", "pod ...: OOMKilled").
    evidence: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        shown = "; ".join(self.evidence[:3])
        return f"{self.failure_class.value}" + (f" ({shown})" if shown else "")


#: The exit code of a training script that found its data unusable: sysexits.h's EX_DATAERR ("the
#: input data was incorrect in some way"), part of the job contract the example scripts follow.
DATA_ERROR_EXIT = 65
#: The exit codes POSIX shells give a command they could not run: 126 found but not executable,
#: 127 not found. The job's configuration names a command that is not there.
COMMAND_NOT_RUN = {126: "the command is not executable", 127: "the command was not found"}

#: A registry limiting or failing a pull rather than refusing it: the distribution spec's
#: TOOMANYREQUESTS error code ("toomanyrequests"), an HTTP 429, or a 5xx the container runtime
#: reports ("unexpected status code 503 Service Unavailable", "received unexpected HTTP status: 502
#: Bad Gateway"). "manifest unknown", "unauthorized" and a bad name are permanent: no retry fixes
#: them.
_REGISTRY_HICCUP = (
    r"toomanyrequests|too many requests|\b429\b"
    r"|(?:status(?: code)?|HTTP status):? 5\d\d\b|\b50[0234] (?:Internal Server Error|Bad Gateway"
    r"|Service Unavailable|Gateway Time-?out)"
)
#: Open MPI's launcher lost a node's daemon (ORTE's and PRRTE's help texts: "ORTE has lost
#: communication with a remote daemon", "An ORTE daemon has unexpectedly failed after launch and
#: before communicating back to mpirun"): the link or the daemon dropped, not the script.
_LOST_MPI_DAEMON = (
    r"(?:ORTE|PRTE) has lost communication with (?:a|its) (?:remote )?daemon"
    r"|(?:ORTE|PRTE) daemon has unexpectedly failed after launch"
)
#: Whether a text names a registry hiccup (``_REGISTRY_HICCUP``): an image pull it blocks is
#: transient, one ``BLOCKING_REASONS`` names for another reason is not.
REGISTRY_HICCUP = re.compile(_REGISTRY_HICCUP, re.I)


#: What training output says, checked in order (the first match wins), against a failed job's last
#: log lines and the platform's messages. Infrastructure comes before user code: an NCCL timeout
#: ends in a Python traceback too. Sources: NCCL's and PyTorch's own error messages
#: ("NCCL error", "ncclSystemError", "ProcessGroupNCCL ... Watchdog caught collective operation
#: timeout", "CUDA error: uncorrectable ECC error", "Xid"), gloo's collective timeout ("Timed out
#: waiting 5000ms for recv operation to complete": a rank that hangs), ibverbs' ("ibv_"), CUDA's
#: "CUDA out of memory" / torch.OutOfMemoryError, Python's FileNotFoundError and the shell's
#: "command not found" / "can't open file", the container runtime's 'exec: "<name>": executable file
#: not found in $PATH', and torchrun's summary of a worker's exit code.
#: Three of CUDA's errors are not the machine's: a kernel's own assertion (an index out of range
#: on the device) is the script's; a device ordinal beyond the node's GPUs and an image built for
#: other GPU architectures ("no kernel image is available") are the job's configuration. They come
#: first, as the NCCL errors they cause afterwards would read as infrastructure.
TEXT_RULES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        FailureClass.CONFIG,
        re.compile(
            r"invalid device ordinal|no kernel image is available for execution"
            r"|CUDA driver version is insufficient"
        ),
    ),
    (FailureClass.USER_CODE, re.compile(r"CUDA error: device-side assert triggered")),
    # A torch built without CUDA in a GPU job: torch/cuda/__init__.py's AssertionError "Torch not
    # compiled with CUDA enabled" and ProcessGroupNCCL's "Distributed package doesn't have NCCL
    # built in" (torch/distributed/distributed_c10d.py). The image's torch is the job's own choice,
    # like any other dependency of the script; the machines are fine.
    (
        FailureClass.USER_CODE,
        re.compile(r"Torch not compiled with CUDA enabled|Distributed package doesn't have NCCL built in"),
    ),
    (
        FailureClass.INFRASTRUCTURE,
        re.compile(
            r"NCCL (?:error|WARN .*(?:timeout|unhandled))|nccl\w*Error|ProcessGroupNCCL.*[Tt]imeout"
            r"|Watchdog caught collective operation timeout|ibv_\w+ failed|RDMA\S* (?:error|failure)"
            r"|Timed out waiting \d+ms for (?:send|recv) operation"
            r"|ECC error|\bXid\b"
            r"|CUDA error: (?!out of memory)|GPU is lost|fell off the bus",
        ),
    ),
    (FailureClass.TRANSIENT, re.compile(rf"{_LOST_MPI_DAEMON}|{_REGISTRY_HICCUP}", re.I)),
    (
        FailureClass.USER_CODE,
        re.compile(r"CUDA out of memory|OutOfMemoryError|\bMemoryError\b|OOMKilled"),
    ),
    (
        FailureClass.CONFIG,
        re.compile(
            r"command not found|can't open file|executable file not found|No module named"
            r"|ModuleNotFoundError|Permission denied"
        ),
    ),
    (
        FailureClass.DATA,
        re.compile(
            rf"exitcode\s*:\s*{DATA_ERROR_EXIT}\b|FileNotFoundError|No such file or directory"
            r"|dataset .*(?:missing|not found|unreadable)",
            re.I,
        ),
    ),
)


#: A rule table: (class, pattern) pairs, checked in order.
Rules = tuple[tuple[FailureClass, re.Pattern[str]], ...]

#: The first line of a Python traceback; the line naming the exception that ends it (its dotted
#: class, then ``: `` and the message, or the class alone); and the lines Python prints between the
#: tracebacks of chained exceptions (one raised from, or while handling, another). A rank that has
#: joined a process group prints its traceback with each line prefixed ``[rank<N>]: ``
#: (torch.distributed's exception hook), which is taken off first.
_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?::\s|:?$)")
_CHAINED = re.compile(
    r"The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:"
)


def ending_lines(lines: list[str]) -> list[str]:
    """The lines of a process's output that say how it ended: the exceptions of its last Python
    traceback and of those chained to it (``ValueError: ...``, ``torch.distributed.DistBackendError:
    NCCL error ...``); every line when it printed no traceback.

    A Python traceback is the process's own account of why it stopped, so its exception is the
    evidence that decides; what the script printed is its own output, which may say anything (a
    print of ``NCCL error checks on`` or ``no Xid events``), and reading it as the failure would
    retry, and resume, a bug in the code as if the machines had failed. Position cannot tell them
    apart: torchrun tees a rank's stdout and stderr from two files, so a print may land after the
    traceback. An NCCL, CUDA or gloo failure that ends the script is in the exception's message; one
    that kills the process without a traceback (a watchdog's abort) leaves every line as evidence.
    """
    bare = [_RANK_PREFIX.sub("", line, count=1) for line in lines]
    starts = [i for i, line in enumerate(bare) if _TRACEBACK.match(line)]
    if not starts:
        return lines
    chain = [starts.pop()]
    while starts and any(_CHAINED.search(line) for line in bare[starts[-1] : chain[0]]):
        chain.insert(0, starts.pop())
    ends = [*chain[1:], len(bare)]
    raised = [
        next((line for line in bare[start + 1 : end] if _EXCEPTION.match(line)), None)
        for start, end in zip(chain, ends, strict=True)
    ]
    # A traceback cut off before its exception (the tail's window) leaves its own lines.
    return [line for line in raised if line is not None] or lines[chain[0] :]


def class_from_text(lines: list[str], rules: Rules = TEXT_RULES) -> tuple[FailureClass, str] | None:
    """The first of ``rules`` any of ``lines`` matches, with the line that matched; None when none
    does. Backends pass their platform's own table the same way (``rules``)."""
    for failure_class, pattern in rules:
        for line in lines:
            if pattern.search(line):
                return failure_class, line.strip()
    return None


#: What keeps a job's pods waiting for good: the kubelet's image-pull and container-config waits
#: (pkg/kubelet/images/types.go: ErrImagePull, ImagePullBackOff, InvalidImageName,
#: ErrImageNeverPull; pkg/kubelet/container/sync_result.go: CreateContainerConfigError, a missing
#: Secret or ConfigMap key). The kubelet retries a pull with back-off, so a registry hiccup clears
#: within a poll or two: a job still blocked after ``BLOCKED_POLLS`` polls in a row is stopped
#: instead of holding its GPU nodes until ``timeout_minutes``; a bad image name at once.
BLOCKING_REASONS: dict[str, FailureClass] = {
    "ErrImagePull": FailureClass.CONFIG,
    "ImagePullBackOff": FailureClass.CONFIG,
    "InvalidImageName": FailureClass.CONFIG,
    "ErrImageNeverPull": FailureClass.CONFIG,
    "CreateContainerConfigError": FailureClass.CONFIG,
}


def blocked_class(reason_code: str, reason: str) -> FailureClass | None:
    """The class of a job whose pods wait for ``reason_code`` (``BLOCKING_REASONS``), None when
    waiting may clear it: a pull the registry limits or fails (``REGISTRY_HICCUP`` in ``reason``)
    is transient, retried later with back-off; any other is the reason's own class."""
    blocked = BLOCKING_REASONS.get(reason_code)
    if (
        blocked is FailureClass.CONFIG
        and reason_code != "InvalidImageName"
        and REGISTRY_HICCUP.search(reason)
    ):
        return FailureClass.TRANSIENT
    return blocked


class RecoveryAction(StrEnum):
    """What a retry does after a failure of some class."""

    #: Fail the task at once: no retry can fix it.
    FAIL = "fail"
    #: Retry from scratch.
    RETRY = "retry"
    #: Retry with ``RESUME_FROM`` set: the job continues from its newest complete checkpoint.
    RESUME = "resume"


#: The longest a rule may have a retry wait: a day.
MAX_DELAY_MINUTES = 24 * 60


class RecoveryRule(BaseModel):
    """The action for one failure class, and how long to wait before the retry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: RecoveryAction
    #: None: the task's own retry delay.
    delay_minutes: Annotated[float | None, Field(ge=0, le=MAX_DELAY_MINUTES)] = None
    #: Whether each retry waits twice as long as the one before (``delay_minutes`` first, at most
    #: ``MAX_DELAY_MINUTES``): a rate limit or a struggling registry is not met again at once.
    backoff: bool = False

    def delay(self, try_number: int) -> float | None:
        """Minutes to wait before the retry after try ``try_number`` (1: the first) failed."""
        if self.delay_minutes is None or not self.backoff:
            return self.delay_minutes
        return min(self.delay_minutes * 2 ** max(try_number - 1, 0), MAX_DELAY_MINUTES)

    def describe(self) -> str:
        wait = f" after {self.delay_minutes:g} min" if self.delay_minutes else ""
        if wait and self.backoff:
            wait += ", twice as long each try"
        return {
            RecoveryAction.FAIL: "fail without retrying",
            RecoveryAction.RETRY: f"retry from scratch{wait}",
            RecoveryAction.RESUME: f"retry{wait}, resuming from the newest complete checkpoint",
        }[self.action]


#: The default table: what a retry cannot fix fails at once; no room waits longer and tries again;
#: lost machines resume where the checkpoints left off. A pipeline overrides classes one by one.
DEFAULT_RECOVERY: dict[FailureClass, RecoveryRule] = {
    FailureClass.CONFIG: RecoveryRule(action=RecoveryAction.FAIL),
    FailureClass.DATA: RecoveryRule(action=RecoveryAction.FAIL),
    FailureClass.USER_CODE: RecoveryRule(action=RecoveryAction.FAIL),
    FailureClass.BUDGET: RecoveryRule(action=RecoveryAction.FAIL),
    FailureClass.CAPACITY: RecoveryRule(action=RecoveryAction.RESUME, delay_minutes=15),
    FailureClass.PREEMPTION: RecoveryRule(action=RecoveryAction.RESUME),
    FailureClass.INFRASTRUCTURE: RecoveryRule(action=RecoveryAction.RESUME),
    FailureClass.TRANSIENT: RecoveryRule(action=RecoveryAction.RESUME, delay_minutes=1, backoff=True),
}
