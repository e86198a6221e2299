"""The run page of a running job, drawn from its live record (``live.py``): the job's facts, its
progress, GPU use, cost and deadline, a chart per metric it reported, its state history and each
node's last lines; once the run published its report, a link to it.

Like the other pages (``views.py``, whose page frame and helpers it shares), self-contained and
every value escaped: a job's log lines come from its script.
"""

from __future__ import annotations

import math
from datetime import UTC
from html import escape
from typing import TYPE_CHECKING

from aliyun_training.artifacts.report import duration
from aliyun_training.gpu_use import IDLE_MINUTES, IDLE_UTILIZATION
from aliyun_training.live import LIVE_SECONDS
from aliyun_training.pages.urls import airflow_run_url, report_page
from aliyun_training.pages.views import _when, page

if TYPE_CHECKING:
    from datetime import datetime

    from aliyun_training.gpu_use import GpuUse
    from aliyun_training.live import LiveCost, LiveDeadline, LiveRecord, StateChange
    from aliyun_training.pages.runs import LiveRun
    from aliyun_training.progress import ProgressEstimate, ProgressPoint

#: How often the run page reloads itself while its job runs: twice per longest wait for a new record.
_REFRESH_SECONDS = round(LIVE_SECONDS / 2)
#: The live charts: three side by side in a laptop's window, each with room for its tick labels.
_CHART_WIDTH, _CHART_HEIGHT = 400, 220
_CHART_PAD = (64, 16, 12, 40)  # left, right, top, bottom
#: The most metrics charted: a script may report dozens; the rest are named under the charts.
_MAX_CHARTS = 12


def run_live_page(run: LiveRun, now: datetime) -> str:
    """The run's page: its training job as the trigger last recorded it, reloading itself every
    half of ``live.LIVE_SECONDS`` while the job runs (a meta refresh: the pages carry no script);
    once the run published its report, a link to it above the job as last seen, not reloading."""
    record = run.record
    return page(
        f"{run.run_id}: training job",
        f"<h1>{escape(run.dag_id)}</h1><p class='run-id'>"
        f"<a href='{escape(airflow_run_url(run.dag_id, run.run_id))}' title='Open the run in Airflow'>"
        f"{escape(run.run_id)}</a></p>{_run_ended(run)}"
        + (_live_job(record, now) if record else _not_reported(run)),
        refresh_seconds=_REFRESH_SECONDS if run.refreshing else None,
    )


def _run_ended(run: LiveRun) -> str:
    """Above the job: the report once published, else whether the page keeps reloading."""
    if run.has_report:
        return (
            "<p class='ended'>The run ended and published its report: "
            f"<a href='{escape(report_page(run.dag_id, run.run_id))}'>Open the run report</a>. "
            "Below, the training job as last seen.</p>"
        )
    if run.refreshing:
        return f"<p class='muted'>This page reloads itself every {_REFRESH_SECONDS} s while the job runs.</p>"
    return f"<p class='muted'>Not reloading: the run is {escape(run.run_state)}.</p>"


def _not_reported(run: LiveRun) -> str:
    if run.refreshing:
        return "<p>The training job has not reported yet: it shows here once it is submitted.</p>"
    return "<p>The run recorded no training job.</p>"


def _live_job(record: LiveRecord, now: datetime) -> str:
    """The job's facts, its metrics so far, its state history and each node's last lines."""
    progress = record.progress
    rows = [
        ("State", _job_state(record)),
        ("Job", _job_id(record)),
        ("Started", _when(record.started) or "—"),
        *([("Finished", _when(record.finished))] if record.finished else []),
        *(_progress_rows(progress, now) if progress else [("Progress", _muted("none reported"))]),
        ("GPU use", _gpu_use(record.gpu)),
        ("Cost so far", _cost(record.cost)),
        *([("Deadline", _deadline(record.deadline))] if record.deadline else []),
        ("Last update", f"{_to_the_second(record.updated)} {_aside(_ago(record.updated, now))}"),
    ]
    facts = "".join(f"<tr><th>{label}</th><td>{value}</td></tr>" for label, value in rows)
    return (
        f"<h2>Training job</h2><div class='table'><table class='facts'>{facts}</table></div>"
        f"{_live_charts(record.points)}{_state_history(record.history)}{_tails(record.tails)}"
    )


