"""When a scheduled run's dataset version has landed: a completion marker, or a listing that holds
still, each look one request to the OSS emulator through oss2, or one look at a local folder."""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from aliyun_training.plan.models import DatasetPlan
from aliyun_training.sensors.dataset_version import DatasetVersionSensor
from aliyun_training.staging import versions
from aliyun_training.staging.versions import LISTING_PAGE, check_landing
from aliyun_training.triggers.dataset_version import DatasetVersionTrigger
from aliyun_training.validation import SpecError
from fakes.cloud import BUCKET, emulated_oss

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

    from fakes.oss import OssEmulator

CONNECTION = "alibaba_cloud_default"
PREFIX = "datasets/cifar10/2026-11-22/"
URI = f"oss://{BUCKET}/{PREFIX}"
INCLUDE = Path(__file__).resolve().parents[2] / "include"


@pytest.fixture
def oss(monkeypatch: pytest.MonkeyPatch) -> Iterator[OssEmulator]:
    with emulated_oss(monkeypatch) as emulator:
        yield emulator


def look(oss: OssEmulator, marker: str | None, previous: str | None = None) -> versions.LandingCheck:
    """One check of ``URI``, which must make exactly one request (of the expected kind)."""
    oss.clear_records()
    check = check_landing(URI, marker, CONNECTION, previous)
    expected = "GetObjectMeta" if marker else "ListObjectsV2"
    assert [r.operation for r in oss.records()] == [expected], "one look is one request"
    return check


# -- with a completion marker ---------------------------------------------------------------------


def test_an_upload_in_progress_never_lands_and_the_marker_lands_it_with_one_head(oss) -> None:
    oss.put(BUCKET, PREFIX + "train-00000.npz.uploading", b"half a shard")

    waiting = look(oss, "_SUCCESS")
    oss.put(BUCKET, PREFIX + "train-00000.npz", b"a whole shard")
    oss.put(BUCKET, PREFIX + "_SUCCESS", b"")
    landed = look(oss, "_SUCCESS")

    assert (waiting.landed, waiting.message) == (False, f"waiting for {URI}_SUCCESS")
    assert (landed.landed, landed.message) == (True, f"landed: marker found: {URI}_SUCCESS")
    assert oss.records()[0].key == PREFIX + "_SUCCESS", "the HEAD names the marker, not the folder"


def test_a_version_larger_than_a_listing_page_lands_by_its_marker_with_one_request(oss) -> None:
    oss.generate(BUCKET, PREFIX + "part-", count=LISTING_PAGE + 205, size=8)
    oss.put(BUCKET, PREFIX + "_SUCCESS", b"")

    assert look(oss, "_SUCCESS").landed


@pytest.mark.slow
def test_a_marker_in_a_sub_folder_or_a_longer_name_is_not_the_marker(oss) -> None:
    oss.put(BUCKET, PREFIX + "train/_SUCCESS", b"")
    oss.put(BUCKET, PREFIX + "_SUCCESS.uploading", b"")

    assert not look(oss, "_SUCCESS").landed


def test_a_failed_look_is_not_yet_and_the_next_look_lands(oss) -> None:
    oss.put(BUCKET, PREFIX + "_SUCCESS", b"")
    oss.fail_next("GetObjectMeta", "unavailable")

    failed = look(oss, "_SUCCESS")

    assert failed == versions.LandingCheck(
        False, f"could not look at {URI} (HTTP 503 ServiceUnavailable); looking again", None
    )
    assert look(oss, "_SUCCESS").landed


@pytest.mark.slow
@pytest.mark.parametrize("marker", ["_SUCCESS", None])
def test_a_missing_bucket_is_a_setting_to_fix_not_a_version_still_to_land(oss, marker: str | None) -> None:
    with pytest.raises(SpecError) as missing:
        check_landing("oss://no-such-bucket/datasets/cifar10/v1/", marker, CONNECTION)

    assert str(missing.value) == (
        "source_uri: bucket no-such-bucket does not exist "
        "(fix: correct the bucket name or the region of the OSS endpoint)"
    )


# -- without a marker: a listing that holds still -------------------------------------------------


