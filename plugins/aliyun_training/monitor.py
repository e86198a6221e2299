"""One polling step of a running job, shared by the trigger (deferred) and the operator (blocking).

Both paths must report the same things: every status transition once, every new log line once
(a poll's lines before its status, so the final status follows the last line), and on a failure
the failing node's last lines plus the platform's evidence. The reporting lives
here once; ``poll``/``apoll`` and ``outcome``/``aoutcome`` only differ in how they wait for I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.backend_catalog import backend_record
from aliyun_training.backends.base import (
    JobHandle,
    JobState,
    JobStatus,
    LogChunk,
    TrainingBackend,
    same_state,
)
from aliyun_training.failures import Failure, FailureClass, blocked_class
from aliyun_training.failures.origin import ORIGIN_CANDIDATES, origin_order
from aliyun_training.failures.torchrun import EVIDENCE_LINES, failure_excerpt
from aliyun_training.installation import batched_status, steady_log_seconds
from aliyun_training.live import LiveRecord  # noqa: TC001  (a field of JobOutcome, which pydantic reads)
from aliyun_training.stage_records import OutcomeStatus, TriggerOutcome

if TYPE_CHECKING:
    import logging

    from aliyun_training.live import LiveView

#: How many log lines of the failing node a failed task shows in its error.
FAILURE_TAIL_LINES = 50

#: Jobs one listing request answers (DLC ListJobs' largest page; ACK's names per label selector).
LISTING_JOBS = 100
#: How often the pipelines' training task polls its job (``pipelines/factory.py``).
TRAIN_POLL_SECONDS = 5.0


@dataclass(frozen=True)
class MonitoringRate:
    """API requests a minute that watching one steadily running job costs: ``alone`` when it is the
    only job of its account and workspace (or namespace) in the triggerer, ``in_fleet`` when it is
    one of ``LISTING_JOBS`` or more listed together. A change of state adds a read of its details
    and logs."""

    alone: float
    in_fleet: float


def monitoring_rate(backend: str, nodes: int, poll_seconds: float) -> MonitoringRate:
    """What ``TrainingJobTrigger`` asks of the platform a minute for a job of ``nodes`` nodes, under
    this deployment's ``batched_status`` and ``steady_log_seconds``: alone (or without batching), a
    status read and a log read per node every poll; among others, one listing a poll shared by the
    jobs it answers and a log read per node every ``steady_log_seconds``."""
    status = backend_record(backend).status_requests
    polls = 60 / poll_seconds
    if status == 0:
        return MonitoringRate(0.0, 0.0)
    alone = (status + nodes) * polls
    if not batched_status():
        return MonitoringRate(alone, alone)
    return MonitoringRate(alone, status * polls / LISTING_JOBS + nodes * 60 / steady_log_seconds())


class JobOutcome(TriggerOutcome[JobHandle]):
    """How a job ended: what the operator turns into a result or an error, deferred or not."""

    #: The job's last status; None when the trigger lost track of the job (``error``).
    job_status: JobStatus | None = None
    #: A failed job's failing node, its last log lines and the platform's evidence.
    failed_node: int | None = None
    tail: list[str] = Field(default_factory=list)
    details: list[str] = Field(default_factory=list)
    #: Why a failed job failed, as its backend classified it (``budget`` when the monitor stopped it).
    failure: Failure | None = None
    #: The platform's last word on why the job waited before it ran (queue position and reason).
    waited_because: str = ""
    #: What the job was last seen doing: progress, GPU use, cost, the notices sent (where watched
    #: with a ``LiveView``).
    live: LiveRecord | None = None


class GpuBudget(BaseModel):
    """The GPU-hours a job may still use: the run's ``max_gpu_hours`` less its earlier tries'."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: int
    hours_left: float

    def used(self, status: JobStatus) -> float:
        """GPU-hours the job has used so far: its GPUs times the time since it started running."""
        if status.state is not JobState.RUNNING:
            return 0.0
        return self.gpus * status.held_seconds(datetime.now(UTC)) / 3600

    def exceeded(self, status: JobStatus) -> bool:
        return self.gpus > 0 and self.used(status) > self.hours_left


#: Blocking reasons no retry by the kubelet can clear: the job is stopped at the first sight.
_BLOCKED_AT_ONCE = frozenset({"InvalidImageName", "ErrImageNeverPull"})
BLOCKED_POLLS = 3


