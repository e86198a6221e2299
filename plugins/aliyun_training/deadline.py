"""How long a pipeline's training job should run, and whether a running one will overrun.

A fixed deadline only tells a run it is late once it is; the job's own ETA (``progress.py``) tells it
before. A pipeline declares how long its job runs (``deadline.expected_minutes``), or the median of
its recent successful jobs' running time stands in; the deadline is the job's start plus that times
the declared ``tolerance``. The run is *at risk* as soon as the ETA falls after the deadline while
the deadline is still ahead, and has *missed* it once the clock passes it with the job still
running. Each is announced once per job (``live.LiveRecord.sent``).
"""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

#: Successful runs the median is taken over, and the fewest that make one.
RECENT_RUNS = 5
MIN_RECENT_RUNS = 3


class ExpectedDuration(BaseModel):
    """How long the job should run (seconds) and where that comes from, as the page and log say it."""

    model_config = ConfigDict(frozen=True)

    seconds: Annotated[float, Field(gt=0)]
    source: str
    #: The deadline is the job's start plus ``seconds`` times this.
    tolerance: Annotated[float, Field(ge=1)] = 1.5

    def deadline(self, started: datetime) -> datetime:
        return started + timedelta(seconds=self.seconds * self.tolerance)


def expected_duration(
    declared_minutes: float | None, recent_seconds: list[float], tolerance: float
) -> ExpectedDuration | None:
    """The declared duration, else the median of the recent successful jobs' running seconds when
    there are at least ``MIN_RECENT_RUNS``; None when neither says anything."""
    if declared_minutes:
        return ExpectedDuration(seconds=declared_minutes * 60, source="declared", tolerance=tolerance)
    recent = [s for s in recent_seconds[:RECENT_RUNS] if s > 0]
    if len(recent) < MIN_RECENT_RUNS:
        return None
    return ExpectedDuration(
        seconds=statistics.median(recent),
        source=f"median of the last {len(recent)} successful runs",
        tolerance=tolerance,
    )


def at_risk(eta: datetime | None, deadline: datetime, now: datetime) -> bool:
    """Whether the ETA says the job ends after its deadline, which is still ahead."""
    return eta is not None and now < deadline < eta


def missed(deadline: datetime, now: datetime) -> bool:
    return now >= deadline
