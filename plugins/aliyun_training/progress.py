"""How far a running job has come, in its own words, and when it will be done.

The platforms know a job's state, never how far its training is. The training script does, so the
job contract asks it to say so: one JSON object per line on stdout, per step or per epoch,

    {"event": "progress", "step": 120, "total_steps": 1000, "epoch": 1, "total_epochs": 3,
     "time": 1765100000.5, "metrics": {"loss": 0.41}}

every field but ``event`` optional, ``time`` in unix seconds (``include/training/progress.py``
prints it in one call). Whatever precedes the ``{`` on the line (a node's prefix, torchrun's
``[default0]:``, a timestamp) is skipped. The lines come from a job's log, which anyone who can
run code in the job writes, so :func:`parse_progress` is strict and bounded: anything else is not a
report, and nothing in a line can make it raise or take long.

:class:`ProgressTracker` turns the reports into the points a chart draws (at most
:data:`MAX_POINTS`, spread over the job's whole run) and an estimate: the rate over the last
:data:`RATE_WINDOW` and the time the job will need at that rate. A job resumed from a checkpoint
reports steps it already reported; the rate starts again there instead of going negative.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
)

#: A longer line is not read at all: a report is a few hundred characters.
MAX_LINE_CHARS = 64 * 1024
#: How far into a line its JSON object may start (the prefix a launcher or a logger puts first).
MAX_PREFIX_CHARS = 512
#: How many ``{`` of that prefix are tried as the object's start.
MAX_STARTS = 8
#: Metrics kept of one report; the rest are dropped.
MAX_METRICS = 32
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,63}")
#: The largest step, epoch or total a report may name: far past any run, small enough that every
#: rate and fraction computed from it is an ordinary float.
MAX_COUNT = 10**15
#: Report times after this are refused: a clock that far off would only make nonsense of the ETA.
MAX_TIME = datetime(3000, 1, 1, tzinfo=UTC).timestamp()
#: Points a tracker keeps: the chart's resolution over the whole run.
MAX_POINTS = 240
#: The rate is the one over this much of the latest reports.
RATE_WINDOW = timedelta(minutes=10)
#: An ETA further away than this is no estimate.
MAX_REMAINING = timedelta(days=3650)
#: The description notes a last report older than this: the script may have stopped reporting.
QUIET_AFTER = timedelta(minutes=5)
#: Metrics named in a description (the latest report's first).
DESCRIBED_METRICS = 6


def _count(value: object) -> object:
    """A whole number as an int (``3.0`` is 3); a boolean is no count, nor a numeric string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a JSON number")
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError("must be a whole number")
        return int(value)
    return value


def _real(value: object) -> float:
    """A JSON number as a finite float; a boolean or a numeric string is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a JSON number")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError("is too large") from None
    if not math.isfinite(number):
        raise ValueError("must be finite")
    return number


Count = Annotated[StrictInt, BeforeValidator(_count), Field(ge=0, le=MAX_COUNT)]
Total = Annotated[StrictInt, BeforeValidator(_count), Field(ge=1, le=MAX_COUNT)]
Real = Annotated[float, BeforeValidator(_real)]


class ProgressReport(BaseModel):
    """One progress line of a training script, checked."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    step: Count | None = None
    total_steps: Total | None = None
    epoch: Annotated[Real, Field(ge=0, le=MAX_COUNT)] | None = None
    total_epochs: Total | None = None
    #: Numbers only: a metric with another value or a name outside :data:`METRIC_NAME` is dropped.
    metrics: dict[str, float] = Field(default_factory=dict)
    #: When the script printed it (unix seconds); the reader's clock stands in when it is absent.
    time: Annotated[Real, Field(gt=0, lt=MAX_TIME)] | None = None

    @field_validator("metrics", mode="before")
    @classmethod
    def _numbers_only(cls, value: object) -> dict[str, float]:
        if not isinstance(value, dict):
            return {}
        kept: dict[str, float] = {}
        for name, number in value.items():
            if len(kept) == MAX_METRICS:
                break
            if not (isinstance(name, str) and METRIC_NAME.fullmatch(name)):
                continue
            try:
                kept[name] = _real(number)
            except ValueError:
                continue
        return kept

    @property
    def fraction(self) -> float | None:
        """Steps done of all steps, else epochs done of all epochs; within [0, 1]."""
        if self.step is not None and self.total_steps is not None:
            return min(self.step / self.total_steps, 1.0)
        if self.epoch is not None and self.total_epochs is not None:
            return min(self.epoch / self.total_epochs, 1.0)
        return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _report_at(line: str, start: int) -> ProgressReport | None:
    """The report whose JSON object starts at ``start`` and ends the line, if it is one."""
    try:
        value, end = _DECODER.raw_decode(line, start)
    except (ValueError, RecursionError):
        return None
    if line[end:].strip() or not isinstance(value, dict) or value.get("event") != "progress":
        return None
    try:
        return ProgressReport.model_validate(value)
    except ValidationError:
        return None


