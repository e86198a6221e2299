"""The run report: one self-contained HTML page (inline SVG chart, no scripts, no network).

Metrics come from the training script's metrics.json, which any job writes as it likes: a value may
be a string ("n/a"), null, NaN or an object as well as a number. Numbers are charted and formatted;
anything else is shown as (escaped) text in the tables, left out of the chart, and named in a note,
so one odd value neither breaks the report nor passes silently for a number.
"""

from __future__ import annotations

import json
import math
from html import escape
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_WIDTH, _HEIGHT, _PAD = 560, 260, 40
_SERIES_COLOURS = {"train_loss": "#ff6a00", "test_loss": "#1f6feb"}
#: The longest text a non-numeric metric shows in a cell: a job may write a whole object there.
_MAX_TEXT = 80


def loss_chart_svg(series: Mapping[str, Sequence[float | None]]) -> str:
    """A line chart of per-epoch losses with axes, ticks and a legend.

    ``None`` is an epoch without a point (its value was not a number); the epoch keeps its place on
    the x axis, so the other points stay above their epochs.
    """
    values = [v for points in series.values() for v in points if v is not None]
    epochs = max((len(points) for points in series.values()), default=0)
    if epochs == 0:
        return "<p>No epochs recorded.</p>"
    if not values:
        return "<p>No numeric values to chart.</p>"
    top = max(values) * 1.1 or 1.0

    def x(i: int) -> float:
        return _PAD + (i * (_WIDTH - 2 * _PAD) / max(epochs - 1, 1))

    def y(v: float) -> float:
        return _HEIGHT - _PAD - v / top * (_HEIGHT - 2 * _PAD)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" role="img" '
        'aria-label="loss per epoch">',
        f'<line x1="{_PAD}" y1="{_HEIGHT - _PAD}" x2="{_WIDTH - _PAD}" y2="{_HEIGHT - _PAD}" stroke="#555"/>',
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_HEIGHT - _PAD}" stroke="#555"/>',
        f'<text x="{_WIDTH / 2}" y="{_HEIGHT - 8}" text-anchor="middle" font-size="12">epoch</text>',
    ]
    for i in range(epochs):
        parts.append(
            f'<text x="{x(i):.1f}" y="{_HEIGHT - _PAD + 16}" text-anchor="middle" font-size="11">'
            f"{i + 1}</text>"
        )
    for fraction in (0.0, 0.5, 1.0):
        value = top * fraction
        parts.append(
            f'<text x="{_PAD - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="11">{value:.2f}</text>'
        )
    for row, (name, points) in enumerate(series.items()):
        colour = _SERIES_COLOURS.get(name, "#333")
        placed = [(x(i), y(v)) for i, v in enumerate(points) if v is not None]
        if placed:
            coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in placed)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>')
        parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in placed]
        legend_y = _PAD + 14 * row
        parts.append(
            f'<text x="{_WIDTH - _PAD}" y="{legend_y}" text-anchor="end" font-size="12" fill="{colour}">'
            f"{escape(name)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _bandwidth_row(check: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The RDMA bandwidth check's verdict and numbers, when the run measured them."""
    if not check:
        return []
    if check["verdict"] == "SKIPPED":
        return [("RDMA bandwidth", f"skipped: {check['message']}")]
    return [("RDMA bandwidth", f"{check['verdict']}: {check['tool']}, {check['message']}")]


def _dataset_text(dataset: dict[str, Any]) -> str:
    """A staged version's size, or what a job mounted when the run staged nothing."""
    if "files" in dataset:
        return f"{dataset['version']} — {dataset['files']} files, {dataset['bytes'] / 1e6:.1f} MB"
    mounted = dataset.get("dataset_id") or dataset.get("uri") or "(none mounted)"
    return f"{dataset['version']} — fixed dataset {mounted} at {dataset.get('mount_path') or '-'}"


def _waited_row(job: dict[str, Any]) -> list[tuple[str, str]]:
    """How long the job queued before it ran, and the platform's last word on why; none when it
    did not queue."""
    queued = (job.get("phase_seconds") or {}).get("queuing")
    if not queued and not job.get("waited_because"):
        return []
    why = job.get("waited_because") or "no reason given"
    return [("Queued", f"{queued or 0:.0f} s — {why}")]


def render_report(manifest: dict[str, Any]) -> str:
    """The HTML page for one artifact set's manifest."""
    metrics, job, dataset, runtime = (manifest[k] for k in ("metrics", "job", "dataset", "runtime"))
    rows = [
        ("Model", f"{manifest['model']} {manifest['version']}"),
        ("Dataset", _dataset_text(dataset)),
        ("Job", f"{job['job_id']} on {job['backend']} ({job['status']})"),
        ("Wall time", f"{job['wall_seconds']:.1f} s, {job['node_hours']:.4f} node-hours"),
        *_waited_row(job),
        (
            "Runtime",
            f"Python {runtime['python']}, torch {runtime['torch']}, CUDA {runtime['cuda'] or '-'}, "
            f"NCCL {runtime['nccl'] or '-'}",
        ),
        (
            "Image",
            f"{runtime['uri']} {runtime['digest']}" + (" (verified)" if runtime.get("verified") else ""),
        ),
        *_bandwidth_row(manifest.get("rdma_bandwidth")),
        ("Epochs", str(metrics["epochs"])),
        *((f"Final {_label(key)}", _cell(key, metrics[f"final_{key}"])) for key in metrics["series"]),
    ]
    table = "\n".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    series = metrics["series"]
    header = "".join(f"<th>{escape(_label(key))}</th>" for key in series)
    epochs = "\n".join(
        f"<tr><td>{i + 1}</td>"
        + "".join(f"<td>{escape(_cell(key, metrics[key][i]))}</td>" for key in series)
        + "</tr>"
        for i in range(metrics["epochs"])
    )
    attempts = _attempts_table(manifest.get("attempts") or [])
    charted = [key for key in series if "loss" in key] or series[:1]
    chart = loss_chart_svg({key: [v if _is_number(v) else None for v in metrics[key]] for key in charted})
    note = _non_numeric_note({key: metrics[key] for key in series})
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Run report: {escape(manifest["model"])} {escape(manifest["version"])}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 4px 10px; text-align: left; }}
</style></head>
<body>
<h1>Run report: {escape(manifest["model"])}</h1>
<table>
{table}
</table>
{attempts}
<h2>{escape(", ".join(_label(key) for key in charted)).capitalize()} per epoch</h2>
{chart}
{note}
<table>
<tr><th>Epoch</th>{header}</tr>
{epochs}
</table>
<p>Created {escape(manifest["created"])}. Manifest: manifest.json.</p>
</body></html>
"""


def _attempts_table(attempts: list[dict[str, Any]]) -> str:
    """The tries of the round, when there was more than one: why each ended, what followed, and
    where training resumed."""
    if len(attempts) < 2:
        return ""
    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{escape(str(value))}</td>"
            for value in (
                attempt["try_number"],
                attempt["job_id"],
                attempt["failure_class"] or "-",
                "; ".join(attempt["evidence"][:2]) or "-",
                attempt["decision"],
                f"{attempt['gpu_hours']:.4f}",
                attempt["epochs_run"],
                "-"
                if attempt["resumed_after_epoch"] is None
                else f"after epoch {attempt['resumed_after_epoch']}",
            )
        )
        + "</tr>"
        for attempt in attempts
    )
    return f"""<h2>Attempts</h2>
