"""The ACK backend's settings and job names are refused as the cluster would refuse them, naming the fix."""

from __future__ import annotations

import re
from typing import Any

import pytest

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.ack.request import AckSettings, ack_settings, check, claim_name
from aliyun_training.kubernetes.names import JOB_NAME_MAX, job_name
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.validation import SpecError


def job(**fields: Any) -> TrainingJobSpec:
    return TrainingJobSpec(
        **{"backend": "arena", "nodes": 2, "gpus_per_node": 8, "image": "IMG", "command": "train", **fields}
    )


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"namespace": "ML_Team"}, "namespace: 'ML_Team' is not a DNS-1123 label"),
        ({"namespace": "training\n"}, "namespace: 'training\\n' is not a DNS-1123 label"),
        ({"namespace": "n" * 64}, "is not a DNS-1123 label"),
        (
            {"image_pull_secrets": ["acr-pull", "Bad/Name"]},
            "image_pull_secrets: ['Bad/Name'] are not DNS-1123",
        ),
        ({"default_pvc": "cpfs_data"}, "default_pvc: 'cpfs_data' is not a DNS-1123 subdomain"),
        ({"max_gpus_per_node": 0}, "max_gpus_per_node: Input should be greater than or equal to 1"),
        ({"max_gpus_per_node": "8"}, "max_gpus_per_node: Input should be a valid integer"),
        ({"max_gpus_per_node": 8.0}, "max_gpus_per_node: Input should be a valid integer"),
        ({"max_gpus_per_node": True}, "max_gpus_per_node: Input should be a valid integer"),
        ({"nccl_env": ["NCCL_DEBUG=INFO"]}, "nccl_env: Input should be a valid dictionary"),
        (
            {"nccl_env": {"NCCL_IB_GID_INDEX": 3}},
            "nccl_env.NCCL_IB_GID_INDEX: Input should be a valid string",
        ),
        ({"nccl_env": {"NCCL-DEBUG": "INFO"}}, "nccl_env: ['NCCL-DEBUG'] are not environment variable names"),
        ({"nccl_env": {"MASTER_PORT": "1"}}, "nccl_env: ['MASTER_PORT'] are set on every node"),
        ({"nccl_env": {"PET_NNODES": "4"}}, "nccl_env: ['PET_NNODES'] are set on every node"),
        (
            {"nccl_env": {"OUTPUT_DIR": "/tmp", "DATA_DIR": "/x"}},
            "['DATA_DIR', 'OUTPUT_DIR'] are set on every",
        ),
        ({"mpi_api_version": "v1"}, "mpi_api_version: Input should be 'v2beta1' or 'v1alpha1'"),
        ({"rdma_resource": "rdma"}, "rdma_resource: 'rdma' is not an extended resource name"),
        ({"rdma_resource": "kubernetes.io/hca"}, "'kubernetes.io/hca' is not an extended resource name"),
        ({"rdma_resource": "rdma/hca card"}, "'rdma/hca card' is not an extended resource name"),
        ({"clean_pod_policy": "Always"}, "clean_pod_policy: Input should be 'None', 'Running' or 'All'"),
        ({"backoff_limit": -1}, "backoff_limit: Input should be greater than or equal to 0"),
        ({"namspace": "x"}, "namspace: Extra inputs are not permitted"),
    ],
)
def test_bad_settings_are_a_spec_error_naming_the_field_and_the_fix(
    config: dict[str, Any], expected: str
) -> None:
    with pytest.raises(SpecError, match=re.escape(expected)) as raised:
        ack_settings(config)

    message = str(raised.value)
    assert message.startswith("Invalid AckSettings:")
    if "Extra inputs" not in message:
        assert "(fix: " in message


def test_a_settings_file_that_is_not_a_mapping_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="Input should be a valid dictionary or instance of AckSettings"):
        ack_settings(None)  # type: ignore[arg-type]


def test_good_settings_pass_through_and_the_backend_uses_the_same_check() -> None:
    config = {
        "namespace": "ml-team",
        "image_pull_secrets": ["acr.pull-1"],
        "nccl_env": {"NCCL_IB_GID_INDEX": "3", "NCCL_DEBUG": "INFO"},
        "rdma_resource": "aliyun/erdma",
        "max_gpus_per_node": 16,
        "mpi_api_version": "v1alpha1",
    }
    assert ack_settings(config) == AckSettings(**config)
    assert AckBackend(**config).settings.rdma_resource == "aliyun/erdma"
    with pytest.raises(SpecError, match="namespace: 'ML' is not a DNS-1123 label"):
        AckBackend(namespace="ML")


@pytest.mark.parametrize(
    ("spec", "name", "host"),
    [
        (job(), "9-starts-with-a-digit", "9-starts-with-a-digit"),
        (job(nodes=12), "a" * 54, f"{'a' * 54}-worker-10"),
        (job(framework="mpi", nodes=2), "a" * 55, f"{'a' * 55}-launcher"),
        (job(framework="elastic", nodes=2, max_nodes=128), "a" * 53, f"{'a' * 53}-worker-127"),
    ],
)
def test_a_job_name_whose_replica_names_are_no_dns_1035_labels_is_refused(
    spec: TrainingJobSpec, name: str, host: str
) -> None:
    with pytest.raises(SpecError) as raised:
        check(spec, name, AckSettings())

    message = str(raised.value)
    assert message.startswith(f"name: job {name!r} would name a replica's pod and Service {host!r}")
    assert "DNS-1035 label" in message
    assert "(fix: the job name comes from the DAG id and task id: start them with a letter" in message


def test_every_name_job_name_makes_passes_on_the_largest_job() -> None:
    name = job_name("9" + "d" * 200, "manual__2026", "t" * 200, installation="a" * 40)
    assert len(name) == JOB_NAME_MAX
    for spec in (
        job(nodes=128),
        job(framework="mpi", nodes=128),
        job(framework="tensorflow", nodes=128),
        job(framework="elastic", nodes=1, max_nodes=128),
    ):
        check(spec, name, AckSettings())


def test_a_pvc_uri_naming_an_invalid_claim_is_refused() -> None:
    with pytest.raises(
        SpecError, match=r"datasets: mount 'pvc://CPFS_data/x' names PVC 'CPFS_data', which is"
    ):
        claim_name("pvc://CPFS_data/x", AckSettings())