class JobMonitor:
    """Polls one job, logging transitions and new log lines as they happen."""

    def __init__(
        self,
        backend: TrainingBackend,
        handle: JobHandle,
        log: logging.Logger | Any,
        cursor: dict[str, Any] | None = None,
        last_raw_status: str | None = None,
        budget: GpuBudget | None = None,
        waited_because: str = "",
        view: LiveView | None = None,
    ) -> None:
        self.backend = backend
        self.handle = handle
        self.log = log
        self.cursor = cursor
        self.last_raw_status = last_raw_status
        self.last_reason = ""
        self.budget = budget
        #: Polls in a row that found the job blocked by one of ``BLOCKING_REASONS``.
        self.blocked_polls = 0
        #: The last reason a poll gave for the job waiting (pending): why it queued, for the report.
        self.waited_because = waited_because
        #: What the run page and the progress lines are made of (None: the job is only logged).
        self.view = view
        #: Of a job watched through a shared listing (``apoll_sighted``): the listing's last sighting,
        #: the last status read with its details, when the sighting last changed and when the logs
        #: were last read (monotonic seconds).
        self._last_sighting: JobStatus | None = None
        self._detailed: JobStatus | None = None
        self._changed_at: float | None = None
        self._logs_read_at: float | None = None

    def poll(self) -> JobStatus:
        """Read the status once, log the new log lines and then what changed, and return the status.

        The status is read first, so a finished job's logs are read to their end; it is logged last,
        so a job's final status comes after its last line.
        """
        status = self.backend.status(self.handle)
        while self._emit(self.backend.logs(self.handle, self.cursor)):
            pass
        return self._record(status)

    async def apoll(self) -> JobStatus:
        status = await self.backend.astatus(self.handle)
        while self._emit(await self.backend.alogs(self.handle, self.cursor)):
            pass
        return self._record(status)

    async def apoll_sighted(self, sighting: JobStatus | None, log_interval: float | None = None) -> JobStatus:
        """One poll of a job a shared listing answered for (``sighting``; None: the listing left it
        out), logged as ``apoll`` logs it, with fewer calls.

        The job's details (``astatus``: GetJob, its queue position, pod events) are read only when
        the sighting differs from the last one, when the job has ended, while the sighting says
        this state needs them (``JobStatus.needs_details``: a pod being prepared, whose events tell
        an image that cannot be pulled, which ``give_up`` counts), or when the listing left the job
        out (a job that is gone fails there with the platform's own error).

        Its logs are read every poll for ``log_interval`` seconds after a change between two
        sightings (a job starting, restarting or failing shows each line at once) and at the end,
        else every ``log_interval`` seconds (None: every poll): a steady job's lines come in
        batches, none lost, since each read starts where the last ended.
        """
        last, self._last_sighting = self._last_sighting, sighting
        changed = sighting is None or self._changed(sighting, last)
        if changed and last is not None:
            # Moved on between two sightings: it starts, restarts or fails now. The first sighting
            # differs only from what the deferring task saw, maybe hours ago (a triggerer restart).
            self._changed_at = time.monotonic()
        if changed or sighting is None or sighting.state.is_terminal or sighting.needs_details:
            status = self._detailed = await self.backend.astatus(self.handle)
        else:
            status = self._detailed or sighting
        if self._logs_due(status, log_interval):
            self._logs_read_at = time.monotonic()
            while self._emit(await self.backend.alogs(self.handle, self.cursor)):
                pass
        return self._record(status)

    def _changed(self, sighting: JobStatus, last: JobStatus | None) -> bool:
        """Whether the job moved on since the last sighting (the first: since the deferring poll)."""
        return sighting.raw != self.last_raw_status if last is None else not same_state(sighting, last)

    def _logs_due(self, status: JobStatus, log_interval: float | None) -> bool:
        """Whether a sighted poll reads the logs: at the end, on the first poll, within
        ``log_interval`` of a change, and once ``log_interval`` has passed since the last read."""
        now = time.monotonic()
        return (
            log_interval is None
            or status.state.is_terminal
            or self._logs_read_at is None
            or now - self._logs_read_at >= log_interval
            or (self._changed_at is not None and now - self._changed_at < log_interval)
        )

    def give_up(self, status: JobStatus) -> JobOutcome | None:
        """The outcome of a job that is not finished but must not go on, which the caller stops: it
        used the GPU-hours left to its run (``budget``), or its pods have been blocked by a reason
        waiting does not fix (``BLOCKING_REASONS``) for ``BLOCKED_POLLS`` polls; None otherwise."""
        if status.state.is_terminal:
            return None
        if self.budget is not None and self.budget.exceeded(status):
            return self._budget_outcome(status)
        blocked = blocked_class(status.reason_code, status.reason)
        self.blocked_polls = self.blocked_polls + 1 if blocked else 0
        if blocked and (self.blocked_polls >= BLOCKED_POLLS or status.reason_code in _BLOCKED_AT_ONCE):
            evidence = f"{status.reason_code} for {self.blocked_polls} polls in a row: {status.reason}"
            self.log.error("Job %s is blocked (%s): stopping it", self.handle.job_id, evidence)
            failure = Failure(failure_class=blocked, evidence=[evidence])
            stopped = status.model_copy(update={"reason": evidence})
            return self._outcome(stopped, failure=failure, ended=OutcomeStatus.FAILED)
        return None

    def _budget_outcome(self, status: JobStatus) -> JobOutcome:
        """The outcome of a job stopped for using up its run's GPU-hours (class ``budget``)."""
        assert self.budget is not None
        used = self.budget.used(status)
        evidence = (
            f"used {used:.4f} GPU-hours of the {self.budget.hours_left:.4f} left to the run's max_gpu_hours"
        )
        self.log.error("Job %s %s: stopping it", self.handle.job_id, evidence)
        stopped = status.model_copy(update={"reason": evidence})
        return self._outcome(
            stopped,
            failure=Failure(failure_class=FailureClass.BUDGET, evidence=[evidence]),
            ended=OutcomeStatus.FAILED,
        )

    def outcome(self, status: JobStatus) -> JobOutcome:
        """The outcome of a finished job, with the failing node's evidence when it failed."""
        if status.state is not JobState.FAILED:
            return self._outcome(status)
        tails = {node: self.backend.tail(self.handle, node, EVIDENCE_LINES) for node in _candidates(status)}
        status = _from_origin(status, tails)
        node = self._failed_node(status)
        return self._failed(status, node, tails[node], self.backend.failure_details(self.handle))

    async def aoutcome(self, status: JobStatus) -> JobOutcome:
        if status.state is not JobState.FAILED:
            return self._outcome(status)
        tails = {
            node: await self.backend.atail(self.handle, node, EVIDENCE_LINES) for node in _candidates(status)
        }
        status = _from_origin(status, tails)
        node = self._failed_node(status)
        return self._failed(status, node, tails[node], await self.backend.afailure_details(self.handle))

    def _failed(self, status: JobStatus, node: int, tail: list[str], details: list[str]) -> JobOutcome:
        """Classify from the node's whole evidence window; keep the excerpt that shows the error."""
        failure = self.backend.classify(status, details, tail)
        self.log.info("Job %s failed: %s", self.handle.job_id, failure.describe())
        return self._outcome(status, node, failure_excerpt(tail, FAILURE_TAIL_LINES), details, failure)

    def _record(self, status: JobStatus) -> JobStatus:
        """Log a transition, or a new reason within the same status (e.g. why pods stay pending)."""
        if status.raw != self.last_raw_status:
            reason = f" ({status.reason})" if status.reason else ""
            self.log.info(
                "Job %s: %s -> %s%s",
                self.handle.job_id,
                self.last_raw_status or "submitted",
                status.raw,
                reason,
            )
            self.last_raw_status = status.raw
        elif status.reason and status.reason != self.last_reason:
            self.log.info("Job %s: %s (%s)", self.handle.job_id, status.raw, status.reason)
        self.last_reason = status.reason
        if status.state is JobState.PENDING and status.reason:
            self.waited_because = status.reason
        if self.view is not None:
            now = datetime.now(UTC)
            self.view.see_status(status, now)
            progress = self.view.progress_line(now)
            if progress:
                self.log.info("Job %s: %s", self.handle.job_id, progress)
        return status

    def _emit(self, chunk: LogChunk) -> bool:
        """Log new lines and advance the cursor; True while the backend has more already written."""
        self.cursor = chunk.cursor
        for line in chunk.lines:
            self.log.info("%s", line)
        if self.view is not None:
            self.view.see_lines(chunk.lines, datetime.now(UTC))
        return chunk.more

    @staticmethod
    def _failed_node(status: JobStatus) -> int:
        return status.failed_node if status.failed_node is not None else 0

    def _outcome(
        self,
        status: JobStatus,
        failed_node: int | None = None,
        tail: list[str] | None = None,
        details: list[str] | None = None,
        failure: Failure | None = None,
        ended: OutcomeStatus | None = None,
    ) -> JobOutcome:
        return JobOutcome(
            status=ended or OutcomeStatus(status.state.value),
            handle=self.handle,
            job_status=status,
            failed_node=failed_node,
            tail=tail or [],
            details=details or [],
            failure=failure,
            waited_because=self.waited_because,
            live=self.view.record(datetime.now(UTC)) if self.view is not None else None,
        )


def _candidates(status: JobStatus) -> list[int]:
    """The nodes whose output a failed job's outcome reads: the first ``ORIGIN_CANDIDATES`` of those
    the platform reports ended badly, else the one it names (node 0 when it names none)."""
    ended = [ended.node for ended in status.ended_nodes[:ORIGIN_CANDIDATES]]
    return ended or [status.failed_node if status.failed_node is not None else 0]


def _from_origin(status: JobStatus, tails: dict[int, list[str]]) -> JobStatus:
    """``status`` naming the node the failure began on (``failures.origin``), and its exit code,
    instead of the one the platform saw end first."""
    if len(status.ended_nodes) < 2:
        return status
    origin = origin_order(status.ended_nodes[:ORIGIN_CANDIDATES], tails)[0]
    return status.model_copy(update={"failed_node": origin.node, "exit_code": origin.exit_code})