<table>
<tr><th>Try</th><th>Job</th><th>Failure class</th><th>Evidence</th><th>Decision</th><th>GPU-hours</th>
<th>Epochs run</th><th>Resumed</th></tr>
{rows}
</table>"""


def _label(key: str) -> str:
    return key.replace("_", " ")


def _is_number(value: object) -> TypeGuard[float]:
    """Whether a metric can be charted: a finite int or float (true/false and NaN have no place)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _cell(key: str, value: object) -> str:
    """A metric as text (unescaped): accuracies as percentages, other numbers with four decimals,
    a string as written and anything else as JSON (null, NaN, an object), cut at ``_MAX_TEXT``."""
    if _is_number(value):
        return f"{value:.2%}" if "accuracy" in key else f"{value:.4f}"
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def _non_numeric_note(series: Mapping[str, Sequence[object]]) -> str:
    """Which series held values that are not numbers, and in which epochs; empty when none did."""
    found = {
        key: [i + 1 for i, value in enumerate(points) if not _is_number(value)]
        for key, points in series.items()
    }
    named = [
        f"{_label(key)} (epoch{'s' if len(epochs) > 1 else ''} {', '.join(map(str, epochs))})"
        for key, epochs in found.items()
        if epochs
    ]
    if not named:
        return ""
    return (
        f"<p>Non-numeric values in {escape('; '.join(named))}: shown as text in the table, "
        "left out of the chart.</p>"
    )
