"""Artifact sets published to an ``oss://`` artifact root: one writer per target, no foreign object touched.

The real oss2 client, configured from the ``alibaba_cloud_default`` connection, talks to the OSS
emulator over HTTP (``fakes/oss.py``), which implements ``x-oss-forbid-overwrite`` as OSS does.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from aliyun_training.artifacts import oss_publication
from aliyun_training.artifacts.collect import RunInfo, publish_artifacts
from aliyun_training.artifacts.manifest import ArtifactError
from aliyun_training.artifacts.outcome import record_outcome
from aliyun_training.promotion import Approval, Comparison, Decision, Outcome, PromotionRule, decide
from aliyun_training.stage_records import ApprovalAnswer, ArtifactSet, BuiltImage, JobResult, StagedDataset
from aliyun_training.staging.oss import OssClientConfig
from aliyun_training.validation import SpecError
from fakes.cloud import emulated_oss, publisher_outputs

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from fakes.oss import OssEmulator

AK, SK = "LTAI-artifacts", "artifacts-secret-value"
BUCKET = "training-models"
ROOT = f"oss://{BUCKET}/models/"
PREFIX = "models/cifar10/v1/cifar10-run/"
TARGET = f"oss://{BUCKET}/{PREFIX}"
LOCK = "models/cifar10/v1/.cifar10-run.lock"
LOCK_URI = f"oss://{BUCKET}/{LOCK}"
TRIALS = 20
PUBLISHERS = 3
DATASET = StagedDataset(uri="/mnt/cpfs/v1", version="v1", files=1, bytes=1, manifest_uri="", checksum="c")
RUNTIME = BuiltImage(uri="registry/train:1", digest="sha256:x", python="3.11")


@pytest.fixture
def oss(monkeypatch: pytest.MonkeyPatch) -> Iterator[OssEmulator]:
    with emulated_oss(monkeypatch, AK, SK, BUCKET) as emulator:
        yield emulator


def _publish(output: Path, run: RunInfo | None = None) -> ArtifactSet:
    """The set of the job that wrote ``output``; published by ``run``, it awaits approval."""
    job = JobResult(
        job_id=f"dlc-{output.name}",
        display_name="cifar10-run",
        backend="dlc",
        status="Succeeded",
        output_uri=str(output),
    )
    return publish_artifacts(
        model="cifar10",
        artifact_root=ROOT,
        job=job,
        dataset=DATASET,
        runtime=RUNTIME,
        oss=OssClientConfig.from_connection("alibaba_cloud_default"),
        run=run,
        gate=(
            (
                lambda metrics: decide(
                    APPROVED, Comparison.of_final_metrics(metrics, None), run.run_id, "manual"
                )
            )
            if run
            else None
        ),
    )


def _run(run_id: str) -> RunInfo:
    return RunInfo(
        dag_id="cifar10_retrain", run_id=run_id, logical_date=None, run_type="manual", params={}, url="/"
    )


#: A rule the first model passes, to wait for approval.
APPROVED = PromotionRule(metric="final_test_accuracy", approval=Approval())


def _set(oss: OssEmulator) -> dict[str, bytes]:
    """Every object under the target but the manifest and the report, keys relative to it."""
    return {
        key.removeprefix(PREFIX): oss.get(BUCKET, key)
        for key in oss.keys(BUCKET, PREFIX)
        if key.removeprefix(PREFIX) not in ("manifest.json", "report.html")
    }


def _assert_one_complete_set(oss: OssEmulator, files: dict[str, bytes]) -> None:
    """The target holds exactly ``files``, the manifest lists them with their sha256, and no lock."""
    assert _set(oss) == files
    manifest = json.loads(oss.get(BUCKET, PREFIX + "manifest.json"))
    assert {entry["path"]: entry["sha256"] for entry in manifest["files"]} == {
        key: hashlib.sha256(data).hexdigest() for key, data in files.items()
    }
    assert set(oss.keys(BUCKET, PREFIX)) == {PREFIX + key for key in [*files, "manifest.json", "report.html"]}
    assert oss.keys(BUCKET, LOCK) == [], "the lock is released"


def _lock_body(holder: str, expires: datetime, keys: list[str] | None = None) -> bytes:
    return json.dumps(
        {
            "holder": holder,
            "token": "0" * 32,
            "target": TARGET,
            "since": "2026-11-08T10:00:00+00:00",
            "expires": expires.isoformat(timespec="seconds"),
            "keys": keys or [],
        }
    ).encode()


def _writes(oss: OssEmulator) -> list[str]:
    return [r.key for r in oss.records() if r.operation in ("PutObject", "CompleteMultipartUpload")]


def test_a_foreign_object_at_the_target_is_refused_untouched_and_nothing_is_uploaded(oss, tmp_path):
    oss.put(BUCKET, PREFIX + "model.pt", b"someone else's model")
    publisher_outputs(tmp_path / "out", "ours")

    with pytest.raises(SpecError) as caught:
        _publish(tmp_path / "out")

    assert str(caught.value) == (
        f"artifact_root: {TARGET} already holds 1 object (model.pt) but no manifest.json of an artifact "
        "set, so they were not published here; publishing never overwrites or deletes objects it did not "
        "publish and nothing was uploaded (fix: change artifact_root (or the model) so that the set goes "
        "to a new prefix, or move those objects away if they may be replaced)"
    )
    assert oss.get(BUCKET, PREFIX + "model.pt") == b"someone else's model"
    assert oss.keys(BUCKET, "models/") == [PREFIX + "model.pt"], "nothing uploaded, the lock released"
    assert _writes(oss) == [LOCK]


def test_a_foreign_object_inside_an_earlier_set_is_refused_and_the_set_kept(oss, tmp_path):
    publisher_outputs(tmp_path / "first", "first")
    publisher_outputs(tmp_path / "second", "second")
    _publish(tmp_path / "first")
    oss.put(BUCKET, PREFIX + "notes/readme.txt", b"written by hand")
    before = {key: oss.get(BUCKET, key) for key in oss.keys(BUCKET, "models/")}
    oss.clear_records()

    with pytest.raises(SpecError) as caught:
        _publish(tmp_path / "second")

    assert str(caught.value) == (
        f"artifact_root: {TARGET} holds 1 object (notes/readme.txt) that its manifest.json does not list, "
        "so they were not published here; publishing never overwrites or deletes objects it did not "
        f"publish and nothing was uploaded (fix: move them out of {TARGET}, or change artifact_root so "
        "that the set goes to a new prefix)"
    )
    assert {key: oss.get(BUCKET, key) for key in oss.keys(BUCKET, "models/")} == before
    assert _writes(oss) == [LOCK]


def test_our_earlier_set_is_replaced_and_its_stale_objects_removed(oss, tmp_path):
    publisher_outputs(tmp_path / "first", "first", (1, 2))
    second = publisher_outputs(tmp_path / "second", "second", (3,))
    _publish(tmp_path / "first")
    oss.clear_records()

    artifacts = _publish(tmp_path / "second")

    assert artifacts.uri == TARGET and artifacts.manifest_uri == TARGET + "manifest.json"
    _assert_one_complete_set(oss, second)
    operations = [(r.operation, r.key) for r in oss.records() if r.operation != "GetObject"]
    manifest_put = operations.index(("PutObject", PREFIX + "manifest.json"))
    deleted = [i for i, (operation, _) in enumerate(operations) if operation == "DeleteMultipleObjects"]
    assert len(deleted) == 1 and deleted[0] > manifest_put, "stale objects go once the new manifest is up"


def test_a_held_lock_refuses_a_second_publisher_naming_the_holder(oss, tmp_path):
    expires = datetime.now(UTC) + timedelta(minutes=4)
    holder = "pid 4242 on airflow-worker-2 (Airflow task retrain/manual__1/publish_artifacts, try 1)"
    lock = _lock_body(holder, expires)
    oss.put(BUCKET, LOCK, lock)
    publisher_outputs(tmp_path / "out", "ours")

    with pytest.raises(ArtifactError) as caught:
        _publish(tmp_path / "out")

    until = expires.isoformat(timespec="seconds")
    assert str(caught.value) == (
        f"artifact_root: another publisher is writing {TARGET}: its lock {LOCK_URI} is held by {holder} "
        f"until {until} (renewed while it runs); nothing was uploaded (fix: two runs publish the same "
        "set — same model, dataset version and job name; let the other one finish and run this one "
        f"again if its set should replace that one; if that publisher is no longer running, its lock "
        f"expires at {until} and the next run breaks it)"
    )
    assert oss.get(BUCKET, LOCK) == lock
    assert oss.keys(BUCKET, PREFIX) == [] and _writes(oss) == [LOCK], "only the refused create"


def test_an_expired_lock_is_broken_and_the_set_published(oss, tmp_path, caplog):
    oss.put(BUCKET, LOCK, _lock_body("pid 7 on a-dead-worker", datetime.now(UTC) - timedelta(seconds=1)))
    files = publisher_outputs(tmp_path / "out", "ours")

    _publish(tmp_path / "out")

    _assert_one_complete_set(oss, files)
    assert f"Breaking the lock {LOCK_URI} of pid 7 on a-dead-worker: it expired at" in caplog.text


def test_what_a_killed_publication_left_is_adopted_through_its_expired_lock(oss, tmp_path):
    """Objects without a manifest are foreign, unless the expired lock of the publication that died
    while writing them names them: then they are ours, and replaced or removed."""
    left = {"model.pt": b"half a set", "checkpoints/epoch-0009.pt": b"from the killed run"}
    for key, data in left.items():
        oss.put(BUCKET, PREFIX + key, data)
    expired = datetime.now(UTC) - timedelta(minutes=1)
    oss.put(BUCKET, LOCK, _lock_body("pid 7 on a-dead-worker", expired, sorted(left)))
    files = publisher_outputs(tmp_path / "out", "ours")

    _publish(tmp_path / "out")

    _assert_one_complete_set(oss, files)


def test_an_object_at_the_lock_key_that_is_no_lock_is_refused_and_kept(oss, tmp_path):
    oss.put(BUCKET, LOCK, b"not a lock")
    publisher_outputs(tmp_path / "out", "ours")

    with pytest.raises(SpecError) as caught:
        _publish(tmp_path / "out")

    assert str(caught.value) == (
        f"artifact_root: {LOCK_URI}, where the lock of {TARGET} goes, holds an object that is not such a "
        "lock, so it was not written here and is never replaced (fix: move it away)"
    )
    assert oss.get(BUCKET, LOCK) == b"not a lock" and oss.keys(BUCKET, PREFIX) == []


@pytest.mark.slow
def test_the_holder_renews_its_lock_while_it_uploads(oss, tmp_path, monkeypatch):
    monkeypatch.setattr(oss_publication, "RENEW_SECONDS", 0.05)
    oss.fail_next("PutObject", "slow", key=PREFIX + "model.pt", seconds=1.0)
    files = publisher_outputs(tmp_path / "out", "ours")

    _publish(tmp_path / "out")

    _assert_one_complete_set(oss, files)
    assert _writes(oss).count(LOCK) >= 3, "created, then renewed while model.pt was uploading"


@pytest.mark.slow
def test_a_publisher_whose_lock_was_taken_over_never_writes_its_manifest(oss, tmp_path):
    oss.fail_next("PutObject", "slow", key=PREFIX + "model.pt", seconds=2.0)
    publisher_outputs(tmp_path / "out", "ours")
    other = _lock_body("pid 9 on airflow-worker-3", datetime.now(UTC) + timedelta(minutes=5))

    def take_over() -> None:  # another publisher that broke our lock, as if we had stalled past it
        deadline = time.monotonic() + 10
        while not oss.keys(BUCKET, LOCK) and time.monotonic() < deadline:
            time.sleep(0.001)
        oss.replace(BUCKET, LOCK, other)

    thief = threading.Thread(target=take_over)
    thief.start()
    with pytest.raises(ArtifactError) as caught:
        _publish(tmp_path / "out")
    thief.join()

    assert str(caught.value) == (
        f"artifact_root: this run lost the lock {LOCK_URI} of {TARGET} while uploading (now held by pid 9 "
        f"on airflow-worker-3): it could not renew it for {oss_publication.LOCK_TTL_SECONDS:.0f} s and "
        "another publisher broke it; manifest.json was not written, so what this run uploaded is not a "
        "published set (fix: run again once the other publication finished)"
    )
    assert PREFIX + "manifest.json" not in oss.keys(BUCKET, PREFIX)
    assert oss.get(BUCKET, LOCK) == other, "the other holder's lock is not released by us"


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(TRIALS))
def test_concurrent_publishers_leave_one_complete_set(oss, tmp_path, trial):
    outputs = {
        i: publisher_outputs(tmp_path / f"out-{i}", f"trial-{trial}/publisher-{i}") for i in range(PUBLISHERS)
    }
    barrier = threading.Barrier(PUBLISHERS)
    outcomes: list[object] = [None] * PUBLISHERS

    def publish(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = _publish(tmp_path / f"out-{index}")
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(PUBLISHERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    published = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, ArtifactSet)]
    assert published, f"nobody published: {outcomes}"
    for outcome in outcomes:
        if not isinstance(outcome, ArtifactSet):
            assert isinstance(outcome, ArtifactError), f"not the clear error: {outcome!r}"
            assert str(outcome).startswith(f"artifact_root: another publisher is writing {TARGET}: its lock")
    winners = [i for i in published if outputs[i] == _set(oss)]
    assert len(winners) == 1, "every object of the set comes from one publisher, one that published"
    _assert_one_complete_set(oss, outputs[winners[0]])


# -- the promotion's outcome, recorded in the published set once promote decided ------------------

REJECTED = ApprovalAnswer(option="Reject", responded_by={"id": "alice", "name": "alice"})


def _refused(artifacts: ArtifactSet) -> tuple[Decision, Outcome]:
    decision = Decision.model_validate(artifacts.promotion)
    return decision, Outcome.refused(REJECTED, REJECTED.refusal([]) or "")


def _promotion(oss: OssEmulator) -> dict:
    return json.loads(oss.get(BUCKET, PREFIX + "manifest.json"))["promotion"]


def _record_refusal(artifacts: ArtifactSet) -> bool:
    """Record, as run manual__1's promote would, that its candidate was not approved."""
    return record_outcome(
        artifacts,
        *_refused(artifacts),
        ("cifar10_retrain", "manual__1"),
        OssClientConfig.from_connection("alibaba_cloud_default"),
    )


