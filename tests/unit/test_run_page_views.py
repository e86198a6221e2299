"""pages.run_view.run_live_page: what the run page draws of a live record that is thin, odd or large.

The page over HTTP, with sealed records in the metadata DB, is tests/dags/test_run_page.py; here
the HTML alone, for the cases a real job reaches only sometimes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from aliyun_training.gpu_use import GpuUse
from aliyun_training.live import LiveRecord
from aliyun_training.pages.run_view import run_live_page
from aliyun_training.pages.runs import LiveRun
from aliyun_training.progress import ProgressPoint

NOW = datetime(2026, 11, 22, 14, 0, tzinfo=UTC)


def live_page(run_state: str = "running", has_report: bool = False, **fields: Any) -> str:
    values: dict[str, Any] = {
        "job_id": "train-0001",
        "backend": "local",
        "state": "running",
        "raw_status": "running",
        "updated": NOW - timedelta(seconds=5),
    }
    record = LiveRecord.model_validate({**values, **fields})
    return run_live_page(LiveRun("retrain", "manual__1", run_state, record, has_report), NOW)


def point(minute: int, step: int | None, **metrics: float) -> ProgressPoint:
    return ProgressPoint(at=NOW + timedelta(minutes=minute), step=step, metrics=metrics)


def test_a_job_that_reported_no_progress_gpu_or_cost_says_so_and_names_why_there_is_no_gpu_metric() -> None:
    html = live_page(
        gpu=GpuUse(
            source="local",
            samples=0,
            mean_utilization=None,
            p10_utilization=None,
            idle_minutes=0.0,
            mean_memory_used_mib=None,
            unavailable="no GPU metric available: <nvidia-smi> is not on this machine",
        ),
        console_url="javascript:alert(1)",
    )

    assert "<th>Progress</th><td><span class='muted'>none reported</span>" in html
    assert "no GPU metric available: &lt;nvidia-smi&gt; is not on this machine" in html
    assert "<th>Cost so far</th><td><span class='muted'>not known yet</span>" in html
    assert "javascript:" not in html and "Open in the console" not in html, (
        "only an http(s) console is linked"
    )
    assert "Metrics so far" not in html and "Deadline" not in html


def test_gpus_idle_for_the_warning_time_are_marked() -> None:
    gpu = GpuUse(
        source="dcgm",
        samples=40,
        mean_utilization=4.0,
        p10_utilization=1.0,
        idle_minutes=12.0,
        mean_memory_used_mib=None,
    )

    html = live_page(gpu=gpu)

    assert "<strong class='at-risk'>idle (under 10%) 12 min</strong>" in html


def test_a_chart_spans_the_steps_reported_and_leaves_out_what_is_not_a_number() -> None:
    html = live_page(
        points=[
            point(0, 100, loss=2.0),
            point(1, 200, loss=float("nan")),
            point(2, 300, loss=1.0),
            point(3, 400, loss=0.5, grad_norm=3.0),
        ]
    )

    loss = re.search(r"<polyline data-metric='loss'[^>]* points='([^']*)'", html)
    assert loss is not None and len(loss.group(1).split()) == 3, "the NaN is no point"
    assert ">100</text>" in html and ">400</text>" in html, "the x axis runs from the first step to the last"
    assert "loss <span class='muted'>0.5 at step 400</span>" in html
    assert "<circle cx='384.0'" in html, "loss's last point at the right end"
    assert "<circle cx='224.0'" in html, "grad_norm's one value alone mid-axis"
    assert "grad_norm <span class='muted'>3 at step 400</span>" in html


def test_without_steps_the_charts_run_over_minutes_and_a_script_with_many_metrics_gets_twelve() -> None:
    many = {f"m{i:02d}": float(i) for i in range(15)}

    html = live_page(points=[point(0, None, **many), point(5, 10, **many)])

    assert html.count("<svg") == 12 and "aria-label='m00 per minutes since the first report'" in html
    assert "Not charted: m12, m13, m14." in html


def test_the_page_reloads_only_while_the_run_and_its_job_go_on() -> None:
    refresh = "http-equiv='refresh'"

    assert refresh in live_page()
    assert refresh not in live_page(state="failed", raw_status="FAILED")
    assert refresh not in live_page(run_state="failed"), "the run ended: the job's record is stale"
    assert refresh not in live_page(has_report=True)
