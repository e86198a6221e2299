"""pages.views: the pages' HTML from the rows the pages read, every value escaped.

Run ids, versions and a broken declaration's error come from people who may trigger a DAG or edit
a file, so each test that shows one gives it markup, which must come out as text.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aliyun_training.pages.runs import BrokenDeclaration, PipelineSummary, RunRow
from aliyun_training.pages.views import not_found_page, pipeline_runs_page, pipelines_index

DAG_ID = "cifar10_retrain"
ENDED = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def run(run_id: str, **fields: Any) -> RunRow:
    """A successful scheduled run that took 1 h 05 min to ``ENDED``."""
    defaults = {
        "run_type": "scheduled",
        "state": "success",
        "logical_date": ENDED - timedelta(days=1),
        "started": ENDED - timedelta(minutes=65),
        "ended": ENDED,
    }
    return RunRow(run_id=run_id, **{**defaults, **fields})


def summary(**fields: Any) -> PipelineSummary:
    """The pipeline with one run, its next run the day after, before any gate decided."""
    values: dict[str, Any] = {
        "dag_id": DAG_ID,
        "champion": None,
        "latest": run("scheduled__2026-11-21"),
        "paused": False,
        "next_run": ENDED + timedelta(days=1),
        "on_new_version": False,
        "gpu_hours": 1234.56,
    }
    return PipelineSummary(**{**values, **fields})


def test_a_page_that_is_not_there_says_why_as_text() -> None:
    html = not_found_page("no run <script>alert(1)</script> of cifar10_retrain")

    assert html.startswith("<!doctype html>") and "<title>Not found</title>" in html
    assert "no run &lt;script&gt;alert(1)&lt;/script&gt; of cifar10_retrain" in html
    assert "<script>" not in html


def test_the_index_shows_each_pipelines_last_run_next_run_and_gpu_hours() -> None:
    html = pipelines_index([summary(on_new_version=True)], [])

    assert "<a href='/aliyun-training/pipelines/cifar10_retrain'>cifar10_retrain</a>" in html
    assert "title='scheduled__2026-11-21'>success</a>" in html, "the run id on hover"
    assert "2026-11-22 03:00 UTC" in html, "when the last run ended"
    assert "2026-11-23 03:00 UTC or when a new dataset version lands" in html
    assert "<td class='number'>1,234.6</td>" in html
    assert "Declarations that did not load" not in html


def test_a_paused_or_unscheduled_pipeline_says_so_instead_of_a_next_run() -> None:
    paused = pipelines_index([summary(paused=True)], [])
    manual = pipelines_index([summary(next_run=None, latest=None, gpu_hours=None)], [])

    assert ">paused</span>" in paused and "2026-11-23" not in paused
    assert ">manual</span>" in manual and "no runs yet" in manual and "<td class='number'>—</td>" in manual


def test_declarations_that_did_not_load_are_listed_with_their_error_as_text() -> None:
    broken = BrokenDeclaration("team_b_<b>retrain</b>", "pipeline declaration team_b.yaml: nodes: <unset>")

    html = pipelines_index([], [broken])

    assert "No training pipeline you may read is deployed." in html
    assert "<a href='/dags/team_b_%3Cb%3Eretrain%3C%2Fb%3E'>team_b_&lt;b&gt;retrain&lt;/b&gt;</a>" in html
    assert "<td class='error'>pipeline declaration team_b.yaml: nodes: &lt;unset&gt;</td>" in html


def test_a_pipelines_runs_show_the_model_its_metrics_and_its_pages() -> None:
    newest = run(
        "manual__<2>",
        dataset_version="2026-11-22",
        registered={"version": 7, "uri": "models:/cifar10/7"},
        metrics={"final_test_accuracy": 0.912345, "final_test_loss": 0.31},
        has_report=True,
        has_plan=True,
    )
    older = run("scheduled__1", state="failed", metrics={"final_test_accuracy": 0.85})

    html = pipeline_runs_page(DAG_ID, [newest, older])

    assert "<th>test accuracy</th><th>test loss</th>" in html, "final_ dropped, words spaced"
    assert "<span title='run manual__&lt;2&gt;, models:/cifar10/7'>v7 · dataset 2026-11-22</span>" in html
    assert "<td class='number'>0.9123</td><td class='number'>0.31</td>" in html
    assert "<td class='number'>0.85</td><td></td>" in html, "a metric the run did not record is blank"
    assert "href='/aliyun-training/runs/cifar10_retrain/manual__%3C2%3E/report'>Report</a>" in html
    assert "href='/aliyun-training/runs/cifar10_retrain/manual__%3C2%3E/plan'>Plan</a>" in html
    assert "<td>1 h 05 min</td>" in html
    assert "<td class='state-failed'>failed</td>" in html and "no model" in html
    assert "<h2>Across runs</h2>" in html, "two runs with metrics are charted"


def test_a_pipeline_without_runs_says_how_to_start_one() -> None:
    html = pipeline_runs_page(DAG_ID, [])

    assert "No runs yet: trigger one from the DAG's page." in html
    assert "<h2>Across runs</h2>" not in html