def _job_state(record: LiveRecord) -> str:
    return f"<strong class='state-{escape(record.state)}'>{escape(record.state)}</strong> " + _aside(
        f"{record.raw_status} on {record.backend}"
    )


def _job_id(record: LiveRecord) -> str:
    """The job's id, linking to its console where it has one (an http(s) address only)."""
    url = record.console_url or ""
    console = (
        f" <a href='{escape(url)}' rel='noreferrer'>Open in the console</a>"
        if url.startswith(("https://", "http://"))
        else ""
    )
    return f"<code>{escape(record.job_id)}</code>{console}"


def _progress_rows(progress: ProgressEstimate, now: datetime) -> list[tuple[str, str]]:
    """How far the job is (a bar where it said its total), at what pace, and when it will be done."""
    fraction, pace, eta = progress.fraction, progress.steps_per_second, progress.eta
    bar = (
        f"<progress max='1' value='{fraction:.4f}'></progress> "
        f"<strong class='percent'>{fraction:.0%}</strong>"
        if fraction is not None
        else _muted("no total reported")
    )
    where = []
    if progress.step is not None:
        where.append(f"step {progress.step:,}{_of(progress.total_steps)}")
    if progress.epoch is not None:
        where.append(f"epoch {progress.epoch:g}{_of(progress.total_epochs)}")
    return [
        ("Progress", f"{bar} {_aside(', '.join(where))}" if where else bar),
        ("Throughput", f"{pace:.3g} steps/s" if pace is not None else _muted("not known yet")),
        (
            "ETA",
            f"<strong class='eta'>{_when(eta)}</strong> {_aside(_in(eta, now))}"
            if eta is not None
            else _muted("not known yet"),
        ),
    ]


def _of(total: int | None) -> str:
    return f" of {total:,}" if total else ""


def _gpu_use(gpu: GpuUse | None) -> str:
    """Mean and 10th-percentile utilisation and idle minutes, or why there is no GPU metric."""
    if gpu is None:
        return _muted("not measured yet")
    if gpu.unavailable:
        return _muted(gpu.unavailable)
    if gpu.mean_utilization is None:
        return _muted(f"no samples from {gpu.source} yet")
    parts = [f"mean {gpu.mean_utilization:.0f}%"]
    if gpu.p10_utilization is not None:
        parts.append(f"p10 {gpu.p10_utilization:.0f}%")
    idle = f"idle (under {IDLE_UTILIZATION:g}%) {gpu.idle_minutes:.0f} min"
    parts.append(f"<strong class='at-risk'>{idle}</strong>" if gpu.idle_minutes >= IDLE_MINUTES else idle)
    if gpu.mean_memory_used_mib is not None:
        parts.append(f"{gpu.mean_memory_used_mib:,.0f} MiB used on average")
    return ", ".join(parts) + " " + _aside(f"{gpu.samples} samples from {gpu.source}")


def _cost(cost: LiveCost | None) -> str:
    if cost is None:
        return _muted("not known yet")
    money = f", {cost.money:,.2f} {escape(cost.currency or '')}".rstrip() if cost.money is not None else ""
    return f"{cost.gpu_hours:,.2f} GPU-hours{money}"


def _deadline(deadline: LiveDeadline) -> str:
    """When the job should be done by, and whether its ETA (at risk) or the clock (missed) passed it."""
    if deadline.missed:
        verdict = "<strong class='state-failed'>missed</strong>"
    elif deadline.at_risk:
        verdict = "<strong class='at-risk'>at risk: the ETA is past it</strong>"
    else:
        verdict = "<span class='state-succeeded'>on track</span>"
    expected = f"expected to take {duration(deadline.expected_seconds)} ({deadline.source})"
    return f"{verdict}: {_when(deadline.deadline)} {_aside(expected)}"


def _live_charts(points: list[ProgressPoint]) -> str:
    """A chart per metric the job reported, over its steps (over minutes where a report had no
    step): each on its own y axis, as a loss and a learning rate share no scale."""
    names = sorted({name for point in points for name in point.metrics})
    if not names:
        return ""
    by_step = all(point.step is not None for point in points)
    start = points[0].at

    def x(point: ProgressPoint) -> float:
        return float(point.step or 0) if by_step else (point.at - start).total_seconds() / 60

    x_label = "step" if by_step else "minutes since the first report"
    charts = "".join(
        _line_chart(name, [(x(p), p.metrics[name]) for p in points if name in p.metrics], x_label)
        for name in names[:_MAX_CHARTS]
    )
    left_out = names[_MAX_CHARTS:]
    note = f"<p class='muted'>Not charted: {escape(', '.join(left_out))}.</p>" if left_out else ""
    return f"<h2>Metrics so far</h2><div class='charts'>{charts}</div>{note}"


