"""The contract every training backend (local, DLC, ACK/arena) implements.

Operators and triggers only talk to this protocol, so a pipeline switches platforms by changing
one parameter. Handles, statuses and log cursors are JSON-serializable because they cross process
boundaries: task_state_store, trigger kwargs and XCom.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.failures.origin import EndedNode
from aliyun_training.spec import JobOwner, TrainingJobSpec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aliyun_training.failures import Failure
    from aliyun_training.gpu_use import GpuReading


class JobState(StrEnum):
    """Platform-independent job state; each backend maps its raw statuses onto these."""

    PENDING = "pending"
    RUNNING = "running"
    #: A stop was asked for and the platform is still tearing the job down: its machines are not
    #: free yet, so nothing may be launched in its place until it is ``stopped``.
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED)


class JobHandle(BaseModel):
    """Enough to find a submitted job again from any process: stored in task_state_store."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    job_id: str
    name: str


class JobStatus(BaseModel):
    """A normalized snapshot of a job; ``raw`` keeps the platform's own wording for the log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: JobState
    raw: str
    reason: str = ""
    started: str | None = None
    finished: str | None = None
    failed_node: int | None = None
    exit_code: int | None = None
    #: Of a failed job, the nodes that ended badly, the platform's first to end first, where the
    #: platform reports each node's end (DLC's pods, ACK's): the monitor reads their output to find
    #: the node the failure began on (``failures.origin``). Empty where the backend decided that
    #: itself (local, which reads its nodes' output where it runs).
    ended_nodes: list[EndedNode] = Field(default_factory=list)
    #: The platform's own code for why the job is in this state, for classifying a failure: DLC's
    #: ReasonCode, a container's termination or waiting reason (OOMKilled, ImagePullBackOff,
    #: Evicted), the local node's signal name (SIGKILL).
    reason_code: str = ""
    #: Phases the job went through: [{"status", "start", "end", "seconds"}], oldest first.
    history: list[dict[str, Any]] = Field(default_factory=list)
    #: Read from a listing of many jobs (``StatusListing``) that lacks what this state needs from the
    #: job's own details (DLC: a pod being prepared, whose events name an image that cannot be
    #: pulled): whoever watches the job reads ``astatus`` while it is set.
    needs_details: bool = False

    def held_seconds(self, now: datetime) -> float:
        """How long the job has held its machines: from its start to its end, or to ``now`` while it
        has not ended (0 before it started); times without a zone are UTC."""
        if not self.started:
            return 0.0
        end = status_time(self.finished) if self.finished else now
        return max((end - status_time(self.started)).total_seconds(), 0.0)


class FoundJob(BaseModel):
    """A job found under a name, with the owner its tags name (None: they name no whole owner).

    A name is only a convention: anyone who may create jobs in the workspace or namespace can
    create one under it, so whether the job is ours is decided by its owner, never by its name.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    handle: JobHandle
    owner: JobOwner | None


def same_owner(launching: JobOwner | None, found: JobOwner | None) -> bool:
    """Whether a job found under a name is the one ``launching`` would have launched: its tags name
    the same task instance of the same installation, or, for a job launched for no task instance
    (``spec.owner`` unset: a backend used on its own), no owner at all."""
    return found is None if launching is None else launching.is_task(found)