def test_the_outcome_replaces_the_manifest_and_the_report_objects_and_nothing_else(oss, tmp_path):
    files = publisher_outputs(tmp_path / "out", "ours")
    artifacts = _publish(tmp_path / "out", _run("manual__1"))
    assert _promotion(oss)["outcome"]["state"] == "awaiting_approval"
    assert b"Awaiting approval</strong>" in oss.get(BUCKET, PREFIX + "report.html")
    oss.clear_records()

    recorded = _record_refusal(artifacts)

    assert recorded is True
    promotion = _promotion(oss)
    assert promotion["promoted"] is False and promotion["outcome"]["state"] == "not_approved"
    assert b"<strong>Not approved by alice</strong>" in oss.get(BUCKET, PREFIX + "report.html")
    assert _writes(oss) == [LOCK, PREFIX + "report.html", PREFIX + "manifest.json"], "the manifest last"
    _assert_one_complete_set(oss, files)


def test_the_outcome_is_not_recorded_in_a_set_another_run_published_since(oss, tmp_path, caplog):
    publisher_outputs(tmp_path / "first", "first")
    publisher_outputs(tmp_path / "second", "second")
    ours = _publish(tmp_path / "first", _run("manual__1"))
    _publish(tmp_path / "second", _run("manual__2"))
    before = {key: oss.get(BUCKET, key) for key in oss.keys(BUCKET, PREFIX)}
    oss.clear_records()

    recorded = _record_refusal(ours)

    assert recorded is False
    assert {key: oss.get(BUCKET, key) for key in oss.keys(BUCKET, PREFIX)} == before
    assert _writes(oss) == [LOCK], "only the lock"
    assert "published by run manual__2 of cifar10_retrain" in caplog.text


@pytest.mark.slow
def test_a_publisher_holding_the_lock_keeps_the_outcome_from_being_written_meanwhile(oss, tmp_path):
    publisher_outputs(tmp_path / "out", "ours")
    artifacts = _publish(tmp_path / "out", _run("manual__1"))
    holder = "pid 4242 on airflow-worker-2"
    oss.put(BUCKET, LOCK, _lock_body(holder, datetime.now(UTC) + timedelta(minutes=4)))
    before = {key: oss.get(BUCKET, key) for key in oss.keys(BUCKET, PREFIX)}

    with pytest.raises(ArtifactError, match=f"its lock {LOCK_URI} is held by {holder}"):
        record_outcome(
            artifacts,
            *_refused(artifacts),
            ("cifar10_retrain", "manual__1"),
            OssClientConfig.from_connection("alibaba_cloud_default"),
        )

    assert {key: oss.get(BUCKET, key) for key in oss.keys(BUCKET, PREFIX)} == before
