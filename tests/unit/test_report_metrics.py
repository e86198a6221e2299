"""A metrics.json with values that are not numbers still yields a report that says so.

Each report is published from a real metrics.json (``publish_artifacts``, as the pipeline does), and
its chart is compared with the report of the same run with every value a number: the numeric points
must land exactly where they did, the others nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from aliyun_training.artifacts.report import metric_chart_svg
from tests.unit.test_artifacts import _job, _job_output, _publish

NUMERIC: list[dict[str, Any]] = [
    {"epoch": 1, "train_loss": 2.31, "test_loss": 2.05, "test_accuracy": 0.21},
    {"epoch": 2, "train_loss": 1.64, "test_loss": 1.52, "test_accuracy": 0.47},
    {"epoch": 3, "train_loss": 1.12, "test_loss": 1.20, "test_accuracy": 0.63},
]
#: The same run with odd values where a script might write them (a NaN number is refused when
#: metrics.json is read, tests/unit/test_outputs_finite.py; the text "NaN" is text); the largest loss
#: (2.31) is kept, so both charts share their y scale.
MIXED: list[dict[str, Any]] = [
    {"epoch": 1, "train_loss": 2.31, "test_loss": "NaN", "test_accuracy": "n/a"},
    {"epoch": 2, "train_loss": 1.64, "test_loss": None, "test_accuracy": {"top1": 0.47, "top5": 0.9}},
    {"epoch": 3, "train_loss": "<script>alert(1)</script>", "test_loss": 1.20, "test_accuracy": 0.63},
]


def _report(run: Path, epochs: list[dict[str, Any]]) -> str:
    """The report.html published for a job whose metrics.json lists ``epochs``."""
    run.mkdir()
    return Path(_publish(run, _job(_job_output(run, epochs))).report_uri).read_text()


def _polylines(html: str) -> dict[str, list[str]]:
    """Each series' chart points by its name."""
    lines = re.findall(r'<polyline data-series="([^"]*)"[^>]*points="([^"]*)"', html)
    return {name: points.split() for name, points in lines}


def _epoch_rows(html: str) -> list[list[str]]:
    table = html.split("<tr><th>Epoch</th>", 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td>(.*?)</td>", row) for row in table.strip().splitlines()[1:]]


def test_non_numeric_values_are_text_in_the_table_and_absent_from_the_chart(tmp_path: Path) -> None:
    numeric, mixed = _report(tmp_path / "numeric", NUMERIC), _report(tmp_path / "mixed", MIXED)

    assert _epoch_rows(mixed) == [
        ["1", "2.3100", "NaN", "n/a", "-"],
        ["2", "1.6400", "null", "{&quot;top1&quot;: 0.47, &quot;top5&quot;: 0.9}", "-"],
        ["3", "&lt;script&gt;alert(1)&lt;/script&gt;", "1.2000", "63.00%", "-"],
    ]
    assert "<tr><th>Final train loss</th><td>&lt;script&gt;alert(1)&lt;/script&gt;</td></tr>" in mixed
    assert "<script" not in mixed
    assert (
        "<p>Non-numeric values in train loss (epoch 3); test loss (epochs 1, 2); test accuracy "
        "(epochs 1, 2): shown as text in the table, left out of the chart.</p>"
    ) in mixed
    full, kept = _polylines(numeric), _polylines(mixed)
    assert kept == {
        "train_loss": full["train_loss"][:2],
        "test_loss": full["test_loss"][2:],
        "test_accuracy": full["test_accuracy"][2:],
    }
    assert len(re.findall(r"<circle ", mixed)) == 4


def test_a_report_of_numbers_only_has_no_note(tmp_path: Path) -> None:
    html = _report(tmp_path / "run", NUMERIC)

    assert "Non-numeric" not in html
    assert [len(points) for points in _polylines(html).values()] == [3, 3, 3]


def test_a_loss_series_without_a_single_number_is_named_and_not_charted(tmp_path: Path) -> None:
    epochs = [{"train_loss": True, "test_loss": "diverged", "test_accuracy": 0.1} for _ in range(2)]

    html = _report(tmp_path / "run", epochs)

    loss = html.split("<figcaption>Loss per epoch</figcaption>", 1)[1].split("</figure>", 1)[0]
    assert loss.strip() == "<p>No numeric values to chart.</p>"
    assert list(_polylines(html)) == ["test_accuracy"], "the accuracy chart still has its points"
    assert "Non-numeric values in train loss (epochs 1, 2); test loss (epochs 1, 2): " in html
    assert _epoch_rows(html) == [
        ["1", "true", "diverged", "10.00%", "-"],
        ["2", "true", "diverged", "10.00%", "-"],
    ]


def test_a_long_non_numeric_value_is_cut_in_its_cell(tmp_path: Path) -> None:
    detail = {f"class_{i:02d}": i / 100 for i in range(40)}
    epochs = [{"train_loss": 1.0, "test_loss": 1.0, "test_accuracy": detail}]

    cell = _epoch_rows(_report(tmp_path / "run", epochs))[0][3]

    assert cell.startswith("{&quot;class_00&quot;: 0.0, ") and cell.endswith("…")
    assert len(cell.replace("&quot;", '"')) == 80


def test_the_chart_keeps_an_epoch_without_a_point_in_its_place() -> None:
    svg = metric_chart_svg({"train_loss": [None, 1.0, 0.5]})

    xs = [float(point.split(",")[0]) for point in _polylines(svg)["train_loss"]]
    assert xs == [280.0, 520.0]  # epochs 2 and 3 of 3 on a 40..520 axis
    assert '<text x="40.0" y="236" text-anchor="middle" font-size="11">1</text>' in svg


def test_the_report_says_how_long_the_job_queued_and_why(tmp_path: Path) -> None:
    """The queue time is the job's own phases; the reason is the platform's last word while it
    waited (DLC: PAI Studio's queue position and reason), kept by the monitor."""
    run = tmp_path / "run"
    run.mkdir()
    waited = (
        "queue position 1 in quota quota12345 since 2026-12-01T09:00:00Z; queue reason: all GPUs allocated"
    )
    job = _job(_job_output(run, NUMERIC)).model_copy(
        update={"phase_seconds": {"queuing": 1830.0, "running": 41.5}, "waited_because": waited}
    )
    never_queued = tmp_path / "direct"
    direct = _report(never_queued, NUMERIC)

    html = Path(_publish(run, job).report_uri).read_text()

    assert "<tr><th>Queued</th><td>1830 s — queue position 1 in quota quota12345" in html
    assert "queue reason: all GPUs allocated" in html
    assert "<th>Queued</th>" not in direct
