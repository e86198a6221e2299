"""Which versions a dataset's source holds, through oss2 and the OSS emulator, and the run's choice."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from aliyun_training.form import parse_form
from aliyun_training.plan.inputs import RunContext
from aliyun_training.plan.resolve import choose_version
from aliyun_training.staging.versions import check_landing, is_prepared, mark_prepared, source_versions
from aliyun_training.validation import SpecError
from fakes.cloud import BUCKET, emulated_oss
from fakes.environment_files import cifar10

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

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
    declaration = cifar10()
    form = parse_form({"backend": "dlc", "dataset_version": version}, declaration)
    run = RunContext(datetime(2026, 11, 22, tzinfo=UTC), installation="tests", scheduled=scheduled)
    return choose_version(form, run, declaration, TEMPLATE, CONNECTION)


def test_an_empty_version_is_the_newest_and_a_missing_one_names_those_that_exist(oss) -> None:
    for version in ("2026-11-08", "2026-11-15"):
        oss.put(BUCKET, f"datasets/cifar10/{version}/train.bin", b"x")
        oss.put(BUCKET, f"datasets/cifar10/{version}/_SUCCESS", b"")

    assert _choose(None).version == "2026-11-15"
    assert _choose("2026-11-08").source_uri == f"oss://{BUCKET}/datasets/cifar10/2026-11-08/"
    with pytest.raises(SpecError) as missing:
        _choose("2026-11-01")
    assert "has no version '2026-11-01'" in str(missing.value)
    assert "it holds 2026-11-08, 2026-11-15" in str(missing.value)
    scheduled = _choose(None, scheduled=True)
    assert (scheduled.version, scheduled.wait_minutes) == ("2026-11-22", 360), "a scheduled run waits"
    landing = check_landing(scheduled.source_uri or "", "_SUCCESS", CONNECTION)
    assert (landing.landed, landing.message) == (
        False,
        f"waiting for oss://{BUCKET}/datasets/cifar10/2026-11-22/_SUCCESS",
    )


@pytest.mark.slow
def test_a_prepared_version_is_complete_only_once_its_marker_is_written(oss, tmp_path: Path) -> None:
    uri = f"oss://{BUCKET}/outputs/prepared/imagenet-shards/v1.abc/"
    oss.put(BUCKET, "outputs/prepared/imagenet-shards/v1.abc/train-000000.tar", b"shard")
    local = tmp_path / "v1.def"
    local.mkdir()

    before = (is_prepared(uri, CONNECTION), is_prepared(local.as_uri(), CONNECTION))
    mark_prepared(uri, CONNECTION, {"job_id": "dlc-1"})
    mark_prepared(local.as_uri(), CONNECTION, {"job_id": "local-1"})

    oss.clear_records()
    after = (is_prepared(uri, CONNECTION), is_prepared(local.as_uri(), CONNECTION))
    assert before == (False, False)
    assert after == (True, True)
    assert oss.counts() == {"GetObjectMeta": 1}, "one HEAD of the marker, however many shards"
    assert b"dlc-1" in oss.get(BUCKET, "outputs/prepared/imagenet-shards/v1.abc/_prepared.json")
