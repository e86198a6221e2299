"""plan.side_jobs: the one-node job a run starts beside its training job (prepare, evaluation).

On a cloud backend it runs where and as the training job does (its image, mounts, working
directory), but is sized for its own work: one plain PyTorch replica, no RDMA, no shared memory.
"""

from __future__ import annotations

from typing import Any

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.plan.side_jobs import side_job_spec
from aliyun_training.spec import Framework, TrainingJobSpec
from aliyun_training.validation import SpecError
from fakes.cloud import TRAIN_IMAGE, arena_job

#: What every side job of these tests runs.
SIDE_JOB: dict[str, Any] = {
    "command": "python evaluate_cifar10.py",
    "cpu": 2,
    "memory_gib": 4,
    "timeout_minutes": 60,
}


def training_job() -> TrainingJobSpec:
    """A two-node, eight-GPU TensorFlow job with RDMA, shared memory, a dataset mount and outputs."""
    return TrainingJobSpec.parse(
        arena_job(
            framework="tensorflow",
            rdma=True,
            shared_memory_gib=32,
            working_dir="/workspace",
            env={"DATA_DIR": "/mnt/data/cifar10/v1"},
            datasets=[{"uri": "pvc://cpfs-train", "mount_path": "/mnt/data/cifar10"}],
            output_dir="/mnt/output/train",
            command="torchrun train.py",
            timeout_minutes=600,
        )
    )


def test_a_cloud_side_job_runs_where_the_training_job_does_sized_for_its_own_work() -> None:
    like = training_job()

    spec = side_job_spec(like, like.backend, env={"EVAL": "1"}, gpus=1, **SIDE_JOB)

    assert (spec.backend, spec.image, spec.working_dir) == (Backend.ACK, TRAIN_IMAGE, "/workspace")
    assert spec.datasets == like.datasets, "it reads the data the training job mounts"
    assert (spec.framework, spec.nodes, spec.gpus_per_node) == (Framework.PYTORCH, 1, 1)
    assert (spec.cpu, spec.memory_gib, spec.shared_memory_gib, spec.rdma) == (2, 4, 0, False)
    assert (spec.command, spec.timeout_minutes) == ("python evaluate_cifar10.py", 60)
    assert spec.env == {"EVAL": "1"}, "only the env it is given, not the training job's"
    assert spec.output_dir is None, "the training job's output directory is not the side job's"


def test_settings_name_what_differs_from_the_training_job() -> None:
    other = "registry.example.com/evaluate:2"

    spec = side_job_spec(training_job(), "arena", env={}, image=other, datasets=[], **SIDE_JOB)

    assert (spec.image, spec.datasets, spec.gpus_per_node) == (other, [], 0), "no GPU unless asked"


def test_a_local_side_job_takes_its_directories_from_the_settings() -> None:
    spec = side_job_spec(
        None, "local", env={}, working_dir="/srv/training", output_dir="/srv/outputs/prepare", **SIDE_JOB
    )

    assert (spec.backend, spec.image, spec.nodes) == (Backend.LOCAL, None, 1)
    assert (spec.working_dir, spec.output_dir) == ("/srv/training", "/srv/outputs/prepare")


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("cpu", 0, "request between 1 and 512 CPUs per node"),
        ("command", "", "give the command every node runs"),
    ],
)
def test_a_bad_size_or_command_is_refused_naming_the_field_and_its_fix(
    field: str, value: Any, fix: str
) -> None:
    with pytest.raises(SpecError) as refused:
        side_job_spec(training_job(), "arena", env={}, **{**SIDE_JOB, field: value})

    assert f"- {field}: " in str(refused.value) and f"(fix: {fix}" in str(refused.value)
