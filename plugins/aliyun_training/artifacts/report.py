"""The run report: one self-contained HTML page (inline SVG charts, no scripts, no network).

It answers, top to bottom, what a person asks of a finished run: which model, data and outcome (the
header); what the run was asked to do and where it is in Airflow (its form values and a link); what
it ran in, what it cost and where the time went (GPU-hours, stage timings, epoch durations); how it
learned (a chart per kind of metric, and a warning when the model does much better on its training
data than on its test data). Ids and digests are shown readably, the full ones on a smaller line.

Metrics come from the training script's metrics.json, which any job writes as it likes: a value may
be a string ("n/a"), null or an object as well as a number (a NaN or infinite number is refused when
the file is read, ``artifacts.collect.read_metrics``). Numbers are charted and formatted;
anything else is shown as (escaped) text in the tables, left out of the chart, and named in a note,
so one odd value neither breaks the report nor passes silently for a number. Everything that comes
from outside (form values typed by a person, metric names, ids) is HTML-escaped.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING, Any, TypeGuard

from aliyun_training.promotion import GuardResult, Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_WIDTH, _HEIGHT, _PAD = 560, 260, 40
#: Train series orange, test (or validation) series blue and dashed, in every chart alike.
_TRAIN_COLOUR, _TEST_COLOUR = "#ff6a00", "#1f6feb"
_OTHER_COLOURS = ("#2da44e", "#8250df", "#bf3989", "#6e7781")
_TRAIN_PREFIX, _TEST_PREFIXES = "train_", ("test_", "val_")
#: The most epoch numbers the x axis labels; a long run gets every n-th.
_MAX_X_LABELS = 10
#: The longest text a non-numeric metric shows in a cell: a job may write a whole object there.
_MAX_TEXT = 80
#: Train accuracy this far above test accuracy (fractions: 0.10 is 10 points) is a large gap.
ACCURACY_GAP = 0.10
#: Test loss this many times the train loss is a large gap.
LOSS_GAP_RATIO = 1.5


def metric_chart_svg(
    series: Mapping[str, Sequence[float | None]], *, percent: bool = False, x_label: str = "epoch"
) -> str:
    """A line chart of per-epoch series on one y axis, with ticks, a legend and a tooltip per point.

    ``x_label`` names what the x axis counts from 1: epochs of one run, or runs of a pipeline.

    ``None`` is an epoch without a point (its value was not a number); the epoch keeps its place on
    the x axis, so the other points stay above their epochs. The y axis runs from 0 (or below, for
    negative values) to a tenth above the largest value; ``percent`` (accuracies, written as
    fractions) labels it in percent and runs it to 100% unless a value is larger.
    """
    values = [v for points in series.values() for v in points if v is not None]
    epochs = max((len(points) for points in series.values()), default=0)
    if epochs == 0:
        return "<p>No epochs recorded.</p>"
    if not values:
        return "<p>No numeric values to chart.</p>"
    top = 1.0 if percent and max(values) <= 1 else max(max(values) * 1.1, 0.0)
    bottom = min(min(values) * 1.1, 0.0)
    if top == bottom:
        top = 1.0

    def x(i: int) -> float:
        return _PAD + (i * (_WIDTH - 2 * _PAD) / max(epochs - 1, 1))

    def y(v: float) -> float:
        return _HEIGHT - _PAD - (v - bottom) / (top - bottom) * (_HEIGHT - 2 * _PAD)

    def tick(v: float) -> str:
        return f"{v:.0%}" if percent else f"{v:.3g}"

    def point(v: float) -> str:
        return f"{v:.2%}" if percent else f"{v:.4g}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" role="img" '
        # Long tick labels (4 significant digits, a percentage) reach left of the plot's padding.
        'overflow="visible" '
        f'aria-label="{escape(", ".join(_label(name) for name in series))} per {escape(x_label)}">',
        f'<line x1="{_PAD}" y1="{_HEIGHT - _PAD}" x2="{_WIDTH - _PAD}" y2="{_HEIGHT - _PAD}" stroke="#555"/>',
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_HEIGHT - _PAD}" stroke="#555"/>',
        f'<text x="{_WIDTH / 2}" y="{_HEIGHT - 8}" text-anchor="middle" font-size="12">'
        f"{escape(x_label)}</text>",
    ]
    step = math.ceil(epochs / _MAX_X_LABELS)
    for i in range(epochs):
        if i % step == 0 or i == epochs - 1:
            parts.append(
                f'<text x="{x(i):.1f}" y="{_HEIGHT - _PAD + 16}" text-anchor="middle" font-size="11">'
                f"{i + 1}</text>"
            )
    for fraction in (0.0, 0.5, 1.0):
        value = bottom + (top - bottom) * fraction
        parts.append(
            f'<text x="{_PAD - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="11">'
            f"{tick(value)}</text>"
        )
    legend_x = _PAD
    for row, (name, points) in enumerate(series.items()):
        colour, dash = _style(name, row)
        placed = [(i, x(i), y(v), v) for i, v in enumerate(points) if v is not None]
        if placed:
            coords = " ".join(f"{px:.1f},{py:.1f}" for _, px, py, _ in placed)
            parts.append(
                f'<polyline data-series="{escape(name)}" fill="none" stroke="{colour}" stroke-width="2" '
                f'points="{coords}"{dash}/>'
            )
        parts += [
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}">'
            f"<title>{escape(_label(name))}, {escape(x_label)} {i + 1}: {point(v)}</title></circle>"
            for i, px, py, v in placed
        ]
        parts.append(
            f'<line x1="{legend_x}" y1="12" x2="{legend_x + 18}" y2="12" stroke="{colour}" '
            f'stroke-width="2"{dash}/>'
            f'<text x="{legend_x + 22}" y="16" font-size="12" fill="{colour}">{escape(_label(name))}</text>'
        )
        legend_x += 36 + 7 * len(name)
    parts.append("</svg>")
    return "\n".join(parts)


def _style(name: str, row: int) -> tuple[str, str]:
    """A series' colour and dash attribute: which data it was measured on reads the same everywhere."""
    if name.startswith(_TRAIN_PREFIX):
        return _TRAIN_COLOUR, ""
    if name.startswith(_TEST_PREFIXES):
        return _TEST_COLOUR, ' stroke-dasharray="6 3"'
    return _OTHER_COLOURS[row % len(_OTHER_COLOURS)], ""


