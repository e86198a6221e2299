"""The live record of a running training job: what the run page shows before the run report exists.

The trigger watching the job (``triggers/training.py``) keeps it as the ``train`` task's XCom
:data:`LIVE_KEY`, rewritten whenever a poll changed what it shows and at least every
``LIVE_SECONDS``: the job's state and its history, the training script's progress and ETA
(``progress.py``), its GPU use (``gpu_use.py``), the GPU-hours and money so far, the deadline it is
held to, the last lines of each node and the notices already sent for it.

A user who may edit the run can write XComs through the REST API, so the record is sealed as a task
state is (``seals``): the page shows only a record whose seal this deployment made for this task
instance, and a trigger that restarts reads back only such a record (so a notice it already sent is
not sent again, and a forged record cannot silence one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aliyun_training.backends.base import status_time
from aliyun_training.deadline import ExpectedDuration, at_risk, missed
from aliyun_training.gpu_use import GpuSample, GpuUse, summarize, sustained_idle
from aliyun_training.notifications import NotifierSpec
from aliyun_training.progress import (
    ProgressEstimate,
    ProgressPoint,
    ProgressTracker,
    describe_progress,
    parse_progress,
)
from aliyun_training.seals import opened_state, sealed_state

if TYPE_CHECKING:
    from collections.abc import Iterable

    from aliyun_training.backends.base import JobStatus
    from aliyun_training.gpu_use import GpuReading

#: The ``train`` task's XCom key of the live record.
LIVE_KEY = "live"
#: The longest the record goes unwritten while the job runs (a page refreshes at half of it).
LIVE_SECONDS = 30.0
#: Lines of each node the record keeps.
TAIL_LINES = 20
#: State changes the record keeps (the first and the latest).
HISTORY_LIMIT = 50
#: How often the task log shows the job's progress while it reports any.
PROGRESS_LOG_SECONDS = 60.0
#: How often the job's GPU use is read (CloudMonitor's and Prometheus' finest useful period).
GPU_READ_SECONDS = 60.0
#: The longest a GPU read may take before the poll goes on without it.
GPU_READ_TIMEOUT = 10.0
#: GPU samples kept for the summary (a day of one GPU at one a minute; older ones dropped first).
GPU_SAMPLES_KEPT = 1440 * 8
#: A node's lines start with its name, as every backend's log reader prefixes them.
_NODE_PREFIX = re.compile(r"^\[(node-\d+)\] ?")
#: What the announcements are kept as in ``LiveRecord.sent``.
GPUS_IDLE = "gpus_idle"
DEADLINE_AT_RISK = "deadline_at_risk"
DEADLINE_MISSED = "deadline_missed"


class StateChange(BaseModel):
    """The job entered ``raw`` (the platform's own status word) at ``at``, for ``reason``."""

    model_config = ConfigDict(frozen=True)

    at: datetime
    raw: str
    reason: str = ""


class LiveCost(BaseModel):
    """What the job has cost so far: GPU-hours, and money where the environment prices a GPU-hour."""

    model_config = ConfigDict(frozen=True)

    gpu_hours: float
    money: float | None = None
    currency: str | None = None


class LiveDeadline(BaseModel):
    """When the job should be done by: ``expected_seconds`` of running (declared, or the median of
    the pipeline's recent successful jobs: ``source`` says which) times the pipeline's tolerance,
    from its start. ``at_risk`` once the ETA passed it; ``missed`` once the clock did."""

    model_config = ConfigDict(frozen=True)

    expected_seconds: float
    source: str
    deadline: datetime
    at_risk: bool = False
    missed: bool = False


class LiveRecord(BaseModel):
    """One job's live state, as the run page shows it while the job runs (and after, until the
    run report is published)."""

    job_id: str
    backend: str
    console_url: str | None = None
    #: The normalised state (``JobState``'s value) and the platform's own status word.
    state: str
    raw_status: str
    updated: datetime
    started: datetime | None = None
    finished: datetime | None = None
    history: list[StateChange] = Field(default_factory=list)
    progress: ProgressEstimate | None = None
    points: list[ProgressPoint] = Field(default_factory=list)
    gpu: GpuUse | None = None
    cost: LiveCost | None = None
    deadline: LiveDeadline | None = None
    #: Node (as a string) -> its last ``TAIL_LINES`` lines, with secrets masked.
    tails: dict[str, list[str]] = Field(default_factory=dict)
    #: The notices already sent for this job (``NotifyEvent`` values, and "gpus_idle" for the warning).
    sent: list[str] = Field(default_factory=list)

    @property
    def running(self) -> bool:
        """Whether the job has not ended: the page keeps refreshing."""
        return self.state in ("pending", "running")


class LiveSettings(BaseModel):
    """What the operator hands the trigger so it keeps the job's live record and announces: the
    task instance the record belongs to, the job's GPUs and their price, its expected duration,
    the pipeline's notifiers and what earlier tries of the task already announced."""

    model_config = ConfigDict(frozen=True)

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    console_url: str | None = None
    #: The run page's address, which notices link to.
    run_page: str | None = None
    gpus: int = 0
    per_gpu_hour: float | None = None
    currency: str | None = None
    expected: ExpectedDuration | None = None
    notifications: list[NotifierSpec] = Field(default_factory=list)
    sent: list[str] = Field(default_factory=list)

    def view(self, job_id: str, backend: str, previous: LiveRecord | None) -> LiveView:
        price = (self.per_gpu_hour, self.currency or "") if self.per_gpu_hour else None
        return LiveView(
            job_id=job_id,
            backend=backend,
            console_url=self.console_url,
            gpus=self.gpus,
            price=price,
            expected=self.expected,
            previous=previous,
            sent=self.sent,
        )


def _state_key(map_index: int) -> str:
    return f"{LIVE_KEY}:{map_index}"


class _TaskInstance:
    """What a seal binds to, for a record written where no task instance object exists (a trigger)."""

    def __init__(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index = dag_id, run_id, task_id, map_index


def seal_live(
    record: LiveRecord, dag_id: str, run_id: str, task_id: str, map_index: int = -1
) -> dict[str, Any]:
    """``record`` as the XCom value the page and a restarted trigger trust: the value and its seal."""
    ti = _TaskInstance(dag_id, run_id, task_id, map_index)
    return sealed_state(record.model_dump(mode="json"), ti, _state_key(map_index))


def open_live(stored: Any, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> LiveRecord | None:
    """The live record in ``stored`` (the XCom value), or None when there is none, its seal is not
    this task instance's (written through the REST API, or another task's), or it is not a record."""
    value = opened_state(stored, _TaskInstance(dag_id, run_id, task_id, map_index), _state_key(map_index))
    if value is None:
        return None
    try:
        return LiveRecord.model_validate(value)
    except ValidationError:
        return None


@dataclass(frozen=True)
class Announcement:
    """Something to say once per job: ``key`` (kept in ``sent``), the text, and whether it is a
    notice to the pipeline's notifiers (a deadline) or a warning in the task log only (idle GPUs)."""

    key: str
    text: str
    notify: bool


class LiveView:
    """Builds one job's live record from what its monitor sees: log lines (progress, tails), statuses
    (history, cost), GPU readings, and decides what to announce, each thing once.

    ``previous`` is the record a trigger before this one wrote (a triggerer restart): its history,
    progress points and ``sent`` carry on, so nothing already announced is announced again. ``sent``
    adds what earlier tries of the task announced (kept by the task across its tries).
    """

    def __init__(
        self,
        *,
        job_id: str,
        backend: str,
        console_url: str | None,
        gpus: int,
        price: tuple[float, str] | None = None,
        expected: ExpectedDuration | None = None,
        previous: LiveRecord | None = None,
        sent: Iterable[str] = (),
    ) -> None:
        self.job_id, self.backend, self.console_url = job_id, backend, console_url
        self.gpus, self.price, self.expected = gpus, price, expected
        self.history: list[StateChange] = list(previous.history) if previous else []
        self.tracker = ProgressTracker(list(previous.points) if previous else None)
        self.sent: list[str] = list(dict.fromkeys([*(previous.sent if previous else []), *sent]))
        self.tails: dict[str, list[str]] = dict(previous.tails) if previous else {}
        self.status: JobStatus | None = None
        self.gpu_samples: list[GpuSample] = []
        self.gpu_source = ""
        self.gpu_unavailable = ""
        self._progress_logged_at: datetime | None = None
        self._eta_logged = False
        self._gpu_read_at: datetime | None = None

    # -- what the monitor sees -------------------------------------------------------------------

    def see_lines(self, lines: list[str], now: datetime) -> None:
        """Take the progress reports and each node's last lines out of a log read's new lines."""
        for line in lines:
            report = parse_progress(line)
            if report is not None:
                self.tracker.observe(report, now)
            match = _NODE_PREFIX.match(line)
            node, text = (match.group(1), line[match.end() :]) if match else ("job", line)
            self.tails[node] = [*self.tails.get(node, []), text][-TAIL_LINES:]

    def see_status(self, status: JobStatus, now: datetime) -> None:
        """Record a change of the platform's status (and of its reason within one status)."""
        last = self.history[-1] if self.history else None
        if last is None or (last.raw, last.reason) != (status.raw, status.reason):
            self.history.append(StateChange(at=now, raw=status.raw, reason=status.reason))
            if len(self.history) > HISTORY_LIMIT:
                self.history = [self.history[0], *self.history[-(HISTORY_LIMIT - 1) :]]
        self.status = status

    def gpu_read_due(self, now: datetime) -> bool:
        """Whether to read GPU use now: the job runs and ``GPU_READ_SECONDS`` passed since the last read."""
        running = self.status is not None and self.status.state.value == "running"
        due = self._gpu_read_at is None or (now - self._gpu_read_at).total_seconds() >= GPU_READ_SECONDS
        return running and due

    def gpu_since(self) -> datetime:
        """Where the next GPU read starts: after the last sample, else at the job's start."""
        if self.gpu_samples:
            return max(sample.at for sample in self.gpu_samples)
        return self.started or datetime.now(UTC) - timedelta(seconds=GPU_READ_SECONDS)

    def see_gpu(self, reading: GpuReading, now: datetime) -> None:
        self._gpu_read_at = now
        self.gpu_source, self.gpu_unavailable = reading.source, reading.unavailable
        last = self.gpu_samples[-1].at if self.gpu_samples else None
        self.gpu_samples.extend(s for s in reading.samples if last is None or s.at > last)
        del self.gpu_samples[:-GPU_SAMPLES_KEPT]

    # -- what it derives -------------------------------------------------------------------------

    @property
    def started(self) -> datetime | None:
        return _moment(self.status.started) if self.status else None

    def gpu_hours(self, now: datetime) -> float:
        """GPU-hours so far: the job's GPUs times the time it has run (to its end once ended)."""
        return self.gpus * self.status.held_seconds(now) / 3600 if self.status else 0.0

    def progress_line(self, now: datetime) -> str | None:
        """The progress to log now: at once when the first report arrives and when the first ETA
        can be told, then at least every ``PROGRESS_LOG_SECONDS`` while the job reports any."""
        estimate = self.tracker.estimate()
        if estimate is None:
            return None
        logged = self._progress_logged_at
        first_eta = estimate.eta is not None and not self._eta_logged
        if not first_eta and logged is not None and (now - logged).total_seconds() < PROGRESS_LOG_SECONDS - 1:
            return None
        self._progress_logged_at = now
        self._eta_logged = self._eta_logged or estimate.eta is not None
        return describe_progress(estimate, now)

    def deadline(self, now: datetime) -> LiveDeadline | None:
        started = self.started
        if self.expected is None or started is None:
            return None
        deadline = self.expected.deadline(started)
        running = self.status is not None and self.status.state.value in ("pending", "running")
        estimate = self.tracker.estimate()
        return LiveDeadline(
            expected_seconds=self.expected.seconds,
            source=self.expected.source,
            deadline=deadline,
            at_risk=running and at_risk(estimate.eta if estimate else None, deadline, now),
            missed=running and missed(deadline, now),
        )

    def announcements(self, now: datetime) -> list[Announcement]:
        """What is to be said now and was not said for this job yet; each is marked said."""
        due: list[Announcement] = []
        deadline = self.deadline(now)
        if deadline is not None and deadline.at_risk:
            estimate = self.tracker.estimate()
            eta = estimate.eta if estimate else None
            due.append(
                Announcement(
                    DEADLINE_AT_RISK,
                    f"job {self.job_id} will overrun its deadline {_clock(deadline.deadline)}: its ETA is "
                    f"{_clock(eta)} (expected {_minutes(deadline.expected_seconds)}, {deadline.source})",
                    notify=True,
                )
            )
        if deadline is not None and deadline.missed:
            due.append(
                Announcement(
                    DEADLINE_MISSED,
                    f"job {self.job_id} is still running past its deadline {_clock(deadline.deadline)} "
                    f"(expected {_minutes(deadline.expected_seconds)}, {deadline.source})",
                    notify=True,
                )
            )
        idle = sustained_idle(self.gpu_samples)
        if idle is not None:
            due.append(
                Announcement(
                    GPUS_IDLE, f"job {self.job_id}: {idle} (slow data loading or a straggler?)", notify=False
                )
            )
        fresh = [a for a in due if a.key not in self.sent]
        self.sent.extend(a.key for a in fresh)
        return fresh

    def record(self, now: datetime) -> LiveRecord:
        status = self.status
        hours = self.gpu_hours(now)
        return LiveRecord(
            job_id=self.job_id,
            backend=self.backend,
            console_url=self.console_url,
            state=status.state.value if status else "pending",
            raw_status=status.raw if status else "",
            updated=now,
            started=self.started,
            finished=_moment(status.finished) if status else None,
            history=self.history,
            progress=self.tracker.estimate(),
            points=self.tracker.points,
            gpu=summarize(self.gpu_samples, self.gpu_source, self.gpu_unavailable)
            if self.gpu_source
            else None,
            cost=LiveCost(
                gpu_hours=round(hours, 4),
                money=round(hours * self.price[0], 2) if self.price else None,
                currency=self.price[1] if self.price else None,
            ),
            deadline=self.deadline(now),
            tails=self.tails,
            sent=self.sent,
        )


def _moment(value: str | None) -> datetime | None:
    return status_time(value) if value else None


def _clock(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else "unknown"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"