class LaunchedJob(BaseModel):
    """A job of ours the platform still runs, with the installation and task instance that launched it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    handle: JobHandle
    owner: JobOwner
    state: JobState
    created: str | None = None


def node_line(node: int, text: str) -> str:
    """A line of a job's output as the task log shows it: prefixed with the node (its RANK) it came
    from, the same on every backend."""
    return f"[node-{node}] {text}"


class LogChunk(BaseModel):
    """New log lines and the opaque cursor to pass to the next ``logs`` call."""

    model_config = ConfigDict(extra="forbid")

    lines: list[str] = Field(default_factory=list)
    cursor: dict[str, Any] = Field(default_factory=dict)
    #: The read stopped at its size bound with more already written: read again before waiting.
    more: bool = False


@dataclass(frozen=True)
class PlannedSubmission:
    """One request ``submit`` would send, as a dry run shows it: the service, the action, the body."""

    service: str
    action: str
    body: Any


class TrainingBackend(Protocol):
    """Where a job runs. Each call has an ``a``-prefixed async twin that the trigger awaits.

    Every call stands alone: a backend rebuilt from ``config`` in another process (a retried
    worker, the triggerer) answers each of them, ``logs`` and ``tail`` included, with no earlier
    call on the same instance. What one call read may serve the next only for moments (a poll's
    status, then its logs), never as the only way to know the job.
    """

    name: str

    @property
    def config(self) -> dict[str, Any]:
        """JSON-serializable settings that rebuild this backend in another process."""

    def check(self, spec: TrainingJobSpec, name: str) -> None:
        """Refuse ``spec`` sent as ``name`` for what the platform would refuse only after a wait (in a
        queue, or with pods Pending), with no call (SpecError). The training operator checks before
        it looks for a job or sends one, and ``submit`` checks what it sends."""

    def submit(self, spec: TrainingJobSpec, name: str) -> JobHandle:
        """Launch ``spec`` under the deterministic ``name``."""

    def planned_requests(self, spec: TrainingJobSpec, name: str) -> list[PlannedSubmission]:
        """What ``submit`` would send for ``spec`` as ``name``, built by the code ``submit`` uses,
        with no call: what ``submit`` reads first (ids, secrets, a VPC's CIDR blocks) is a
        placeholder in angle brackets."""

    def find(self, name: str, since: datetime | None = None) -> FoundJob | None:
        """Return the newest job launched under ``name`` and the owner it names, or None.

        ``since`` is a time no job of that name can predate (the run's creation): a platform whose
        job search only looks back a fixed window by default (DLC ListJobs: 7 days) searches from it.
        """

    def status(self, handle: JobHandle) -> JobStatus:
        """Return the job's current normalized status."""

    def logs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        """Return log lines written since ``cursor`` (all lines when None), without duplicates."""

    def tail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        """Return the last ``lines`` log lines of one node, for failure messages."""

    def stop(self, handle: JobHandle) -> None:
        """Stop the job and every process or pod it started; a no-op on a finished job."""

    def failure_details(self, handle: JobHandle) -> list[str]:
        """Platform evidence for a failed job (events, health checks), for the task error."""

    def classify(self, status: JobStatus, details: list[str], tail: list[str]) -> Failure:
        """Name the class of a failed job from its status, ``failure_details`` and its failing
        node's last log lines; no I/O, so the trigger and the worker decide alike."""

    def launched(self, installation: str) -> list[LaunchedJob]:
        """Every job ``installation`` launched that has not ended (pending, running or stopping),
        with its owner: what the reconciler checks against the task instances that should be
        waiting for them. Selected by the platform where it can (tags, labels), and again here: a
        job whose tags do not name a whole owner of ``installation`` is never returned."""

    async def astatus(self, handle: JobHandle) -> JobStatus: ...

    async def alogs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk: ...

    async def atail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]: ...

    async def astop(self, handle: JobHandle) -> None: ...

    async def afailure_details(self, handle: JobHandle) -> list[str]: ...

    async def agpu_reading(self, handle: JobHandle, since: datetime) -> GpuReading:
        """What the job's GPUs did since ``since``: samples, or why none can be read (``unavailable``).

        Information, never a decision: a metric that cannot be read (no exporter, no permission, an
        API error) is an ``unavailable`` reading with the reason, never an exception that would
        fail the job's monitoring.
        """

    def output_uri(self, handle: JobHandle) -> str | None:
        """Where the job wrote its checkpoints and metrics, if the backend knows."""

    def console_url(self, handle: JobHandle) -> str | None:
        """A link to the job in the platform's console, if it has one."""


@runtime_checkable
class StatusListing(Protocol):
    """A backend that answers many jobs' statuses with one listing: the triggers of a triggerer that
    watch jobs of one ``batch_key`` share one poller (``triggers/fleet.py``) instead of asking the
    platform about each job on every poll."""

    @property
    def batch_key(self) -> str:
        """What jobs must share for one listing to answer them all and for one backend instance to
        read them all: the connection, region and workspace or namespace, and every setting a read
        depends on."""

    async def alisted_statuses(self, handles: Sequence[JobHandle]) -> dict[str, JobStatus]:
        """The statuses of ``handles`` by job id, in as few calls as the platform allows: read from its
        listing alone, without the details ``astatus`` adds (a queue position, pod events). A job the
        listing did not answer is left out; the caller asks ``astatus`` about it."""

    def forget(self, handle: JobHandle) -> None:
        """Drop what this instance kept of a job no longer watched, so a long-lived instance shared
        by many jobs does not grow with every job it ever read."""


def same_state(one: JobStatus, other: JobStatus) -> bool:
    """Whether two sightings of a job show the same state: what a change of would need the job's
    details read and its transition logged (its phase times may differ)."""
    return (one.state, one.raw, one.reason_code, one.reason, one.failed_node, one.finished) == (
        other.state,
        other.raw,
        other.reason_code,
        other.reason,
        other.failed_node,
        other.finished,
    )


if TYPE_CHECKING:
    # A mixin of backends: the type checker sees the protocol whose sync calls it offloads.
    _Backend = TrainingBackend
else:
    _Backend = object


class OffloadedAsyncMixin(_Backend):
    """Async twins for a backend whose calls block (files, processes): run them in a worker thread."""

    async def astatus(self, handle: JobHandle) -> JobStatus:
        return await asyncio.to_thread(self.status, handle)

    async def alogs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        return await asyncio.to_thread(self.logs, handle, cursor)

    async def atail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        return await asyncio.to_thread(self.tail, handle, node, lines)

    async def astop(self, handle: JobHandle) -> None:
        await asyncio.to_thread(self.stop, handle)

    async def afailure_details(self, handle: JobHandle) -> list[str]:
        return await asyncio.to_thread(self.failure_details, handle)


def status_time(value: str) -> datetime:
    """A status' ISO time (``started``, ``finished``) as an aware datetime (UTC when it names no zone)."""
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
