"""Reading a DLC job's logs: GetPodLogs answers lines without times, filtered by StartTime and
capped at MaxLines, so streaming re-reads a little and drops what it saw, and a tail is searched
for with bounded windows (:class:`TailSearch`)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from aliyun_training.backends.base import JobState
from aliyun_training.backends.dlc.status import (
    DLC_STATES,
    dlc_time,
    epoch_seconds,
    node_order,
)

log = logging.getLogger(__name__)

#: Statuses in which the job's pods exist and have written logs.
LOGGING_STATUSES = frozenset(
    {
        "Running",
        "Restarting",
        "Stopping",
        "SucceededReserving",
        "FailedReserving",
        "Succeeded",
        "Failed",
        "Stopped",
    }
)


#: Each log poll re-reads this many seconds before the previous one (clock skew between us and DLC);
#: the re-read lines are recognised against the last lines seen and dropped.
LOG_OVERLAP_SECONDS = 2.0


#: Lines kept in the cursor to recognise re-read lines.
LOG_MEMORY_LINES = 100


#: How long the pods and times a GetJob answered serve the log reads after it: a monitor reads the
#: logs right after the status; a later read, or one on a backend that never read it, asks GetJob.
LOG_VIEW_MAX_AGE_SECONDS = 5.0


#: GetPodLogs answers at most MaxLines lines, "Default value: 2000" (GetPodLogsRequest docstring).
POD_LOGS_MAX_LINES = 2000


#: A tail read's first window before the job's end, how much each step widens or narrows it, and
#: how many GetPodLogs requests one tail may take (a bounded search, see :class:`TailSearch`).
TAIL_FIRST_WINDOW_SECONDS = 60.0


TAIL_WINDOW_FACTOR = 8.0


TAIL_MAX_REQUESTS = 8


@dataclass(frozen=True)
class LogView:
    """What reading a job's logs takes from one GetJob answer."""

    #: The job's pods in node order (master first); none before the job has run.
    pods: tuple[str, ...]
    #: GmtRunningTime as DLC writes it: where the first log poll starts.
    since: str | None
    #: When the job can first have logged, and when it finished (None while it runs), epoch seconds.
    first: float
    finished: float | None
    #: When this backend read it (monotonic seconds).
    read_at: float

    @classmethod
    def of(cls, job: Any) -> LogView:
        terminal = DLC_STATES.get(job.status, JobState.RUNNING).is_terminal
        return cls(
            pods=tuple(pod.pod_id for pod in node_order(job)) if job.status in LOGGING_STATUSES else (),
            since=job.gmt_running_time,
            first=epoch_seconds(job.gmt_running_time or job.gmt_create_time),
            finished=epoch_seconds(job.gmt_finish_time) if terminal and job.gmt_finish_time else None,
            read_at=time.monotonic(),
        )

    def pod(self, node: int) -> str | None:
        return self.pods[node] if node < len(self.pods) else None


def log_since(view: LogView, cursor: dict[str, Any] | None) -> str | None:
    """Where a log poll starts: after the previous poll, or (the first poll) at the job's start."""
    return (cursor or {}).get("since") or view.since


@dataclass
class TailSearch:
    """The GetPodLogs windows that find the last ``lines`` lines of a pod, shared by sync and async.

    GetPodLogs reads from StartTime ("Default value: 7 days ago") and answers at most MaxLines
    lines ("Default value: 2000"; GetPodLogsRequest docstring), so asking without StartTime gives
    a log's beginning, and a full answer need not reach its end. The tail is read with a StartTime
    shortly before the job's ``end``: a full answer narrows the window; one with fewer than
    ``lines`` lines widens it, unless it already starts at ``first`` (the job's start). Between a
    window known too wide and one known too narrow the next is their geometric mean; at most
    ``TAIL_MAX_REQUESTS`` requests are made. This holds whichever lines a full answer keeps.
    EndTime stays at its default (now): nothing is logged after the end, and a StartTime in whole
    seconds only widens a window.
    """

    lines: int
    first: float
    end: float
    window: float = TAIL_FIRST_WINDOW_SECONDS
    requests: int = 0
    done: bool = False
    #: The narrowest window whose answer was full, and the widest that held too few lines.
    too_wide: float | None = None
    too_narrow: float | None = None
    #: The last answer that reached the end of the log; the last full one, if none did.
    reached_end: list[str] | None = None
    cut_short: list[str] | None = None

    def next_start(self) -> str | None:
        """The StartTime of the next GetPodLogs request (MaxLines ``POD_LOGS_MAX_LINES``), or None
        once the tail is known or the budget is spent."""
        if self.done or self.requests >= TAIL_MAX_REQUESTS:
            return None
        self.requests += 1
        return dlc_time(max(self.end - self.window, self.first))

    def record(self, fetched: list[str]) -> None:
        """Take the answer to the last request and choose the next window."""
        if len(fetched) >= POD_LOGS_MAX_LINES:
            self.cut_short, self.too_wide = fetched, self.window
        elif len(fetched) >= self.lines or self.end - self.window <= self.first:
            self.reached_end, self.done = fetched, True
            return
        else:
            self.reached_end, self.too_narrow = fetched, self.window
        window = self._next_window()
        if window is None:
            self.done = True
        else:
            self.window = window

    def _next_window(self) -> float | None:
        wide, narrow = self.too_wide, self.too_narrow
        if wide is not None and narrow is not None:
            return math.sqrt(wide * narrow) if wide - narrow > 1 else None
        if wide is not None:
            return max(wide / TAIL_WINDOW_FACTOR, 1.0) if wide > 1 else None
        return (narrow or self.window) * TAIL_WINDOW_FACTOR

    def result(self, job_id: str) -> list[str]:
        """The last ``lines`` lines found; from a full answer only when no window reached the end."""
        if self.reached_end is not None:
            return self.reached_end[-self.lines :]
        if self.cut_short is None:
            return []
        log.warning(
            "Job %s logged more than %d lines within its last second; the log tail shown may end early",
            job_id,
            POD_LOGS_MAX_LINES,
        )
        return self.cut_short[-self.lines :]


def unseen(seen: list[str], fetched: list[str]) -> list[str]:
    """``fetched`` without its leading lines that repeat the end of ``seen`` (the overlap re-read)."""
    for overlap in range(min(len(seen), len(fetched)), 0, -1):
        if seen[-overlap:] == fetched[:overlap]:
            return fetched[overlap:]
    return fetched