def test_without_a_marker_a_changing_listing_waits_and_a_stable_one_lands_on_the_next_look(oss) -> None:
    oss.put(BUCKET, PREFIX + "train-00000.npz", b"shard 0")
    oss.put(BUCKET, PREFIX + "test.npz", b"test split")

    first = look(oss, None)
    oss.put(BUCKET, PREFIX + "train-00001.npz", b"shard 1")
    grown = look(oss, None, first.digest)
    oss.put(BUCKET, PREFIX + "train-00001.npz", b"shard 2")  # rewritten: same key and size, new ETag
    rewritten = look(oss, None, grown.digest)
    stable = look(oss, None, rewritten.digest)

    assert (first.landed, first.message) == (
        False,
        f"listed 2 objects in {URI}; landed if the next look lists the same",
    )
    assert (grown.landed, grown.message) == (False, f"listing changed: 3 objects in {URI}")
    assert (rewritten.landed, rewritten.message) == (False, f"listing changed: 3 objects in {URI}")
    assert (stable.landed, stable.message) == (True, f"landed: listing unchanged: 3 objects in {URI}")
    assert oss.records()[0].query["max-keys"] == str(LISTING_PAGE), "one page, as large as OSS serves"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["train.npz.uploading", "train.npz.tmp", "train.npz.partial", "train.npz._COPYING_", ".a.tmp-812"]
)
def test_a_stable_listing_holding_an_upload_in_progress_never_lands(oss, name: str) -> None:
    oss.put(BUCKET, PREFIX + "test.npz", b"test split")
    oss.put(BUCKET, PREFIX + f"train/{name}", b"part of a shard")

    first = look(oss, None)
    again = look(oss, None, first.digest)

    assert first.digest == again.digest, "nothing changed between the looks"
    assert (again.landed, again.message) == (
        False,
        f"upload in progress: {URI}train/{name} (2 objects listed)",
    )


def test_an_empty_folder_never_lands_and_a_folder_object_is_not_data(oss) -> None:
    oss.put(BUCKET, PREFIX, b"")  # what the console's "create folder" writes

    first = look(oss, None)
    again = look(oss, None, first.digest)

    assert (again.landed, again.message) == (False, f"waiting for objects in {URI} (it lists none)")


def test_a_listing_larger_than_a_page_compares_its_first_page_and_says_a_marker_is_needed(oss) -> None:
    oss.generate(BUCKET, PREFIX + "part-", count=LISTING_PAGE + 1, size=8)

    first = look(oss, None)
    stable = look(oss, None, first.digest)

    listed = f"{LISTING_PAGE} objects (the first page of more than {LISTING_PAGE})"
    assert stable.landed
    assert stable.message == (
        f"landed: listing unchanged: {listed} in {URI}; objects after the first {LISTING_PAGE} were not "
        "compared (fix: have the upload write a marker last and set dataset.version.marker to it)"
    )


def test_a_failed_listing_keeps_the_previous_page_for_the_next_look(oss) -> None:
    oss.put(BUCKET, PREFIX + "test.npz", b"test split")
    first = look(oss, None)
    oss.fail_next("ListObjectsV2", "unavailable", times=4)  # oss2's call does not retry: one is enough

    failed = look(oss, None, first.digest)
    oss.clear_faults()
    stable = look(oss, None, failed.digest)

    assert (failed.landed, failed.digest) == (False, first.digest)
    assert stable.landed


# -- local folders ---------------------------------------------------------------------------------


