"""Which versions a dataset's source holds, through oss2 and the OSS emulator, and the run's choice."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aliyun_training.form import parse_form
from aliyun_training.plan.resolve import RunContext, choose_version
from aliyun_training.staging.versions import is_prepared, mark_prepared, source_versions, version_landed
from aliyun_training.validation import SpecError
from fakes.cloud import BUCKET, emulated_oss
from fakes.environment_files import cifar10
from fakes.oss import OssEmulator

TEMPLATE = f"oss://{BUCKET}/datasets/{{dataset}}/{{version}}/"
CONNECTION = "alibaba_cloud_default"


@pytest.fixture
def oss(monkeypatch: pytest.MonkeyPatch) -> Iterator[OssEmulator]:
    with emulated_oss(monkeypatch) as emulator:
        yield emulator


def test_versions_are_the_folders_under_the_template_listed_over_more_than_one_page(oss) -> None:
    for day in range(1, 1206):
        oss.put(BUCKET, f"datasets/cifar10/v{day}/train.bin", b"x")
    oss.put(BUCKET, "datasets/cifar10/README.txt", b"not a version")
    oss.put(BUCKET, "datasets/other/v9999/train.bin", b"another dataset")

    versions = source_versions(TEMPLATE, "cifar10", CONNECTION)

    assert len(versions) == 1205 and versions[-1] == "v1205", "numbers compare as numbers: v1205 is newest"
    assert versions[:3] == ["v1", "v2", "v3"]
    assert oss.count("ListObjectsV2") == 2, "1205 common prefixes take two pages of 1000"


def _choose(version: str | None, scheduled: bool = False):
    form = parse_form({"backend": "dlc", "dataset_version": version})
    run = RunContext(datetime(2026, 11, 22, tzinfo=UTC), scheduled=scheduled)
    return choose_version(form, run, cifar10(), TEMPLATE, CONNECTION)


def test_an_empty_version_is_the_newest_and_a_missing_one_names_those_that_exist(oss) -> None:
    for version in ("2026-11-08", "2026-11-15"):
        oss.put(BUCKET, f"datasets/cifar10/{version}/train.bin", b"x")

    assert _choose(None).version == "2026-11-15"
    assert _choose("2026-11-08").source_uri == f"oss://{BUCKET}/datasets/cifar10/2026-11-08/"
    with pytest.raises(SpecError) as missing:
        _choose("2026-11-01")
    assert "has no version '2026-11-01'" in str(missing.value)
    assert "it holds 2026-11-08, 2026-11-15" in str(missing.value)
    scheduled = _choose(None, scheduled=True)
    assert (scheduled.version, scheduled.wait_minutes) == ("2026-11-22", 360), "a scheduled run waits"
    assert not version_landed(scheduled.source_uri or "", CONNECTION)


def test_a_prepared_version_is_complete_only_once_its_marker_is_written(oss, tmp_path: Path) -> None:
    uri = f"oss://{BUCKET}/outputs/prepared/imagenet-shards/v1.abc/"
    oss.put(BUCKET, "outputs/prepared/imagenet-shards/v1.abc/train-000000.tar", b"shard")
    local = tmp_path / "v1.def"
    local.mkdir()

    before = (is_prepared(uri, CONNECTION), is_prepared(local.as_uri(), CONNECTION))
    mark_prepared(uri, CONNECTION, {"job_id": "dlc-1"})
    mark_prepared(local.as_uri(), CONNECTION, {"job_id": "local-1"})

    assert before == (False, False)
    assert is_prepared(uri, CONNECTION) and is_prepared(local.as_uri(), CONNECTION)
    assert b"dlc-1" in oss.get(BUCKET, "outputs/prepared/imagenet-shards/v1.abc/_prepared.json")


def _waiting_sensor(folder: Path, minutes: int = 30):
    from aliyun_training.plan.models import DatasetPlan
    from aliyun_training.sensors.dataset_version import DatasetVersionSensor

    plan = DatasetPlan(
        name="cifar10", version="2026-11-29", wait_uri=f"file://{folder}/2026-11-29/", wait_minutes=minutes
    )
    return DatasetVersionSensor(task_id="wait_for_version", dataset=plan, poke_interval=0.1)


def test_a_scheduled_runs_version_is_waited_for_in_the_triggerer_until_it_lands(tmp_path: Path) -> None:
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    sensor = _waiting_sensor(tmp_path)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger

    async def first_event() -> dict:
        landing = asyncio.get_running_loop().call_later(
            0.3,
            lambda: (tmp_path / "2026-11-29").mkdir()
            or (tmp_path / "2026-11-29" / "x.bin").write_bytes(b"1"),
        )
        async for event in trigger.run():
            landing.cancel()
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(first_event())
    assert deferred.value.timeout.total_seconds() == 30 * 60
    assert event["status"] == "succeeded"
    sensor.execute_complete({}, event)


def test_a_version_that_never_lands_skips_the_run_naming_it(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowSkipException, TaskDeferralTimeout

    sensor = _waiting_sensor(tmp_path, minutes=5)

    def timed_out(*_: object) -> None:
        raise TaskDeferralTimeout("timeout")

    sensor.execute_complete = timed_out  # type: ignore[method-assign]  # as the deferral's timeout resumes it
    with pytest.raises(
        AirflowSkipException, match=r"version 2026-11-29 of cifar10 did not land .* within 5 minutes"
    ):
        sensor.resume_execution("execute_complete", {}, {})


def test_a_missing_bucket_is_an_error_not_a_version_still_to_land(oss) -> None:
    with pytest.raises(SpecError, match="bucket no-such-bucket does not exist"):
        version_landed("oss://no-such-bucket/datasets/cifar10/v1/", CONNECTION)
    assert not version_landed(f"oss://{BUCKET}/datasets/cifar10/v1/", CONNECTION), "an empty prefix"
