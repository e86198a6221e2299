"""The run report a user reads: which run made the model and with what, where the time and GPU-hours
went, every metric charted, a warning when train and test drift apart, and names a person can read.

Reports are published from a real metrics.json (``publish_artifacts``, as the pipeline does); the
run block comes from the operator reading its DAG run, as a task does.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aliyun_training.artifacts.collect import KeptOutputs, RunInfo, publish_artifacts
from aliyun_training.artifacts.report import image_name
from aliyun_training.stage_records import Attempt, JobResult
from tests.unit.test_artifacts import DATASET, EPOCHS, RUNTIME, _job, _job_output

RUN = RunInfo(
    dag_id="cifar10_retrain",
    run_id="manual__2026-11-22T10:00:00+00:00",
    logical_date="2026-11-22T10:00:00+00:00",
    run_type="manual",
    params={"nodes": 2, "epochs": 3, "note": "<script>alert(1)</script>", "dataset_version": None},
    url="https://airflow.example.com/dags/cifar10_retrain/runs/manual__2026-11-22T10%3A00%3A00%2B00%3A00",
    started="2026-11-22T10:00:03+00:00",
)
#: A job that ran from 10:12:05 to 10:33:55 (21 min 50 s), twelve minutes after the run started.
TIMED = {"started": "2026-11-22T10:12:05+00:00", "finished": "2026-11-22T10:33:55+00:00", "gpu_hours": 0.7278}


def _published(
    tmp_path: Path,
    *,
    epochs: list[dict[str, Any]] = EPOCHS,
    job: dict[str, Any] | None = None,
    run: RunInfo | None = RUN,
    series: tuple[str, ...] = KeptOutputs.report_metrics,
) -> tuple[dict[str, Any], str]:
    """The manifest and report.html of one published set."""
    tmp_path.mkdir(exist_ok=True)
    result = _job(_job_output(tmp_path, epochs)).model_copy(update=job or {})
    artifacts = publish_artifacts(
        model="cifar10",
        artifact_root=str(tmp_path / "artifacts"),
        job=result,
        dataset=DATASET,
        runtime=RUNTIME,
        kept=KeptOutputs(report_metrics=series),
        run=run,
    )
    return json.loads(Path(artifacts.manifest_uri).read_text()), Path(artifacts.report_uri).read_text()


def _row(html: str, label: str) -> str:
    """The value cell of the summary or parameter row labelled ``label``."""
    found = re.search(rf"<tr><th>{re.escape(label)}</th><td>(.*?)</td></tr>", html)
    assert found, f"no row {label!r}"
    return found.group(1)


# -- the run -------------------------------------------------------------------------------------


def test_the_manifest_records_the_run_and_a_set_published_outside_one_records_none(tmp_path: Path) -> None:
    manifest, _ = _published(tmp_path / "run")
    outside, html = _published(tmp_path / "outside", run=None)

    assert manifest["run"] == asdict(RUN)
    assert outside["run"] is None
    assert "Not published by an Airflow run" in html and "Open this run in Airflow" not in html


def test_the_report_lists_the_form_values_escaped_and_links_to_the_run(tmp_path: Path) -> None:
    _, html = _published(tmp_path)

    assert _row(html, "nodes") == "2" and _row(html, "epochs") == "3"
    assert _row(html, "dataset_version") == "null"
    assert _row(html, "note") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert "<script" not in html
    assert html.count(f'<a href="{RUN.url}">Open this run in Airflow</a>') == 2, "in the header and Run"
    assert _row(html, "Run") == "manual__2026-11-22T10:00:00+00:00"
    assert _row(html, "Started") == "2026-11-22 10:00:03 UTC"
    assert "set [api] base_url" not in html


def test_a_run_link_without_base_url_is_a_path_and_the_report_says_so(tmp_path: Path) -> None:
    run = RunInfo(**{**asdict(RUN), "url": "/dags/cifar10_retrain/runs/manual__1"})

    _, html = _published(tmp_path, run=run)

    assert '<a href="/dags/cifar10_retrain/runs/manual__1">Open this run in Airflow</a>' in html
    assert "(a path on the Airflow web server: set [api] base_url for a full address)" in html


class _TaskInstance:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        (
            "https://airflow.example.com/",
            "https://airflow.example.com/dags/cifar10_retrain/runs/manual__2026-11-22T10%3A00%3A00%2B00%3A00",
        ),
        ("", "/dags/cifar10_retrain/runs/manual__2026-11-22T10%3A00%3A00%2B00%3A00"),
    ],
)
def test_the_operator_records_its_dag_run_and_only_the_forms_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str, url: str
) -> None:
    from airflow.sdk import DAG, Param
    from airflow.utils.types import DagRunType

    from aliyun_training.operators.artifacts import ArtifactsOperator

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", base_url)
    output = _job_output(tmp_path)
    with DAG(
        "cifar10_retrain",
        schedule=None,
        params={"nodes": Param(2, type="integer"), "note": Param("", type="string")},
    ):
        operator = ArtifactsOperator(
            task_id="publish_artifacts",
            artifacts={
                "model": "cifar10",
                "artifact_root": str(tmp_path / "artifacts"),
                "outputs_root": str(tmp_path),
            },
            job_result=_job(output).model_dump(mode="json"),
            dataset=DATASET.model_dump(mode="json"),
            runtime=RUNTIME.model_dump(mode="json"),
        )
    dag_run = SimpleNamespace(
        dag_id="cifar10_retrain",
        run_id="manual__2026-11-22T10:00:00+00:00",
        logical_date=None,
        run_type=DagRunType.MANUAL,
        start_date=datetime(2026, 11, 22, 10, 0, 3, tzinfo=UTC),
    )
    # A run's conf may carry keys the form does not have: they are not the form's values.
    params = {"nodes": 4, "note": "retry with more nodes", "not_a_field": "from the raw conf"}
    context = {"dag_run": dag_run, "params": params, "ti": _TaskInstance()}

    published = operator.execute(context)  # type: ignore[arg-type]

    run = json.loads(Path(published["manifest_uri"]).read_text())["run"]
    assert run == {
        "dag_id": "cifar10_retrain",
        "run_id": "manual__2026-11-22T10:00:00+00:00",
        "logical_date": None,
        "run_type": "manual",
        "params": {"nodes": 4, "note": "retry with more nodes"},
        "url": url,
        "started": "2026-11-22T10:00:03+00:00",
    }


# -- time and cost -------------------------------------------------------------------------------


def _stage_rows(html: str) -> list[list[str]]:
    table = html.split("<h2>Stage timings</h2>", 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", row) for row in table.strip().splitlines()[2:]]


def test_stage_timings_run_from_the_runs_start_through_training_to_publication(tmp_path: Path) -> None:
    manifest, html = _published(tmp_path, job=TIMED)

    stages = manifest["stages"]
    assert [s["stage"] for s in stages] == [
        "Until the training job started",
        "of which dataset staging",
        "Training job",
        "Publishing artifacts",
    ]
    assert [s["seconds"] for s in stages[:3]] == [722.0, DATASET.seconds, 1310.0]
    assert stages[0]["started"] == RUN.started and stages[0]["finished"] == TIMED["started"]
    assert stages[3]["seconds"] == manifest["timings"]["collect_seconds"]
    rows = _stage_rows(html)
    assert rows[0][:4] == [
        "Until the training job started",
        "2026-11-22 10:00:03 UTC",
        "2026-11-22 10:12:05 UTC",
        "12 min 02 s",
    ]
    assert rows[1][:4] == ["of which dataset staging", "-", "-", "3.2 s"]
    assert rows[2][:4] == [
        "Training job",
        "2026-11-22 10:12:05 UTC",
        "2026-11-22 10:33:55 UTC",
        "21 min 50 s",
    ]
    assert rows[-1][0] == "Run start to published"


def test_a_run_cleared_after_training_gives_the_stage_before_training_no_duration(tmp_path: Path) -> None:
    cleared = RunInfo(**{**asdict(RUN), "started": "2026-11-22T12:00:00+00:00"})

    manifest, html = _published(tmp_path, job=TIMED, run=cleared)

    assert manifest["stages"][0]["seconds"] is None
    assert _stage_rows(html)[0][3] == "-"


def test_each_try_of_the_training_job_is_a_stage_and_gpu_hours_add_up_over_the_tries(tmp_path: Path) -> None:
    tries = [
        Attempt(try_number=1, job_id="dlc-1", status="Failed", gpu_hours=2.91, started=TIMED["started"],
                finished=TIMED["finished"]),
        Attempt(try_number=2, job_id="dlc-2", status="Succeeded", gpu_hours=5.7244,
                started="2026-11-22T10:41:12+00:00", finished="2026-11-22T11:02:40+00:00"),
    ]  # fmt: skip
    epochs = [{**epoch, "attempt": 2} for epoch in EPOCHS]

    manifest, html = _published(tmp_path, epochs=epochs, job={"gpu_hours": 5.7244, "attempts": tries})

    assert [s["stage"] for s in manifest["stages"]][2:4] == ["Training job, try 1", "Training job, try 2"]
    assert manifest["stages"][0]["finished"] == "2026-11-22T10:12:05+00:00", "until the first try started"
    assert [row[3] for row in _stage_rows(html)[2:4]] == ["21 min 50 s", "21 min 28 s"]
    assert _row(html, "GPU-hours") == "5.7244 this try; 8.6344 over all 2 tries"


def test_a_single_try_shows_its_gpu_hours(tmp_path: Path) -> None:
    _, html = _published(tmp_path, job=TIMED)

    assert _row(html, "GPU-hours") == "0.7278"


def test_epoch_durations_are_a_column_and_a_summary(tmp_path: Path) -> None:
    epochs = [*EPOCHS[:2], {**EPOCHS[2], "seconds": 75.0}]

    _, html = _published(tmp_path, epochs=epochs)

    table = html.split("<tr><th>Epoch</th>", 1)[1].split("</table>", 1)[0]
    assert "<th>Duration</th>" in table
    assert [re.findall(r"<td>(.*?)</td>", row)[-1] for row in table.strip().splitlines()[1:]] == [
        "12.5 s",
        "11.9 s",
        "1 min 15 s",
    ]
    assert (
        _row(html, "Epoch duration")
        == "mean 33.1 s, shortest 11.9 s, longest 1 min 15 s (3 of 3 epochs timed)"
    )


def test_epochs_without_seconds_say_their_duration_was_not_recorded(tmp_path: Path) -> None:
    untimed = [{key: value for key, value in epoch.items() if key != "seconds"} for epoch in EPOCHS]

    _, html = _published(tmp_path, epochs=untimed)

    assert _row(html, "Epoch duration") == "not recorded (the training script wrote no seconds per epoch)"


# -- metrics -------------------------------------------------------------------------------------

FOUR = ("train_loss", "test_loss", "train_accuracy", "test_accuracy")


def _epochs(train_accuracy: float, test_accuracy: float, train_loss: float, test_loss: float) -> list[dict]:
    """Three epochs ending at the given values."""
    final = {
        "train_loss": train_loss,
        "test_loss": test_loss,
        "train_accuracy": train_accuracy,
        "test_accuracy": test_accuracy,
    }
    start = {"train_loss": 2.3, "test_loss": 2.3, "train_accuracy": 0.1, "test_accuracy": 0.1}
    return [{**start, "epoch": 1}, {**start, "epoch": 2}, {**final, "epoch": 3}]


def test_every_metric_series_is_charted_losses_and_accuracies_on_their_own_axes(tmp_path: Path) -> None:
    _, html = _published(tmp_path, epochs=_epochs(0.8, 0.76, 0.5, 0.55), series=FOUR)

    charts = re.findall(r"<figure><figcaption>(.*?)</figcaption>\s*(<svg.*?</svg>)</figure>", html, re.DOTALL)
    assert [caption for caption, _ in charts] == ["Loss per epoch", "Accuracy per epoch"]
    series = [re.findall(r'<polyline data-series="([^"]*)"', svg) for _, svg in charts]
    assert series == [["train_loss", "test_loss"], ["train_accuracy", "test_accuracy"]]
    assert len(re.findall(r"<polyline ", html)) == len(FOUR)
    assert all(len(points.split()) == 3 for points in re.findall(r'points="([^"]*)"', html))
    assert 'stroke-dasharray="6 3"' in charts[0][1], "test series are dashed"


def test_a_series_of_its_own_measure_gets_its_own_chart(tmp_path: Path) -> None:
    epochs = [{**epoch, "lr": 0.05 / epoch["epoch"]} for epoch in EPOCHS]

    _, html = _published(tmp_path, epochs=epochs, series=("train_loss", "test_loss", "test_accuracy", "lr"))

    assert re.findall(r"<figcaption>(.*?)</figcaption>", html) == [
        "Loss per epoch",
        "Accuracy per epoch",
        "Lr per epoch",
    ]
    assert len(re.findall(r"<polyline ", html)) == 4


def test_a_large_accuracy_gap_is_a_visible_warning(tmp_path: Path) -> None:
    _, html = _published(tmp_path, epochs=_epochs(0.99, 0.60, 0.5, 0.6), series=FOUR)

    warning = re.search(r'<p class="warning" role="alert">(.*?)</p>', html)
    assert warning, "no warning"
    assert "train accuracy 99.00% vs test 60.00%: 39.0 points apart (more than 10)" in warning.group(1)
    assert "loss" not in warning.group(1), "the losses are close"
    assert html.index('class="warning"') < html.index("<table>"), "above the tables, where it is seen"


def test_a_large_loss_ratio_is_a_warning_when_the_script_reports_no_train_accuracy(tmp_path: Path) -> None:
    epochs = [*EPOCHS[:2], {**EPOCHS[2], "train_loss": 0.40, "test_loss": 0.92}]

    _, html = _published(tmp_path, epochs=epochs)

    assert "test loss 0.9200 is 2.3x train loss 0.4000 (more than 1.5x)" in html


@pytest.mark.parametrize(
    "final",
    [(0.80, 0.76, 0.50, 0.55), (0.80, 0.705, 0.50, 0.74), ("n/a", 0.40, 0.0, 0.90)],
    ids=["close", "just-under-both-marks", "nothing-to-compare"],
)
def test_no_warning_when_train_and_test_are_close_or_not_comparable(tmp_path: Path, final: tuple) -> None:
    _, html = _published(tmp_path, epochs=_epochs(*final), series=FOUR)

    assert 'class="warning"' not in html


# -- names ---------------------------------------------------------------------------------------

DIGEST = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@pytest.mark.parametrize(
    ("uri", "digest", "readable"),
    [
        (
            "registry-vpc.cn-hangzhou.aliyuncs.com/ml-team/cifar10-train:5c1d9e2fa0b4",
            DIGEST,
            "ml-team/cifar10-train:5c1d9e2fa0b4 @ sha256:9f86d081884c",
        ),
        (f"localhost:5000/train@{DIGEST}", "", "train @ sha256:9f86d081884c"),
        ("pytorch/pytorch:2.5.1-cuda12.4", "", "pytorch/pytorch:2.5.1-cuda12.4"),
        ("local:///opt/venv/bin/python", DIGEST, "local interpreter /opt/venv/bin/python"),
    ],
    ids=["registry", "pinned-by-digest", "docker-hub-no-digest", "local"],
)
def test_image_names_read_as_repository_tag_and_a_short_digest(uri: str, digest: str, readable: str) -> None:
    assert image_name(uri, digest).startswith(readable)


def test_the_report_shows_readable_model_job_and_image_names_with_the_full_ids_beneath(
    tmp_path: Path,
) -> None:
    image = RUNTIME.model_copy(
        update={
            "uri": "registry-vpc.cn-hangzhou.aliyuncs.com/ml-team/cifar10-train:5c1d9e2fa0b4",
            "digest": DIGEST,
        }
    )
    tmp_path.mkdir(exist_ok=True)
    job: JobResult = _job(_job_output(tmp_path))
    artifacts = publish_artifacts(
        model="cifar10", artifact_root=str(tmp_path / "a"), job=job, dataset=DATASET, runtime=image, run=RUN
    )
    html = Path(artifacts.report_uri).read_text()

    assert _row(html, "Image") == (
        f"ml-team/cifar10-train:5c1d9e2fa0b4 @ sha256:9f86d081884c<br><small>{image.uri} {DIGEST}</small>"
    )
    assert _row(html, "Model") == (
        f"cifar10, trained on dataset version v1<br><small>artifact set v1/{job.display_name}</small>"
    )
    assert _row(html, "Job") == f"{job.display_name} on local (Succeeded)<br><small>local-1234</small>"
    assert "Dataset version <strong>v1</strong>" in html and '<span class="status">Succeeded</span>' in html
