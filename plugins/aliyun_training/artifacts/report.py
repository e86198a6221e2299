"""The run report: one self-contained HTML page (inline SVG chart, no scripts, no network)."""

from __future__ import annotations

from html import escape
from typing import Any

_WIDTH, _HEIGHT, _PAD = 560, 260, 40
_SERIES_COLOURS = {"train_loss": "#ff6a00", "test_loss": "#1f6feb"}


def loss_chart_svg(series: dict[str, list[float]]) -> str:
    """A line chart of per-epoch losses with axes, ticks and a legend."""
    values = [v for points in series.values() for v in points]
    epochs = max((len(points) for points in series.values()), default=0)
    if not values or epochs == 0:
        return "<p>No epochs recorded.</p>"
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
        coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(points))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>')
        parts += [
            f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>' for i, v in enumerate(points)
        ]
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


def render_report(manifest: dict[str, Any]) -> str:
    """The HTML page for one artifact set's manifest."""
    metrics, job, dataset, runtime = (manifest[k] for k in ("metrics", "job", "dataset", "runtime"))
    rows = [
        ("Model", f"{manifest['model']} {manifest['version']}"),
        ("Dataset", _dataset_text(dataset)),
        ("Job", f"{job['job_id']} on {job['backend']} ({job['status']})"),
        ("Wall time", f"{job['wall_seconds']:.1f} s, {job['node_hours']:.4f} node-hours"),
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
        *((f"Final {_label(key)}", _number(key, metrics[f"final_{key}"])) for key in metrics["series"]),
    ]
    table = "\n".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    series = metrics["series"]
    header = "".join(f"<th>{escape(_label(key))}</th>" for key in series)
    epochs = "\n".join(
        f"<tr><td>{i + 1}</td>"
        + "".join(f"<td>{_number(key, metrics[key][i])}</td>" for key in series)
        + "</tr>"
        for i in range(metrics["epochs"])
    )
    attempts = _attempts_table(manifest.get("attempts") or [])
    charted = [key for key in series if "loss" in key] or series[:1]
    chart = loss_chart_svg({key: metrics[key] for key in charted})
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


def _number(key: str, value: float) -> str:
    """Accuracies as percentages, everything else with four decimals."""
    return f"{value:.2%}" if "accuracy" in key else f"{value:.4f}"
