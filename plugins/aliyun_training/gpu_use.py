"""How busy a job's GPUs are: samples from any backend, their summary, and sustained idleness.

Each backend reads GPU metrics its own way (``agpu_reading``: CloudMonitor for DLC, the DCGM
exporter through Prometheus for ACK, ``nvidia-smi`` for local) and hands back a
:class:`GpuReading` of :class:`GpuSample`; everything here is the same for all of them, and pure,
so the trigger, the live page and the tests reason alike.

A *moment* is one sample time: the mean utilization over every GPU sampled at that time says
whether the job as a whole used its GPUs then. A sample stands for the time since the moment
before it (CloudMonitor's and Prometheus' points summarize the period ending at their timestamp),
capped at :data:`MAX_GAP_SECONDS`, so a metric that went silent for an hour is not counted as an
hour of idleness or of work.
"""

from __future__ import annotations

import statistics
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Percent; a moment whose GPUs average less than this counts as idle.
IDLE_UTILIZATION = 10.0
#: Idleness sustained this long is worth a warning (the trigger sends it once).
IDLE_MINUTES = 10.0
#: The most one gap between two consecutive moments counts for: five reporting periods of the
#: slowest source (CloudMonitor's 60 s), beyond which the metric was missing, not the GPUs idle.
MAX_GAP_SECONDS = 300.0


class GpuSample(BaseModel):
    """One GPU's utilization (percent, 0-100) at one time, with the memory it held where known."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    #: The job's node the GPU belongs to, as the backend names it (``node-0``, a host name).
    node: str
    #: The GPU within its node (``0``..``7``), or ``all`` where the source reports a node's GPUs together.
    gpu: str
    utilization: float
    memory_used_mib: float | None = Field(default=None, ge=0)

    @field_validator("utilization")
    @classmethod
    def _percent(cls, value: float) -> float:
        """Into 0-100: sources round and average (an aggregate can read 100.2), and a reading is
        information, never a reason to fail the poll that made it."""
        return min(max(value, 0.0), 100.0)


class GpuReading(BaseModel):
    """What one backend read of a job's GPUs: samples, or why there are none (``unavailable``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    samples: list[GpuSample] = Field(default_factory=list)
    #: Why no metric could be read (no exporter configured, an API error); empty when it was read.
    unavailable: str = ""


class GpuUse(BaseModel):
    """A reading's summary, as the live record and the run page show it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    samples: int
    mean_utilization: float | None
    #: The 10th percentile of every sample's utilization: low when some GPUs or some minutes idle.
    p10_utilization: float | None
    #: Minutes during which the mean utilization of the moment was below ``IDLE_UTILIZATION``.
    idle_minutes: float
    mean_memory_used_mib: float | None
    unavailable: str = ""


def summarize(samples: Sequence[GpuSample], source: str, unavailable: str = "") -> GpuUse:
    """Mean and 10th percentile of utilization, idle minutes and mean memory of ``samples``."""
    utilizations = [sample.utilization for sample in samples]
    memory = [sample.memory_used_mib for sample in samples if sample.memory_used_mib is not None]
    idle = sum(moment.seconds for moment in _moments(samples) if moment.mean < IDLE_UTILIZATION)
    return GpuUse(
        source=source,
        samples=len(samples),
        mean_utilization=statistics.fmean(utilizations) if utilizations else None,
        p10_utilization=_p10(utilizations),
        idle_minutes=idle / 60,
        mean_memory_used_mib=statistics.fmean(memory) if memory else None,
        unavailable=unavailable,
    )


def sustained_idle(
    samples: Sequence[GpuSample], idle_below: float = IDLE_UTILIZATION, for_minutes: float = IDLE_MINUTES
) -> str | None:
    """The evidence that the job's GPUs have idled for the last ``for_minutes`` at least, or None.

    Every moment of the trailing run must average below ``idle_below`` and the run must cover
    ``for_minutes``: one busy moment, or too short a run, and nothing is said.
    """
    run: list[Moment] = []
    for moment in reversed(_moments(samples)):
        if moment.mean >= idle_below:
            break
        run.append(moment)
    minutes = sum(moment.seconds for moment in run) / 60
    if not run or minutes < for_minutes:
        return None
    since = run[-1].at
    recent = [sample for sample in samples if sample.at >= since]
    nodes = len({sample.node for sample in recent})
    gpus = len({(sample.node, sample.gpu) for sample in recent})
    mean = statistics.fmean(sample.utilization for sample in recent)
    return (
        f"GPUs mostly idle for the last {minutes:.0f} minutes: mean utilization {mean:.0f}% on "
        f"{nodes} node{'s' if nodes != 1 else ''} ({gpus} GPU series), every moment below {idle_below:g}%"
    )


class Moment(NamedTuple):
    """One sample time: the mean utilization of the GPUs sampled then, and the seconds it stands for."""

    at: datetime
    mean: float
    seconds: float


def _moments(samples: Sequence[GpuSample]) -> list[Moment]:
    """Each sample time, oldest first.

    A moment stands for the gap since the one before it, capped at ``MAX_GAP_SECONDS``; the first
    one, with no moment before it, for the median gap of the others (none when it is alone).
    """
    by_time: dict[datetime, list[float]] = {}
    for sample in samples:
        by_time.setdefault(sample.at, []).append(sample.utilization)
    times = sorted(by_time)
    if not times:
        return []
    gaps = [min((later - earlier).total_seconds(), MAX_GAP_SECONDS) for earlier, later in pairwise(times)]
    first = statistics.median(gaps) if gaps else 0.0
    return [
        Moment(at, statistics.fmean(by_time[at]), gap) for at, gap in zip(times, [first, *gaps], strict=True)
    ]


def _p10(values: list[float]) -> float | None:
    """The 10th percentile (linear between the closest ranks), or the value when there is one."""
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=10, method="inclusive")[0]