def parse_progress(line: str) -> ProgressReport | None:
    """The report a log line carries, or None for any line that is not one; never raises."""
    if len(line) > MAX_LINE_CHARS or '"progress"' not in line:
        return None
    start = line.find("{", 0, MAX_PREFIX_CHARS + 1)
    for _ in range(MAX_STARTS):
        if start < 0:
            return None
        report = _report_at(line, start)
        if report is not None:
            return report
        start = line.find("{", start + 1, MAX_PREFIX_CHARS + 1)
    return None


class ProgressPoint(BaseModel):
    """One report as the chart and the rate read it."""

    model_config = ConfigDict(frozen=True)

    at: datetime
    fraction: float | None = None
    step: int | None = None
    epoch: float | None = None
    #: The totals the report named, so that a tracker rebuilt from its points estimates as before.
    total_steps: int | None = None
    total_epochs: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)


class ProgressEstimate(BaseModel):
    """Where the job stands at its latest report, how fast it goes and when it will be done."""

    model_config = ConfigDict(frozen=True)

    #: The latest report's time.
    at: datetime
    fraction: float | None
    step: int | None
    total_steps: int | None
    epoch: float | None
    total_epochs: int | None
    steps_per_second: float | None
    #: From the latest report to the end, at the recent rate; 0 once the fraction reached 1.
    remaining_seconds: float | None
    eta: datetime | None
    #: The latest value of each metric reported (the latest report's first).
    metrics: dict[str, float]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _went_back(before: ProgressPoint, after: ProgressPoint) -> bool:
    """The job started again from an earlier point (a resume from a checkpoint, new totals)."""
    if before.step is not None and after.step is not None and after.step < before.step:
        return True
    return before.fraction is not None and after.fraction is not None and after.fraction < before.fraction


def _thinned(points: list[ProgressPoint]) -> list[ProgressPoint]:
    """The first and last points and the latest of each of MAX_POINTS / 2 equal spans of time between.

    Equal spans keep the chart even over the whole run, however bursty the reports were.
    """
    first, last = points[0], points[-1]
    span = (last.at - first.at).total_seconds()
    buckets = MAX_POINTS // 2
    if span <= 0:
        return [first, last]
    kept: dict[int, ProgressPoint] = {}
    for point in points[1:-1]:
        bucket = min(int((point.at - first.at).total_seconds() / span * buckets), buckets - 1)
        kept[bucket] = point
    return [first, *kept.values(), last]


