"""Publishing a finished job's checkpoints, metrics and run report as one artifact set."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from html import escape
from pathlib import Path

import pytest

from aliyun_training.artifacts.collect import publish_artifacts, summarize_metrics
from aliyun_training.artifacts.manifest import ArtifactError
from aliyun_training.artifacts.outcome import record_outcome
from aliyun_training.artifacts.report import metric_chart_svg, render_report
from aliyun_training.promotion import (
    Approval,
    Bounds,
    Comparison,
    Decision,
    Outcome,
    PromotionRule,
    decide,
)
from aliyun_training.stage_records import ApprovalAnswer, BandwidthCheck, BuiltImage, JobResult, StagedDataset
from aliyun_training.staging.publish import publication_lock
from aliyun_training.validation import SpecError
from tests.operator_harness import MANUAL_RUN

EPOCHS = [
    {"epoch": 1, "train_loss": 2.31, "test_loss": 2.05, "test_accuracy": 0.21, "seconds": 12.5},
    {"epoch": 2, "train_loss": 1.64, "test_loss": 1.52, "test_accuracy": 0.47, "seconds": 11.9},
    {"epoch": 3, "train_loss": 1.12, "test_loss": 1.20, "test_accuracy": 0.63, "seconds": 12.1},
]
CHECKPOINT = b"\x80\x04fake checkpoint bytes" * 40
MODEL = b"\x80\x04fake model bytes" * 64


def _job_output(root: Path, epochs: list[dict] = EPOCHS) -> Path:
    output = root / "job-output"
    (output / "checkpoints").mkdir(parents=True)
    (output / "checkpoints" / "epoch-0001.pt").write_bytes(CHECKPOINT)
    (output / "model.pt").write_bytes(MODEL)
    (output / "metrics.json").write_text(json.dumps({"world_size": 2, "backend": "gloo", "epochs": epochs}))
    (output / "stdout.log").write_text("not collected")
    return output


def _job(output: Path | None, display_name: str = "train-cifar10-run-1a2b3c4d5e") -> JobResult:
    return JobResult(
        backend="local",
        job_id="local-1234",
        display_name=display_name,
        status="Succeeded",
        wall_seconds=41.5,
        node_hours=0.023,
        gpu_hours=0.0,
        output_uri=str(output) if output is not None else None,
    )


DATASET = StagedDataset(
    uri="/mnt/cpfs/cifar10/v1",
    version="v1",
    files=6,
    bytes=184_320_000,
    manifest_uri="/mnt/cpfs/cifar10/v1/_manifest.json",
    checksum="0" * 64,
    transferred_files=6,
    seconds=3.25,
)
RUNTIME = BuiltImage(uri="local", digest="python:3.11.7", python="3.11.7", torch="2.3.0+cpu")


def _publish(tmp_path: Path, job: JobResult, model: str = "cifar10-resnet"):
    return publish_artifacts(
        model=model, artifact_root=str(tmp_path / "artifacts"), job=job, dataset=DATASET, runtime=RUNTIME
    )


def _manifest(artifacts) -> dict:
    return json.loads(Path(artifacts.manifest_uri).read_text())


def test_artifact_set_lands_under_model_dataset_version_and_job(tmp_path):
    job = _job(_job_output(tmp_path))

    artifacts = _publish(tmp_path, job)

    target = tmp_path / "artifacts" / "cifar10-resnet" / "v1" / job.display_name
    assert artifacts.uri == str(target)
    assert artifacts.manifest_uri == str(target / "manifest.json")
    assert artifacts.report_uri == str(target / "report.html")
    assert (target / "model.pt").read_bytes() == MODEL
    assert (target / "checkpoints" / "epoch-0001.pt").read_bytes() == CHECKPOINT
    assert not (target / "stdout.log").exists()


def test_manifest_describes_model_dataset_job_and_runtime(tmp_path):
    job = _job(_job_output(tmp_path))

    manifest = _manifest(_publish(tmp_path, job))

    assert manifest["model"] == "cifar10-resnet"
    assert manifest["version"] == f"v1/{job.display_name}"
    assert manifest["dataset"] == DATASET.model_dump(mode="json")
    assert manifest["job"] == job.model_dump(mode="json")
    assert manifest["runtime"] == RUNTIME.model_dump(mode="json")
    assert manifest["report"] == "report.html"


def test_manifest_metrics_are_per_epoch_lists(tmp_path):
    manifest = _manifest(_publish(tmp_path, _job(_job_output(tmp_path))))

    metrics = manifest["metrics"]
    assert metrics["epochs"] == len(EPOCHS)
    assert metrics["train_loss"] == [e["train_loss"] for e in EPOCHS]
    assert metrics["test_loss"] == [e["test_loss"] for e in EPOCHS]
    assert metrics["test_accuracy"] == [e["test_accuracy"] for e in EPOCHS]
    assert metrics["epoch_seconds"] == [e["seconds"] for e in EPOCHS]
    assert metrics["final_train_loss"] == EPOCHS[-1]["train_loss"]
    assert metrics["final_test_accuracy"] == EPOCHS[-1]["test_accuracy"]


def test_manifest_timings_come_from_staging_and_the_job(tmp_path):
    job = _job(_job_output(tmp_path))

    timings = _manifest(_publish(tmp_path, job))["timings"]

    assert timings["staging_seconds"] == DATASET.seconds
    assert timings["training_wall_seconds"] == job.wall_seconds
    assert timings["node_hours"] == job.node_hours
    assert timings["gpu_hours"] == job.gpu_hours
    assert timings["collect_seconds"] >= 0


def test_manifest_files_have_sha256_of_the_copied_files(tmp_path):
    artifacts = _publish(tmp_path, _job(_job_output(tmp_path)))

    target = Path(artifacts.uri)
    files = {entry["path"]: entry for entry in _manifest(artifacts)["files"]}
    assert set(files) == {"checkpoints/epoch-0001.pt", "metrics.json", "model.pt"}
    for path, entry in files.items():
        content = (target / path).read_bytes()
        assert entry["size"] == len(content)
        assert entry["sha256"] == hashlib.sha256(content).hexdigest()
    assert files["model.pt"]["sha256"] == hashlib.sha256(MODEL).hexdigest()


def test_artifact_set_record_carries_the_summary_metrics(tmp_path):
    artifacts = _publish(tmp_path, _job(_job_output(tmp_path)))

    assert artifacts.metrics == {
        "epochs": len(EPOCHS),
        "train_loss": [e["train_loss"] for e in EPOCHS],
        "final_train_loss": EPOCHS[-1]["train_loss"],
        "final_test_loss": EPOCHS[-1]["test_loss"],
        "final_test_accuracy": EPOCHS[-1]["test_accuracy"],
    }


def _polylines(html: str) -> list[list[str]]:
    return [points.split() for points in re.findall(r'<polyline[^>]*points="([^"]*)"', html)]


def test_report_charts_every_metric_series_with_one_point_per_epoch(tmp_path):
    artifacts = _publish(tmp_path, _job(_job_output(tmp_path)))

    html = Path(artifacts.report_uri).read_text()
    lines = _polylines(html)
    assert len(lines) == 3, "train loss, test loss and test accuracy"
    assert all(len(points) == len(EPOCHS) for points in lines)
    loss, accuracy = re.findall(r"<svg.*?</svg>", html, flags=re.DOTALL)
    assert re.findall(r'data-series="([^"]*)"', loss) == ["train_loss", "test_loss"]
    assert re.findall(r'data-series="([^"]*)"', accuracy) == ["test_accuracy"], "on an axis of its own"
    assert ">100%</text>" in accuracy and "%" not in loss


def test_report_lists_every_epoch_and_the_final_accuracy(tmp_path):
    artifacts = _publish(tmp_path, _job(_job_output(tmp_path)))

    html = Path(artifacts.report_uri).read_text()
    for epoch in EPOCHS:
        assert f"<td>{epoch['train_loss']:.4f}</td>" in html
    assert "63.00%" in html
    assert "local-1234" in html
    assert "<script" not in html


def test_republishing_the_same_run_replaces_the_set(tmp_path):
    output = _job_output(tmp_path)
    job = _job(output)
    first = _publish(tmp_path, job)
    Path(first.uri, "stale-file.txt").write_text("left over from an earlier publish")
    (output / "model.pt").write_bytes(b"retrained model")

    second = _publish(tmp_path, job)

    target = Path(second.uri)
    assert second.uri == first.uri
    assert (target / "model.pt").read_bytes() == b"retrained model"
    assert not (target / "stale-file.txt").exists()
    model_entry = next(e for e in _manifest(second)["files"] if e["path"] == "model.pt")
    assert model_entry["sha256"] == hashlib.sha256(b"retrained model").hexdigest()
    # No partial or retired directory is left; the lock file stays beside the set (never deleted).
    assert sorted(p.name for p in target.parent.iterdir()) == [f".{job.display_name}.lock", job.display_name]


def test_job_without_output_dir_is_an_error_and_publishes_nothing(tmp_path):
    with pytest.raises(ArtifactError) as excinfo:
        _publish(tmp_path, _job(tmp_path / "never-written"))

    message = str(excinfo.value)
    assert "job local-1234 has no output directory" in message
    assert "never-written" in message
    assert not (tmp_path / "artifacts").exists()


def test_job_without_output_uri_is_an_error(tmp_path):
    with pytest.raises(ArtifactError, match="has no output directory"):
        _publish(tmp_path, _job(None))


def test_metrics_without_epochs_is_an_error_and_publishes_nothing(tmp_path):
    output = _job_output(tmp_path, epochs=[])

    with pytest.raises(ArtifactError) as excinfo:
        _publish(tmp_path, _job(output))

    assert "metrics.json lists no epochs" in str(excinfo.value)
    assert not (tmp_path / "artifacts").exists()


def test_missing_metrics_file_names_the_file_and_job(tmp_path):
    output = _job_output(tmp_path)
    (output / "metrics.json").unlink()

    with pytest.raises(ArtifactError) as excinfo:
        _publish(tmp_path, _job(output))

    message = str(excinfo.value)
    assert f"cannot read metrics.json of job local-1234 in {output}" in message
    assert not (tmp_path / "artifacts").exists()


def test_unparseable_metrics_file_is_an_error(tmp_path):
    output = _job_output(tmp_path)
    (output / "metrics.json").write_text('{"epochs": [')

    with pytest.raises(ArtifactError, match=r"metrics\.json of job local-1234 in .* is not JSON"):
        _publish(tmp_path, _job(output))


def test_epoch_missing_a_series_is_an_error(tmp_path):
    output = _job_output(tmp_path, epochs=[{"epoch": 1, "train_loss": 1.0, "seconds": 1.0}])

    with pytest.raises(ArtifactError) as excinfo:
        _publish(tmp_path, _job(output))

    assert "test_loss" in str(excinfo.value)


def test_failed_publish_keeps_the_earlier_set(tmp_path):
    output = _job_output(tmp_path)
    job = _job(output)
    first = _publish(tmp_path, job)
    (output / "metrics.json").write_text(json.dumps({"epochs": []}))

    with pytest.raises(ArtifactError):
        _publish(tmp_path, job)

    assert _manifest(first)["metrics"]["epochs"] == len(EPOCHS)
    assert (Path(first.uri) / "model.pt").read_bytes() == MODEL


def test_summarize_metrics_rejects_missing_epochs_key():
    with pytest.raises(ArtifactError, match="lists no epochs"):
        summarize_metrics({"world_size": 1})


def test_loss_chart_with_empty_series_says_no_epochs():
    assert metric_chart_svg({"train_loss": [], "test_loss": []}) == "<p>No epochs recorded.</p>"
    assert metric_chart_svg({}) == "<p>No epochs recorded.</p>"


def test_loss_chart_with_one_epoch_draws_one_point_per_series():
    svg = metric_chart_svg({"train_loss": [0.5], "test_loss": [0.7]})

    assert svg.startswith("<svg")
    assert [len(points) for points in _polylines(svg)] == [1, 1]


def test_loss_chart_with_all_zero_losses_stays_finite():
    svg = metric_chart_svg({"train_loss": [0.0, 0.0]})

    assert "nan" not in svg.lower()
    assert "inf" not in svg.lower()
    assert [len(points) for points in _polylines(svg)] == [2]


def test_loss_chart_puts_lower_losses_lower_on_the_page():
    svg = metric_chart_svg({"train_loss": [2.0, 1.0, 0.5]})

    ys = [float(point.split(",")[1]) for point in _polylines(svg)[0]]
    assert ys[0] < ys[1] < ys[2]


def test_loss_chart_escapes_series_names():
    svg = metric_chart_svg({"<b>loss</b>": [1.0]})

    assert "&lt;b&gt;loss&lt;/b&gt;" in svg
    assert "<b>" not in svg


def test_render_report_escapes_the_model_name(tmp_path):
    artifacts = _publish(tmp_path, _job(_job_output(tmp_path)))
    manifest = {**_manifest(artifacts), "model": "<script>alert(1)</script>"}

    html = render_report(manifest)

    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_report_shows_the_verified_image_and_the_rdma_bandwidth_check(tmp_path):
    image = BuiltImage(
        uri="registry.example.com/ml/train:0123456789abcdef",
        digest="sha256:" + "ab" * 32,
        python="3.11.10",
        torch="2.5.1",
        cuda="12.4",
        nccl="2.21.5",
        verified=True,
    )
    check = BandwidthCheck(
        verdict="PASS",
        tool="ib_write_bw",
        measured_gbps=188.4,
        line_rate_gbps=200.0,
        transport="ib",
        message="188.40 Gb/s = 94% of the 200 Gb/s line rate",
    )
    artifacts = publish_artifacts(
        model="cifar10",
        artifact_root=str(tmp_path / "artifacts"),
        job=_job(_job_output(tmp_path)),
        dataset=DATASET,
        runtime=image,
        bandwidth=check,
    )

    manifest = _manifest(artifacts)
    assert manifest["rdma_bandwidth"]["measured_gbps"] == 188.4 and manifest["runtime"]["verified"] is True
    report = Path(artifacts.report_uri).read_text()
    assert "registry.example.com/ml/train:0123456789abcdef sha256:abab" in report and "(verified)" in report
    assert "PASS: ib_write_bw, 188.40 Gb/s = 94% of the 200 Gb/s line rate" in report


def test_report_of_a_run_without_a_bandwidth_check_has_no_bandwidth_row(tmp_path):
    report = Path(_publish(tmp_path, _job(_job_output(tmp_path))).report_uri).read_text()

    assert "RDMA bandwidth" not in report and "(verified)" not in report


# -- publishing never replaces what it did not publish ---------------------------------------------


def test_a_foreign_directory_where_an_artifact_set_goes_is_refused_and_kept(tmp_path):
    job = _job(_job_output(tmp_path))
    foreign = tmp_path / "artifacts" / "cifar10-resnet" / "v1" / job.display_name
    foreign.mkdir(parents=True)
    (foreign / "model.pt").write_bytes(b"someone else's model")

    with pytest.raises(SpecError) as caught:
        _publish(tmp_path, job)

    assert str(caught.value).startswith(
        f"artifact_root: {foreign} already exists and holds no manifest.json, so it was not published here"
    )
    assert [p.name for p in foreign.iterdir()] == ["model.pt"]
    assert (foreign / "model.pt").read_bytes() == b"someone else's model"
    assert sorted(p.name for p in foreign.parent.iterdir()) == [job.display_name]


@pytest.mark.parametrize("link", ["target", "partial"])
def test_a_symlinked_artifact_set_or_partial_is_refused(tmp_path, link):
    job = _job(_job_output(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "manifest.json").write_text("{}")
    (elsewhere / "precious.txt").write_text("keep me")
    parent = tmp_path / "artifacts" / "cifar10-resnet" / "v1"
    parent.mkdir(parents=True)
    name = job.display_name if link == "target" else f".{job.display_name}.partial"
    (parent / name).symlink_to(elsewhere)

    with pytest.raises(SpecError, match=f"artifact_root: {parent / name} is a symbolic link"):
        _publish(tmp_path, job)

    assert sorted(p.name for p in elsewhere.iterdir()) == ["manifest.json", "precious.txt"]
    assert (elsewhere / "precious.txt").read_text() == "keep me"


def test_a_run_that_staged_nothing_and_planned_no_fixed_dataset_fails_naming_the_dataset(
    tmp_path: Path,
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from aliyun_training.operators.artifacts import ArtifactsOperator

    operator = ArtifactsOperator(
        task_id="publish_artifacts",
        artifacts={"model": "cifar10", "artifact_root": str(tmp_path / "artifacts")},
        planned_dataset={"name": "cifar10", "version": "v1"},
        job_result=_job(None).model_dump(mode="json"),
        runtime=RUNTIME.model_dump(mode="json"),
    )

    with pytest.raises(
        AirflowFailException, match=r"^dataset: the run staged nothing and its plan names no fixed"
    ):
        operator.execute({})  # type: ignore[arg-type]
    assert not (tmp_path / "artifacts").exists(), "nothing is published"


def test_the_wall_time_shows_its_exact_seconds_only_where_the_duration_rounds_them(tmp_path):
    artifacts = _publish(tmp_path, _job(_job_output(tmp_path)))
    manifest = _manifest(artifacts)
    longer = {**manifest, "job": {**manifest["job"], "wall_seconds": 247.3}}

    assert "<td>41.5 s, 0.0230 node-hours</td>" in Path(artifacts.report_uri).read_text()
    assert "<td>4 min 07 s (247.3 s), 0.0230 node-hours</td>" in render_report(longer)


# -- the promotion's outcome: what the files say before and after promote decides -----------------

RUN = MANUAL_RUN
#: The run as ``record_outcome`` names it: its DAG id and run id.
RUN_IDS = (RUN.dag_id, RUN.run_id)
#: The first model passes the gate (its final test loss is 1.20) and waits for alice's approval.
APPROVED = PromotionRule(
    metric="final_test_accuracy",
    guards={"final_test_loss": Bounds(max=2.0)},
    approval=Approval(approvers=["alice"]),
)


def _gated(tmp_path: Path, rule: PromotionRule = APPROVED):
    def gate(metrics: dict) -> Decision:
        return decide(rule, Comparison.of_final_metrics(metrics, None), RUN.run_id, RUN.run_type)

    return publish_artifacts(
        model="cifar10-resnet",
        artifact_root=str(tmp_path / "artifacts"),
        job=_job(_job_output(tmp_path)),
        dataset=DATASET,
        runtime=RUNTIME,
        run=RUN,
        gate=gate,
    )


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_pass_that_needs_approval_is_published_as_awaiting_approval_not_as_promoted(tmp_path):
    artifacts = _gated(tmp_path)

    promotion = _manifest(artifacts)["promotion"]
    report = Path(artifacts.report_uri).read_text()
    assert promotion["promoted"] is False and promotion["gate_passed"] is True
    assert promotion["outcome"]["state"] == "awaiting_approval"
    assert "<strong>Awaiting approval</strong>: the gate passed it" in report
    assert "Promoted to champion" not in report
    assert "<td>passed: the first model: final_test_accuracy 0.63, every guard passed</td>" in report
    assert "<th>Guard</th><td>final_test_loss 1.2 ≤ max 2: passed</td>" in report
    # The task's record is the gate's decision, which the approval and promote tasks act on.
    assert artifacts.promotion is not None
    assert artifacts.promotion["promoted"] is True and artifacts.promotion["needs_approval"] is True


@pytest.mark.parametrize(
    ("rule", "state", "says"),
    [
        (
            PromotionRule(metric="final_test_accuracy"),
            "awaiting_promotion",
            "<strong>Awaiting promotion</strong>: the gate passed it",
        ),
        (
            PromotionRule(metric="final_test_accuracy", guards={"final_test_loss": Bounds(max=1.0)}),
            "held",
            "<strong>Not promoted</strong>: guard failed: final_test_loss 1.2 is not at most 1",
        ),
    ],
)
def test_a_pass_without_approval_awaits_promote_and_a_hold_is_final(tmp_path, rule, state, says):
    artifacts = _gated(tmp_path, rule)

    promotion = _manifest(artifacts)["promotion"]
    report = Path(artifacts.report_uri).read_text()
    assert promotion["promoted"] is False and promotion["outcome"]["state"] == state
    assert says in report and "Promoted to champion" not in report
    assert ("<th>Gate</th>" in report) is (state != "held"), "a hold is the gate's own outcome"


ALICE = {"id": "alice", "name": "alice"}


@pytest.mark.parametrize(
    ("answer", "state", "headline"),
    [
        (ApprovalAnswer(option="Reject", responded_by=ALICE), "not_approved", "Not approved by alice"),
        (ApprovalAnswer(option="Reject", timed_out=True), "approval_timed_out", "Approval timed out"),
        (ApprovalAnswer(option="Approve", responded_by={"id": "mallory"}), "not_approved", "Not approved"),
    ],
)
def test_a_refused_promotion_is_recorded_in_the_manifest_and_the_report_and_nothing_else(
    tmp_path, answer, state, headline
):
    artifacts = _gated(tmp_path)
    decision = Decision.model_validate(artifacts.promotion)
    target = Path(artifacts.uri)
    before = _files(target)
    refusal = answer.refusal(APPROVED.approval.approvers)
    assert refusal is not None

    assert record_outcome(artifacts, decision, Outcome.refused(answer, refusal), RUN_IDS) is True

    after = _files(target)
    manifest = json.loads(after.pop("manifest.json"))
    report = after.pop("report.html").decode()
    assert after == {k: v for k, v in before.items() if k not in ("manifest.json", "report.html")}
    assert manifest["promotion"]["promoted"] is False and manifest["promotion"]["outcome"]["state"] == state
    assert {**manifest, "promotion": None} == {**json.loads(before["manifest.json"]), "promotion": None}
    assert f"<strong>{headline}</strong>: {escape(refusal)}" in report
    assert "Awaiting approval" not in report and "Promoted to champion" not in report
    assert sorted(p.name for p in target.parent.iterdir()) == [
        ".train-cifar10-run-1a2b3c4d5e.lock",
        target.name,
    ]


def test_a_promotion_is_recorded_once(tmp_path):
    artifacts = _gated(tmp_path)
    decision = Decision.model_validate(artifacts.promotion)
    promoted = Outcome(state="promoted", reason=decision.reason, responder="alice")

    assert record_outcome(artifacts, decision, promoted, RUN_IDS) is True
    assert record_outcome(artifacts, decision, promoted, RUN_IDS) is False, "it says so already"

    promotion = _manifest(artifacts)["promotion"]
    assert promotion["promoted"] is True and promotion["outcome"]["state"] == "promoted"
    assert (
        "<strong>Promoted to champion, approved by alice</strong>" in Path(artifacts.report_uri).read_text()
    )


def test_the_outcome_is_never_recorded_in_a_set_another_run_published(tmp_path, caplog):
    artifacts = _gated(tmp_path)
    decision = Decision.model_validate(artifacts.promotion)
    before = _files(Path(artifacts.uri))

    recorded = record_outcome(
        artifacts, decision, Outcome(state="promoted", reason="r"), (RUN.dag_id, "manual__another")
    )

    assert recorded is False
    assert _files(Path(artifacts.uri)) == before
    assert (
        f"is not the one run manual__another of cifar10_retrain published (published by run {RUN.run_id}"
        in (caplog.text)
    )


@pytest.mark.slow
def test_recording_waits_for_a_publisher_of_the_set_and_never_writes_beside_it(tmp_path):
    artifacts = _gated(tmp_path)
    decision = Decision.model_validate(artifacts.promotion)
    target = Path(artifacts.uri)
    before = _files(target)
    done = threading.Event()

    def record() -> None:
        record_outcome(artifacts, decision, Outcome(state="promoted", reason="r"), RUN_IDS)
        done.set()

    with publication_lock(target, "artifact_root", wait=False):
        threading.Thread(target=record, daemon=True).start()
        assert not done.wait(0.5), "it waits while a publisher holds the set"
        assert _files(target) == before
    assert done.wait(10)
    assert _manifest(artifacts)["promotion"]["promoted"] is True


def test_a_link_at_the_report_is_replaced_never_written_through(tmp_path):
    artifacts = _gated(tmp_path)
    decision = Decision.model_validate(artifacts.promotion)
    elsewhere = tmp_path / "precious.html"
    elsewhere.write_text("keep me")
    report = Path(artifacts.report_uri)
    report.unlink()
    report.symlink_to(elsewhere)

    record_outcome(artifacts, decision, Outcome(state="promoted", reason="r"), RUN_IDS)

    assert elsewhere.read_text() == "keep me"
    assert not report.is_symlink() and "Promoted to champion" in report.read_text()