def test_a_local_version_lands_by_its_marker_or_by_a_listing_that_holds_still(tmp_path: Path) -> None:
    folder = tmp_path / "2026-11-22"
    uri = f"file://{folder}/"

    missing = check_landing(uri, "_SUCCESS", CONNECTION)
    unlisted = check_landing(uri, None, CONNECTION)
    folder.mkdir()
    (folder / "train").mkdir()
    (folder / "train" / "shard-0.npz").write_bytes(b"shard 0")
    (folder / ".meta.json.tmp-4242").write_bytes(b"{")  # atomic_io's temporary name
    writing = check_landing(uri, None, CONNECTION)
    (folder / ".meta.json.tmp-4242").rename(folder / "meta.json")
    written = check_landing(uri, None, CONNECTION, writing.digest)
    stable = check_landing(uri, None, CONNECTION, written.digest)
    (folder / "_SUCCESS").touch()

    assert (missing.landed, missing.message) == (False, f"waiting for {uri}_SUCCESS")
    assert (unlisted.landed, unlisted.message) == (False, f"waiting for objects in {uri} (it lists none)")
    assert writing.message == f"upload in progress: {uri}.meta.json.tmp-4242 (2 objects listed)"
    assert (written.landed, written.message) == (False, f"listing changed: 2 objects in {uri}")
    assert (stable.landed, stable.message) == (True, f"landed: listing unchanged: 2 objects in {uri}")
    assert check_landing(uri, "_SUCCESS", CONNECTION).message == f"landed: marker found: {uri}_SUCCESS"


def test_a_local_listing_reads_one_page_and_sees_a_rewrite_within_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(versions, "LISTING_PAGE", 2)
    for name in ("a.bin", "b.bin", "c.bin"):
        (tmp_path / name).write_bytes(b"1")
    uri = f"file://{tmp_path}/"

    first = check_landing(uri, None, CONNECTION)
    (tmp_path / "b.bin").write_bytes(b"22")
    rewritten = check_landing(uri, None, CONNECTION, first.digest)

    assert first.message == f"listed 2 objects (the first page of more than 2) in {uri}; " + (
        "landed if the next look lists the same"
    )
    assert rewritten.message == f"listing changed: 2 objects (the first page of more than 2) in {uri}"


# -- the example generators --------------------------------------------------------------------------