class ProgressTracker:
    """A job's reports in time order (times in UTC when naive): the points of its chart and its
    current estimate.

    Built again from the points it gave (they are kept with the job's live record), it estimates as
    it did before.
    """

    def __init__(self, points: list[ProgressPoint] | None = None) -> None:
        aware = [point.model_copy(update={"at": _aware(point.at)}) for point in points or []]
        self._points = sorted(aware, key=lambda point: point.at)
        if len(self._points) > MAX_POINTS:
            self._points = _thinned(self._points)
        #: The estimate of the points as they are (the trigger asks several times a poll); None:
        #: not made since the last change.
        self._estimate: ProgressEstimate | None = None
        #: Where the points since the last restart begin, and the latest value of each metric
        #: (the latest report's first), kept as points come: a poll costs the same at 240 points.
        self._run_start = self._restart_index()
        self._metrics = self._metrics_of(self._points)

    @property
    def points(self) -> list[ProgressPoint]:
        return list(self._points)

    def observe(self, report: ProgressReport, seen_at: datetime) -> None:
        """Add a report, timed by its own ``time`` else by when it was read.

        A report older than the latest point is one read again (logs are read in overlapping
        tails) and is ignored; one at the same time replaces it, keeping the metrics it does not
        name (a script may report a step's loss and its epoch's end in the same instant).
        """
        at = datetime.fromtimestamp(report.time, UTC) if report.time is not None else _aware(seen_at)
        self._estimate = None
        point = ProgressPoint(
            at=at,
            fraction=report.fraction,
            step=report.step,
            epoch=report.epoch,
            total_steps=report.total_steps,
            total_epochs=report.total_epochs,
            metrics=report.metrics,
        )
        if self._points and at <= self._points[-1].at:
            last = self._points[-1]
            if at == last.at:
                merged = list({**last.metrics, **point.metrics}.items())[:MAX_METRICS]
                self._points[-1] = point.model_copy(update={"metrics": dict(merged)})
                self._take_metrics(point.metrics)
            return
        if self._points and _went_back(self._points[-1], point):
            self._run_start = len(self._points)
        self._points.append(point)
        self._take_metrics(point.metrics)
        if len(self._points) > MAX_POINTS:
            self._points = _thinned(self._points)
            self._run_start = self._restart_index()

    def _take_metrics(self, metrics: dict[str, float]) -> None:
        """The latest values: ``metrics`` first, then the others' last values."""
        older = {name: value for name, value in self._metrics.items() if name not in metrics}
        self._metrics = dict(list({**metrics, **older}.items())[:MAX_METRICS])

    def _restart_index(self) -> int:
        """Where the points since the last restart begin (0: the job never went back)."""
        start = len(self._points) - 1
        while start > 0 and not _went_back(self._points[start - 1], self._points[start]):
            start -= 1
        return max(start, 0)

    def _since_restart(self) -> list[ProgressPoint]:
        return self._points[self._run_start :]

    def _rate_base(self) -> ProgressPoint | None:
        """The earliest point since the last restart within RATE_WINDOW of the latest; with
        reports further apart than that, the one before the latest."""
        run = self._since_restart()
        if len(run) < 2:
            return None
        window_start = run[-1].at - RATE_WINDOW
        return next((point for point in run[:-1] if point.at >= window_start), run[-2])

    @staticmethod
    def _metrics_of(points: list[ProgressPoint]) -> dict[str, float]:
        """The latest value of each metric the points name, the latest point's first."""
        metrics: dict[str, float] = {}
        for point in reversed(points):
            for name, value in point.metrics.items():
                if len(metrics) == MAX_METRICS:
                    return metrics
                metrics.setdefault(name, value)
        return metrics

    def estimate(self) -> ProgressEstimate | None:
        """The estimate at the latest report; None before any."""
        if not self._points:
            return None
        if self._estimate is None:
            self._estimate = self._estimated()
        return self._estimate

    def _estimated(self) -> ProgressEstimate:
        last = self._points[-1]
        steps_per_second = fraction_per_second = None
        base = self._rate_base()
        seconds = (last.at - base.at).total_seconds() if base is not None else 0.0
        if base is not None and seconds > 0:
            if last.step is not None and base.step is not None:
                steps_per_second = (last.step - base.step) / seconds
            if last.fraction is not None and base.fraction is not None:
                fraction_per_second = (last.fraction - base.fraction) / seconds
        remaining: float | None = None
        if last.fraction is not None and last.fraction >= 1.0:
            remaining = 0.0
        elif last.fraction is not None and fraction_per_second:
            remaining = (1.0 - last.fraction) / fraction_per_second
            if remaining > MAX_REMAINING.total_seconds():
                remaining = None
        return ProgressEstimate(
            at=last.at,
            fraction=last.fraction,
            step=last.step,
            total_steps=last.total_steps,
            epoch=last.epoch,
            total_epochs=last.total_epochs,
            steps_per_second=steps_per_second,
            remaining_seconds=remaining,
            eta=last.at + timedelta(seconds=remaining) if remaining is not None else None,
            metrics=dict(self._metrics),
        )


def _duration(seconds: float) -> str:
    """3m05s, 2h03m, 4d06h: two units, enough to plan by."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _epochs(epoch: float) -> str:
    return f"{epoch:.2f}".rstrip("0").rstrip(".")


def _clock(moment: datetime, now: datetime) -> str:
    moment = _aware(moment).astimezone(UTC)
    same_day = moment.date() == _aware(now).astimezone(UTC).date()
    return moment.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")


def _rate(steps_per_second: float) -> str:
    if 0 < steps_per_second < 1:
        return f"{_duration(1 / steps_per_second)}/step"
    return f"{steps_per_second:.1f} steps/s"


def describe_progress(estimate: ProgressEstimate, now: datetime) -> str:
    """One line for the task log, e.g. ``42% (step 420/1000, epoch 2/5), 3.1 steps/s, ETA 3m05s
    (14:05 UTC); loss 0.41, accuracy 0.8``."""
    where = []
    if estimate.step is not None:
        where.append(f"step {estimate.step}" + (f"/{estimate.total_steps}" if estimate.total_steps else ""))
    if estimate.epoch is not None:
        total = f"/{estimate.total_epochs}" if estimate.total_epochs else ""
        where.append(f"epoch {_epochs(estimate.epoch)}{total}")
    parts = []
    if estimate.fraction is not None:
        percent = f"{math.floor(estimate.fraction * 100)}%"
        parts.append(f"{percent} ({', '.join(where)})" if where else percent)
    elif where:
        parts.append(", ".join(where))
    else:
        parts.append("progress reported")
    if estimate.steps_per_second is not None:
        parts.append(_rate(estimate.steps_per_second))
    if estimate.eta is not None and estimate.remaining_seconds:
        left = (_aware(estimate.eta) - _aware(now)).total_seconds()
        when = _clock(estimate.eta, now)
        if left >= 0:
            parts.append(f"ETA {_duration(left)} ({when})")
        else:
            parts.append(f"ETA passed {_duration(-left)} ago ({when})")
    text = ", ".join(parts)
    quiet = (_aware(now) - _aware(estimate.at)).total_seconds()
    if quiet >= QUIET_AFTER.total_seconds():
        text += f", last report {_duration(quiet)} ago"
    shown = list(estimate.metrics.items())[:DESCRIBED_METRICS]
    if shown:
        text += "; " + ", ".join(f"{name} {value:.4g}" for name, value in shown)
    return text
