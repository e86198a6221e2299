"""pipelines.environments: which of a pipeline's backends its environment files leave unconfigured, and
which files refuse the pipeline, as the DAG factory asks while parsing."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.declaration import DeclarationError
from aliyun_training.pipelines.environments import check_environment_use, unconfigured_backends
from fakes.environment_files import cifar10, write_environment

if TYPE_CHECKING:
    from pathlib import Path

DLC = {"quota_id": "quota1ab2", "gpu_type": "GU8TF", "image": "registry.example.com/train:1"}
ARENA = {"data_pvc": "cpfs-train", "image": "registry.example.com/train:1"}


def test_a_missing_blank_or_invalid_cloud_file_is_named_with_why_and_the_local_backend_never(
    tmp_path: Path,
) -> None:
    write_environment(tmp_path, "dlc", {"quota_id": ""})
    (tmp_path / "arena.json").write_text('{"namespace": "Not A Namespace!"}')

    problems = unconfigured_backends(cifar10(), tmp_path)

    assert set(problems) == {Backend.DLC, Backend.ACK}, "local.json is optional: its defaults apply"
    assert problems[Backend.DLC] == (
        "dlc.json leaves image (or an image_build block), "
        "quota_id (Lingjun resources are used through a quota) blank"
    )
    assert problems[Backend.ACK].startswith("arena.json is invalid (- namespace: 'Not A Namespace!' is not")
    assert "\n" not in problems[Backend.ACK], "one line of the error, for the form's description"
    assert unconfigured_backends(cifar10(), tmp_path / "absent") == {
        Backend.DLC: f"{tmp_path / 'absent' / 'dlc.json'} does not exist",
        Backend.ACK: f"{tmp_path / 'absent' / 'arena.json'} does not exist",
    }


def test_each_file_is_read_once_per_change(tmp_path: Path) -> None:
    write_environment(tmp_path, "arena", ARENA)
    path = write_environment(tmp_path, "dlc", {})
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert Backend.DLC in unconfigured_backends(cifar10(), tmp_path)

    write_environment(tmp_path, "dlc", DLC)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert Backend.DLC in unconfigured_backends(cifar10(), tmp_path), "unchanged time: the file read before"

    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    assert unconfigured_backends(cifar10(), tmp_path) == {}, "changed: read again"


def test_a_file_that_names_other_pipelines_refuses_the_declaration_naming_the_file_and_fix(
    tmp_path: Path,
) -> None:
    write_environment(tmp_path, "dlc", {**DLC, "allowed_pipelines": ["team_b_*"]})
    write_environment(tmp_path, "arena", {**ARENA, "allowed_owners": ["team-b"]})

    with pytest.raises(DeclarationError) as refused:
        check_environment_use(cifar10(), tmp_path)

    message = str(refused.value)
    assert message.startswith("pipeline declaration ") and "cifar10.yaml" in message
    assert (
        "backends.dlc.environment dlc.json: its allowed_pipelines ['team_b_*'] do not match "
        "'cifar10_retrain'; backends.arena.environment arena.json: its allowed_owners ['team-b'] do not "
        "include the pipeline's owner 'ml-platform'"
    ) in message
    assert message.endswith(
        "(fix: name your team's environment files, or ask the administrator to allow the pipeline in "
        "allowed_pipelines or allowed_owners)"
    )


def test_files_that_allow_the_pipeline_or_are_missing_refuse_nothing(tmp_path: Path) -> None:
    write_environment(tmp_path, "dlc", {**DLC, "allowed_pipelines": ["cifar10_*"]})
    write_environment(tmp_path, "local", {"allowed_owners": ["ml-platform"]})

    check_environment_use(cifar10(), tmp_path)  # arena.json is missing: the form marks it unconfigured