def _measure(key: str) -> str:
    """What a series measures, whatever data it was measured on: ``test_loss`` measures ``loss``."""
    for prefix in (_TRAIN_PREFIX, *_TEST_PREFIXES):
        if key.startswith(prefix):
            return key.removeprefix(prefix)
    return key


def metric_charts(metrics: dict[str, Any], x_label: str = "epoch") -> str:
    """One chart per measure (losses together, accuracies together, each other series alone), so
    series of different scales never share an axis; ``metrics`` names its ``series`` and holds each
    one's values, one per ``x_label``."""
    panels: dict[str, list[str]] = {}
    for key in metrics["series"]:
        panels.setdefault(_measure(key), []).append(key)
    return "\n".join(
        f"<figure><figcaption>{escape(_label(measure).capitalize())} per {escape(x_label)}</figcaption>\n"
        + metric_chart_svg(
            {key: [v if _is_number(v) else None for v in metrics[key]] for key in keys},
            percent="accuracy" in measure,
            x_label=x_label,
        )
        + "</figure>"
        for measure, keys in panels.items()
    )


def generalization_gaps(metrics: dict[str, Any]) -> list[str]:
    """The large gaps between each ``train_<x>`` series and its ``test_<x>`` (or ``val_<x>``) twin
    at the final epoch, in words; empty when there are none.

    A model that does much better on its training data than on data it has not seen learned its
    training set rather than the task (overfitting): the report says so in the page, not only in
    the numbers. Large means train accuracy more than ``ACCURACY_GAP`` (10 points) above test
    accuracy, or test loss more than ``LOSS_GAP_RATIO`` (1.5) times train loss. Both are rough
    marks for a look, not a verdict; the loss ratio is what flags a script that reports no train
    accuracy (cifar10_ddp.py reports train loss, test loss and test accuracy). A value that is not a
    number, or a train loss of 0 or below (no ratio), is not compared.
    """
    series = metrics["series"]
    gaps = []
    for key in series:
        measure = _measure(key)
        twin = next((prefix + measure for prefix in _TEST_PREFIXES if prefix + measure in series), None)
        if not key.startswith(_TRAIN_PREFIX) or twin is None:
            continue
        train, test = metrics[f"final_{key}"], metrics[f"final_{twin}"]
        if not (_is_number(train) and _is_number(test)):
            continue
        if "accuracy" in measure and train - test > ACCURACY_GAP:
            gaps.append(
                f"train {_label(measure)} {train:.2%} vs test {test:.2%}: {(train - test) * 100:.1f} points "
                f"apart (more than {ACCURACY_GAP * 100:.0f})"
            )
        elif "loss" in measure and train > 0 and test > LOSS_GAP_RATIO * train:
            gaps.append(
                f"test {_label(measure)} {test:.4f} is {test / train:.1f}x train {_label(measure)} "
                f"{train:.4f} (more than {LOSS_GAP_RATIO}x)"
            )
    return gaps


