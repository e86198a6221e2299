"""plan.staging: the staging settings both cloud planners check alike, each refusal naming its setting."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.environments import StagingSettings
from aliyun_training.plan.staging import staged_source, versions_directory
from aliyun_training.validation import SpecError
from tests.plan_requests import VERSION, cifar10_request

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.plan.inputs import PlanRequest

TEMPLATE = "oss://ml-data/datasets/{dataset}/{version}/"
TARGET_ROOT = "/mnt/cpfs/datasets/cifar10"


def request(tmp_path: Path, template: str | None) -> PlanRequest:
    """A DLC run of cifar10 VERSION whose versions lie at ``template`` (None: named nowhere)."""
    return cifar10_request(tmp_path, tmp_path / "dlc.json", Backend.DLC, template=template)


def test_the_chosen_version_is_copied_from_its_source_into_the_staging_root(tmp_path: Path) -> None:
    block = StagingSettings(mode="direct", target_root=TARGET_ROOT)

    assert staged_source(block, request(tmp_path, TEMPLATE)) == (
        f"oss://ml-data/datasets/cifar10/{VERSION}/",
        TARGET_ROOT,
    )


def test_a_version_whose_source_is_named_nowhere_is_refused_naming_both_places(tmp_path: Path) -> None:
    block = StagingSettings(mode="direct", target_root=TARGET_ROOT)

    with pytest.raises(SpecError) as refused:
        staged_source(block, request(tmp_path, None))

    assert str(refused.value) == (
        "staging.source_uri: give the OSS location of each version, in the environment's staging block "
        "or the declaration's dataset.source_uri (fix: e.g. oss://my-bucket/datasets/{dataset}/{version}/)"
    )


def test_a_block_without_a_staging_root_is_refused_naming_target_root(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^staging\.target_root: .*\(fix: an absolute path"):
        staged_source(StagingSettings(mode="direct"), request(tmp_path, TEMPLATE))


def test_the_versions_directory_inside_the_file_system_must_be_absolute() -> None:
    assert versions_directory("/datasets/cifar10") == "/datasets/cifar10"
    for missing_or_relative in (None, "", "datasets/cifar10"):
        with pytest.raises(SpecError, match=r"^staging\.cpfs_path: .*\(fix: an absolute path"):
            versions_directory(missing_or_relative)