def _line_chart(name: str, values: list[tuple[float, float]], x_label: str) -> str:
    """One metric's line, its axes fitted to its values, ticked at both ends and the middle; the
    last point marked, its value on hover."""
    values = [(x, y) for x, y in values if math.isfinite(x) and math.isfinite(y)]
    if not values:
        return ""
    (x0, x1), (y0, y1) = _span([x for x, _ in values], 0.0), _span([y for _, y in values], 0.05)
    left, right, top, bottom = _CHART_PAD
    width, height = _CHART_WIDTH - left - right, _CHART_HEIGHT - top - bottom

    def px(v: float) -> float:
        return left + (v - x0) / (x1 - x0) * width

    def py(v: float) -> float:
        return top + (y1 - v) / (y1 - y0) * height

    ticks = [
        f"<text x='{px(v):.1f}' y='{top + height + 16}' text-anchor='middle'>{_tick(v)}</text>"
        f"<text x='{left - 6}' y='{py(w) + 4:.1f}' text-anchor='end'>{_tick(w)}</text>"
        for v, w in zip((x0, (x0 + x1) / 2, x1), (y0, (y0 + y1) / 2, y1), strict=True)
    ]
    coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in values)
    last_x, last_y = values[-1]
    return (
        f"<figure><figcaption>{escape(name)} <span class='muted'>{_tick(last_y)} at {escape(x_label)} "
        f"{_tick(last_x)}</span></figcaption><svg xmlns='http://www.w3.org/2000/svg' "
        f"width='{_CHART_WIDTH}' height='{_CHART_HEIGHT}' font-size='11' role='img' "
        f"aria-label='{escape(name)} per {escape(x_label)}'>"
        f"<line x1='{left}' y1='{top + height}' x2='{left + width}' y2='{top + height}' stroke='#57606a'/>"
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + height}' stroke='#57606a'/>{''.join(ticks)}"
        f"<text x='{left + width / 2}' y='{_CHART_HEIGHT - 6}' text-anchor='middle' font-size='12'>"
        f"{escape(x_label)}</text><polyline data-metric='{escape(name)}' fill='none' stroke='#1f6feb' "
        f"stroke-width='2' points='{coords}'/><circle cx='{px(last_x):.1f}' cy='{py(last_y):.1f}' r='3' "
        f"fill='#1f6feb'><title>{escape(name)} {_tick(last_y)}</title></circle></svg></figure>"
    )


def _span(values: list[float], room: float) -> tuple[float, float]:
    """An axis's ends: the values' own, ``room`` of their range wider each way (one value alone
    gets a tenth of itself, or 1, each way)."""
    low, high = min(values), max(values)
    margin = (high - low) * room if high > low else abs(high) / 10 or 1.0
    return low - margin, high + margin


def _tick(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _state_history(history: list[StateChange]) -> str:
    if not history:
        return ""
    rows = "".join(
        f"<tr><td>{_to_the_second(change.at)}</td><td>{escape(change.raw)}</td><td>{escape(change.reason)}</td></tr>"
        for change in history
    )
    return (
        "<h2>State history</h2><div class='table'><table><thead><tr><th>At</th><th>Status</th>"
        f"<th>Why</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def _tails(tails: dict[str, list[str]]) -> str:
    """Each node's last lines, as text (a job prints what it likes, markup included)."""
    if not tails:
        return ""
    blocks = "".join(
        f"<h3>Node {escape(node)}</h3><pre class='log'>{escape(chr(10).join(lines))}</pre>"
        for node, lines in tails.items()
    )
    return f"<h2>Last lines of each node</h2>{blocks}"


def _muted(text: str) -> str:
    return f"<span class='muted'>{escape(text)}</span>"


def _aside(text: str) -> str:
    return _muted(f"({text})")


def _to_the_second(moment: datetime) -> str:
    return escape(moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))


def _ago(moment: datetime, now: datetime) -> str:
    return f"{duration(max((now - moment).total_seconds(), 0.0))} ago"


def _in(moment: datetime, now: datetime) -> str:
    left = (moment - now).total_seconds()
    return f"in {duration(left)}" if left > 0 else "due now"