def _gap_warning(metrics: dict[str, Any]) -> str:
    gaps = generalization_gaps(metrics)
    if not gaps:
        return ""
    return (
        '<p class="warning" role="alert"><strong>Large train/test gap at the final epoch:</strong> '
        f"{escape('; '.join(gaps))}. The model may be overfitting: it does much better on its training "
        "data than on data it has not seen.</p>"
    )


def image_name(uri: str, digest: str) -> str:
    """An image as a person reads it: ``repository:tag`` without the registry host, its digest cut to
    12 hex digits (unique enough to tell images apart); this machine's interpreter by its path."""
    if uri.startswith("local://"):
        return f"local interpreter {uri.removeprefix('local://')}"
    name, _, pinned = uri.partition("@")
    host, slash, path = name.partition("/")
    if slash and ("." in host or ":" in host or host == "localhost"):
        name = path
    digest = digest or pinned
    algorithm, colon, hexdigits = digest.partition(":")
    short = f"{algorithm}:{hexdigits[:12]}" if colon else digest
    return f"{name} @ {short}" if short else name


def _bandwidth_row(check: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The RDMA bandwidth check's verdict and numbers, when the run measured them."""
    if not check:
        return []
    if check["verdict"] == "SKIPPED":
        return [("RDMA bandwidth", escape(f"skipped: {check['message']}"))]
    return [("RDMA bandwidth", escape(f"{check['verdict']}: {check['tool']}, {check['message']}"))]


#: How a promotion gate's numbers were measured (``Decision.basis``), as a person reads it.
BASIS_TEXT = {
    "evaluation": "scored on the same data by the evaluation job",
    "recorded scores": "the champion's recorded scores (the evaluation job could not read it)",
    "final metrics": "each run's own final metrics",
}


def comparison_basis(decision: dict[str, Any]) -> str:
    """What the gate compared, in words (a decision from before ``basis`` compared final metrics)."""
    basis = str(decision.get("basis") or "final metrics")
    return BASIS_TEXT.get(basis, basis)


def _promotion_section(promotion: dict[str, Any] | None) -> str:
    """What became of the model (``promotion.Outcome``), the gate's pass when it passed, and the
    numbers it compared with the champion's, when a rule is declared. The outcome is the manifest's,
    which ``promote`` rewrites once it decided: a pass the report shows waits for that. A gate that
    no later model can pass (``Decision.unreachable``) heads the section as a warning, said once."""
    if not promotion:
        return ""
    outcome = Outcome.model_validate(promotion["outcome"])
    locked = promotion.get("unreachable")

    def reason(text: str) -> str:
        return escape(text.replace(f"; {locked}", "") if locked else text)

    rows = [
        ("Outcome", f"<strong>{escape(outcome.headline)}</strong>: {reason(outcome.reason)}"),
        *([("Gate", "passed: " + reason(promotion["reason"]))] if promotion["gate_passed"] else []),
        (promotion["metric"], escape(_score_text(promotion, promotion["champion_run_id"]))),
        *(
            [(f"{tie['metric']} (at_bound)", escape(_score_text(tie, promotion["champion_run_id"])))]
            if (tie := promotion.get("tie_break"))
            else []
        ),
        ("Compared on", escape(comparison_basis(promotion))),
        *(
            ("Guard", escape(f"{guard.text()}: {'passed' if guard.passed else 'FAILED'}"))
            for guard in map(GuardResult.model_validate, promotion["guards"])
        ),
    ]
    warning = (
        f'<p class="warning" role="alert"><strong>Promotion gate:</strong> {escape(locked)}</p>\n'
        if locked
        else ""
    )
    return f"<h2>Promotion</h2>\n{warning}<table>\n{_rows(rows)}\n</table>"


def _score_text(score: dict[str, Any], champion_run_id: str | None) -> str:
    """A metric as the gate compared it (``promotion.Score``, or the decision's own metric):
    "this run 0.91; champion 0.9 (run id); needed at least 0.905"."""
    number = "{:.6g}".format
    needed = (
        f"; needed {'at least' if score['direction'] == 'max' else 'at most'} {number(score['required'])}"
        if score["required"] is not None
        else ""
    )
    return (
        f"this run {number(score['candidate']) if score['candidate'] is not None else '-'}; "
        f"champion {number(score['champion']) if score['champion'] is not None else '-'}"
        + (f" ({champion_run_id})" if champion_run_id else " (none yet)")
        + needed
    )


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
    return [("Queued", escape(f"{queued or 0:.0f} s — {why}"))]


def _gpu_hours(job: dict[str, Any], attempts: list[dict[str, Any]]) -> str:
    """This try's GPU-hours, and every try's together when the round had more than one."""
    text = f"{job['gpu_hours']:.4f}"
    if len(attempts) > 1:
        text += f" this try; {sum(a['gpu_hours'] for a in attempts):.4f} over all {len(attempts)} tries"
    return text


def _wall_time(seconds: float) -> str:
    """The job's wall time as a duration, with its exact seconds where the duration rounds them
    (a minute or more): "4 min 07 s (247.3 s)", but "43.3 s" once."""
    readable, exact = duration(seconds), f"{seconds:.1f} s"
    return readable if readable == exact else f"{readable} ({exact})"


def _epoch_duration(seconds: Sequence[object]) -> str:
    """The mean, shortest and longest epoch, from the seconds the script wrote for each."""
    timed = [s for s in seconds if _is_number(s)]
    if not timed:
        return "not recorded (the training script wrote no seconds per epoch)"
    return (
        f"mean {duration(sum(timed) / len(timed))}, shortest {duration(min(timed))}, "
        f"longest {duration(max(timed))} ({len(timed)} of {len(seconds)} epochs timed)"
    )


def _small(text: str) -> str:
    """A full id or digest on its own smaller line, beneath the readable name."""
    return f"<br><small>{escape(text)}</small>"


def render_report(manifest: dict[str, Any]) -> str:
    """The HTML page for one artifact set's manifest."""
    metrics, job, dataset, runtime = (manifest[k] for k in ("metrics", "job", "dataset", "runtime"))
    attempts, run = manifest.get("attempts") or [], manifest.get("run")
    series = metrics["series"]
    rows = [
        (
            "Model",
            escape(f"{manifest['model']}, trained on dataset version {dataset['version']}")
            + _small(f"artifact set {manifest['version']}"),
        ),
        ("Dataset", escape(_dataset_text(dataset))),
        (
            "Job",
            escape(f"{job['display_name']} on {job['backend']} ({job['status']})") + _small(job["job_id"]),
        ),
        ("Wall time", escape(f"{_wall_time(job['wall_seconds'])}, {job['node_hours']:.4f} node-hours")),
        ("GPU-hours", escape(_gpu_hours(job, attempts))),
        *_waited_row(job),
        (
            "Runtime",
            escape(
                f"Python {runtime['python']}, torch {runtime['torch']}, CUDA {runtime['cuda'] or '-'}, "
                f"NCCL {runtime['nccl'] or '-'}"
            ),
        ),
        (
            "Image",
            escape(image_name(runtime["uri"], runtime["digest"]))
            + (" (verified)" if runtime.get("verified") else "")
            + _small(f"{runtime['uri']} {runtime['digest']}"),
        ),
        *_bandwidth_row(manifest.get("rdma_bandwidth")),
        ("Epochs", str(metrics["epochs"])),
        ("Epoch duration", escape(_epoch_duration(metrics["epoch_seconds"]))),
        *((f"Final {_label(key)}", escape(_cell(key, metrics[f"final_{key}"]))) for key in series),
    ]
    header = "".join(f"<th>{escape(_label(key))}</th>" for key in series)
    epochs = "\n".join(
        f"<tr><td>{i + 1}</td>"
        + "".join(f"<td>{escape(_cell(key, metrics[key][i]))}</td>" for key in series)
        + f"<td>{escape(_seconds_cell(metrics['epoch_seconds'][i]))}</td></tr>"
        for i in range(metrics["epochs"])
    )
    note = _non_numeric_note({key: metrics[key] for key in series})
    subtitle = [
        f"Dataset version <strong>{escape(dataset['version'])}</strong>",
        f"job {escape(job['display_name'])}",
        f'<span class="status">{escape(job["status"])}</span>',
        *([_run_link(run)] if run else []),
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Run report: {escape(manifest["model"])} {escape(manifest["version"])}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 4px 10px; text-align: left; vertical-align: top; }}
small {{ color: #666; font-family: monospace; }}
.subtitle {{ font-size: 1.1em; color: #444; }}
.status {{ border: 1px solid #999; border-radius: 4px; padding: 1px 6px; }}
.warning {{ background: #fff4e5; border-left: 5px solid #d97706; padding: 8px 12px; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 8px; }}
figure {{ margin: 0 0 1em 0; }}
figcaption {{ font-weight: bold; margin-bottom: 4px; }}
</style></head>
<body>
<h1>Run report: {escape(manifest["model"])}</h1>
<p class="subtitle">{" · ".join(subtitle)}</p>
{_gap_warning(metrics)}
<table>
{_rows(rows)}
</table>
{_promotion_section(manifest.get("promotion"))}
{_run_section(run)}
{_stages_table(manifest["stages"], run)}
{_attempts_table(attempts)}
<h2>Metrics per epoch</h2>
<div class="charts">
{metric_charts(metrics)}
</div>
{note}
<table>
<tr><th>Epoch</th>{header}<th>Duration</th></tr>
{epochs}
</table>
<p>Created {escape(manifest["created"])}. Manifest: manifest.json.</p>
</body></html>
"""


def _rows(rows: Sequence[tuple[str, str]]) -> str:
    """Table rows of a plain label and a value already in HTML (escaped where it came from outside)."""
    return "\n".join(f"<tr><th>{escape(label)}</th><td>{value}</td></tr>" for label, value in rows)


def _run_section(run: dict[str, Any] | None) -> str:
    """The Airflow run that published the set: a link back to it, its ids and its form values."""
    if not run:
        return "<h2>Run</h2>\n<p>Not published by an Airflow run: no run or parameters recorded.</p>"
    facts = [
        ("DAG", escape(run["dag_id"])),
        ("Run", escape(run["run_id"])),
        ("Run type", escape(run["run_type"])),
        ("Logical date", escape(_clock(run["logical_date"]))),
        ("Started", escape(_clock(run["started"]))),
    ]
    params = (
        "<table>\n<tr><th>Parameter</th><th>Value</th></tr>\n"
        + _rows([(name, escape(_as_text(value))) for name, value in run["params"].items()])
        + "\n</table>"
        if run["params"]
        else "<p>The run's form had no parameters.</p>"
    )
    return f"""<h2>Run</h2>
<p>{_run_link(run)}</p>
<table>
{_rows(facts)}
</table>
<h3>Parameters</h3>
{params}"""


def _run_link(run: dict[str, Any]) -> str:
    """The link back to the run in Airflow, with a hint when it is only a path (no ``[api]
    base_url``): a report opened from a file or OSS cannot resolve that on its own."""
    relative = (
        " <small>(a path on the Airflow web server: set [api] base_url for a full address)</small>"
        if run["url"].startswith("/")
        else ""
    )
    return f'<a href="{escape(run["url"])}">Open this run in Airflow</a>{relative}'


def _stages_table(stages: list[dict[str, Any]], run: dict[str, Any] | None) -> str:
    """When each stage ran and for how long, and the whole run from its start to publication."""
    rows = [
        "<tr>"
        + "".join(
            f"<td>{escape(text)}</td>"
            for text in (
                stage["stage"],
                _clock(stage["started"]),
                _clock(stage["finished"]),
                _seconds_cell(stage["seconds"]),
                stage["covers"],
            )
        )
        + "</tr>"
        for stage in stages
    ]
    started, published = (run or {}).get("started"), stages[-1]["finished"]
    if started and published:
        total = (datetime.fromisoformat(published) - datetime.fromisoformat(started)).total_seconds()
        rows.append(
            f"<tr><th>Run start to published</th><td></td><td></td><th>{duration(total)}</th><td></td></tr>"
        )
    body = "\n".join(rows)
    return f"""<h2>Stage timings</h2>
<table>
<tr><th>Stage</th><th>Started</th><th>Finished</th><th>Duration</th><th>Covers</th></tr>
{body}
</table>"""


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


def _as_text(value: object) -> str:
    """A string as written, anything else as JSON (null, NaN, a number, an object)."""
    return value if isinstance(value, str) else json.dumps(value)


def _cell(key: str, value: object) -> str:
    """A metric as text (unescaped): accuracies as percentages, other numbers with four decimals,
    anything else as ``_as_text`` writes it, cut at ``_MAX_TEXT``."""
    if _is_number(value):
        return f"{value:.2%}" if "accuracy" in key else f"{value:.4f}"
    text = _as_text(value)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def duration(seconds: float) -> str:
    """Seconds as a person reads a duration: 12.5 s, 4 min 07 s, 2 h 05 min."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _seconds_cell(seconds: object) -> str:
    """A duration that may be missing (not recorded) or not a number (a script's own text)."""
    if seconds is None:
        return "-"
    return duration(seconds) if _is_number(seconds) else _cell("seconds", seconds)


def _clock(moment: str | None) -> str:
    """An ISO time as a UTC clock reading, to the second; '-' when not recorded."""
    if not moment:
        return "-"
    return datetime.fromisoformat(moment).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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