def _script(folder: str, name: str) -> ModuleType:
    """An example script, imported as it runs: by path, next to the modules it imports."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(INCLUDE / folder))
        return importlib.import_module(name)


def test_the_example_generators_write_the_marker_so_their_versions_land(tmp_path: Path) -> None:
    cifar10 = _script("training", "make_synthetic_cifar10")
    imagenet = _script("imagenet_resnet", "make_synthetic_raw")

    cifar10.generate(tmp_path / "cifar10", train=20, test=10, shards=2, seed=0)
    imagenet.generate(tmp_path / "imagenet", classes=2, train=2, val=1, seed=0, size=8)

    for name in ("cifar10", "imagenet"):
        assert (tmp_path / name / "_SUCCESS").read_bytes() == b""
        assert check_landing(f"file://{tmp_path / name}/", "_SUCCESS", CONNECTION).landed


def test_regenerating_a_version_takes_its_old_marker_away_until_the_new_one_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cifar10 = _script("training", "make_synthetic_cifar10")
    out = tmp_path / "cifar10"
    cifar10.generate(out, train=20, test=10, shards=2, seed=0)

    def disk_full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cifar10, "write_meta", disk_full)
    with pytest.raises(OSError, match="No space left"):
        cifar10.generate(out, train=20, test=10, shards=2, seed=1)

    assert not (out / "_SUCCESS").exists()
    assert not check_landing(f"file://{out}/", "_SUCCESS", CONNECTION).landed


# -- the trigger and the sensor ---------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["_SUCCESS", None])
def test_the_trigger_is_rebuilt_from_its_serialized_arguments_with_its_marker(marker: str | None) -> None:
    trigger = DatasetVersionTrigger(URI, CONNECTION, marker=marker, poll_interval=60.0)

    classpath, kwargs = trigger.serialize()
    rebuilt = DatasetVersionTrigger(**json.loads(json.dumps(kwargs)))

    assert classpath == "aliyun_training.triggers.dataset_version.DatasetVersionTrigger"
    assert kwargs == {
        "source_uri": URI,
        "alibaba_cloud_conn_id": CONNECTION,
        "marker": marker,
        "poll_interval": 60.0,
    }
    assert rebuilt.serialize() == (classpath, kwargs)


def _first_event(trigger: DatasetVersionTrigger) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout=20))


def test_without_a_marker_the_trigger_lands_on_its_second_poll_one_listing_each(
    oss, capfd: pytest.CaptureFixture[str]
) -> None:
    oss.put(BUCKET, PREFIX + "train-00000.npz", b"shard 0")

    event = _first_event(DatasetVersionTrigger(URI, CONNECTION, marker=None, poll_interval=0.05))

    assert event == {
        "status": "succeeded",
        "handle": URI,
        "message": f"landed: listing unchanged: 1 object in {URI}",
    }
    assert oss.counts() == {"ListObjectsV2": 2}
    log = capfd.readouterr().out  # the triggerer's log lines
    assert f"listed 1 object in {URI}; landed if the next look lists the same; looking again in 0.05s" in log


def _sensor(uri: str, marker: str | None, minutes: int = 30) -> DatasetVersionSensor:
    plan = DatasetPlan(
        name="cifar10", version="2026-11-22", wait_uri=uri, wait_minutes=minutes, wait_marker=marker
    )
    return DatasetVersionSensor(task_id="wait_for_version", dataset=plan, poke_interval=0.1)


def test_the_sensor_passes_at_once_on_the_marker_with_one_request(oss) -> None:
    oss.put(BUCKET, PREFIX + "_SUCCESS", b"")

    _sensor(URI, "_SUCCESS").execute({})

    assert oss.counts() == {"GetObjectMeta": 1}


def test_without_a_marker_the_sensor_defers_at_once_for_the_two_looks(oss) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    oss.put(BUCKET, PREFIX + "train-00000.npz", b"shard 0")

    with pytest.raises(TaskDeferred) as deferred:
        _sensor(URI, None).execute({})

    assert oss.counts() == {}, "a stable listing needs two looks a poll apart: the trigger takes them"
    assert deferred.value.trigger.serialize()[1]["marker"] is None


@pytest.mark.slow
def test_a_version_waited_for_in_the_triggerer_lands_once_its_marker_is_written(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    folder = tmp_path / "2026-11-22"
    uri = f"file://{folder}/"
    sensor = _sensor(uri, "_SUCCESS")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger

    async def land() -> dict:
        loop = asyncio.get_running_loop()
        folder.mkdir()
        (folder / "train.npz.uploading").write_bytes(b"half")
        loop.call_later(0.3, lambda: (folder / "_SUCCESS").touch())
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(asyncio.wait_for(land(), timeout=20))

    assert deferred.value.timeout.total_seconds() == 30 * 60
    assert event["status"] == "succeeded" and event["message"] == f"landed: marker found: {uri}_SUCCESS"
    assert f"waiting for {uri}_SUCCESS; looking again in 0.1s" in capfd.readouterr().out
    sensor.execute_complete({}, event)


@pytest.mark.parametrize(
    ("marker", "why"),
    [
        (
            "_SUCCESS",
            "its completion marker {uri}_SUCCESS never appeared; this run is skipped (fix: have the "
            "upload write _SUCCESS last, or set dataset.version.marker: null to wait for an unchanged "
            "listing instead; then clear this task, or trigger a run naming an existing version)",
        ),
        (
            None,
            "no two looks 0.1s apart listed the same objects without an upload in progress "
            "(dataset.version.marker is null); this run is skipped (fix: have the upload write an empty "
            "_SUCCESS last and set dataset.version.marker: _SUCCESS; then clear this task, or trigger a "
            "run naming an existing version)",
        ),
    ],
)
def test_a_version_that_never_lands_skips_the_run_naming_what_it_waited_for_and_the_fix(
    tmp_path: Path, marker: str | None, why: str
) -> None:
    from airflow.sdk.exceptions import AirflowSkipException, TaskDeferralTimeout

    uri = f"file://{tmp_path}/2026-11-22/"
    sensor = _sensor(uri, marker, minutes=5)

    def timed_out(*_: object) -> None:
        raise TaskDeferralTimeout("timeout")

    sensor.execute_complete = timed_out  # type: ignore[method-assign]  # as the deferral's timeout resumes it
    with pytest.raises(AirflowSkipException) as skipped:
        sensor.resume_execution("execute_complete", {}, {})

    assert str(skipped.value) == (
        f"version 2026-11-22 of cifar10 did not land in {uri} within 5 minutes: " + why.format(uri=uri)
    )
