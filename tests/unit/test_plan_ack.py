"""plan.ack, called directly: the ACK job, its staged version's claim, its settings and its prepare job.

Covers what the plans made through ``resolve_run`` (tests/unit/test_pipeline.py, the staging mode
tests) leave out: the staging pod's settings and the PV/PVC registration of a staged version, the
claims a staged run mounts, the cluster connection kept apart from the OSS one, the backend
settings' defaults and the cluster's own rules, and where a prepare job reads the raw version.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.backends.ack.request import ack_settings
from aliyun_training.environments import AckEnvironment, EnvironmentFileError, load_environment
from aliyun_training.plan import ack
from aliyun_training.staging.registration import PvcRegistration
from aliyun_training.validation import SpecError
from fakes.environment_files import INSTALLATION, write_environment
from tests.plan_requests import VERSION, cifar10_request, imagenet_prepare_request

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.plan.inputs import PlanRequest

SOURCE_TEMPLATE = "oss://ml-datasets/{dataset}/{version}/"
IMAGE = "registry.example.com/train:1"
CPFS_SERVER = "cpfs-0123abcd.cn-wulanchabu.cpfs.aliyuncs.com"
POD = {
    "mode": "pod",
    "target_root": "/mnt/cpfs/datasets/cifar10",
    "cpfs_path": "/share/datasets/cifar10",
    "staging_pvc": "cpfs-root",
    "image": "registry-vpc.cn-wulanchabu.aliyuncs.com/ml/aliyun-training:1.4.0",
    "credentials_secret": "oss-credentials",
    "region": "cn-wulanchabu",
    "oss_endpoint": "oss-cn-wulanchabu-internal.aliyuncs.com",
    "volume_kind": "cpfs",
    "server": CPFS_SERVER,
}
OUTPUTS = {"output_uri": "oss://ml-bucket/outputs/", "output_pvc": "oss-outputs"}


def request(tmp_path: Path, settings: dict[str, Any], *, template: str | None = None) -> PlanRequest:
    """A two-node, 8-GPU CIFAR-10 run of VERSION on ACK whose ``arena.json`` is the shipped one with
    ``settings``."""
    return cifar10_request(
        tmp_path,
        write_environment(tmp_path / "config", "arena", settings),
        Backend.ACK,
        template=template,
        parameters={"epochs": 1, "batch_size": 32},
        gpus_per_node=8,
        timeout_minutes=30,
    )


def prepare_request(tmp_path: Path, settings: dict[str, Any]) -> PlanRequest:
    """A run of the ImageNet pipeline, whose prepare stage shards raw version 2026-11-01 first. On
    ACK the raw versions are on the dataset claim: their source cannot be listed."""
    environment = write_environment(tmp_path / "config", "arena", settings)
    return imagenet_prepare_request(tmp_path, environment, Backend.ACK, None, gpus_per_node=8)


def test_a_staging_pod_gets_the_cluster_namespace_and_the_blocks_pod_settings(tmp_path: Path) -> None:
    settings = {"image": IMAGE, "namespace": "training", "kubernetes_conn_id": "ack_prod", "staging": POD}

    run = ack.plan_run(request(tmp_path, settings, template=SOURCE_TEMPLATE))

    staging = run.staging
    assert staging is not None
    assert (staging.mode, staging.source_uri, staging.target_root, staging.version) == (
        "pod",
        f"oss://ml-datasets/cifar10/{VERSION}/",
        POD["target_root"],
        VERSION,
    )
    assert staging.remote == {
        "kubernetes_conn_id": "ack_prod",
        "namespace": "training",
        "dataset": "cifar10",
        "installation": INSTALLATION,
        **{key: POD[key] for key in ("staging_pvc", "image", "credentials_secret", "region", "oss_endpoint")},
    }


def test_a_staged_version_is_registered_as_its_own_claim_in_the_jobs_namespace(tmp_path: Path) -> None:
    settings = {"image": IMAGE, "namespace": "training", "kubernetes_conn_id": "ack_prod", "staging": POD}

    run = ack.plan_run(request(tmp_path, settings, template=SOURCE_TEMPLATE))

    assert run.staging is not None
    registration = run.staging.registration
    assert isinstance(registration, PvcRegistration)
    assert (registration.kubernetes_conn_id, registration.namespace, registration.dataset) == (
        "ack_prod",
        "training",
        "cifar10",
    )
    assert (registration.volume_kind, registration.server, registration.cpfs_path) == (
        "cpfs",
        CPFS_SERVER,
        POD["cpfs_path"],
    )
    assert registration.installation == INSTALLATION


def test_a_direct_copy_needs_no_staging_pod_settings(tmp_path: Path) -> None:
    direct = {"mode": "direct", **{k: POD[k] for k in ("target_root", "cpfs_path", "volume_kind", "server")}}

    run = ack.plan_run(request(tmp_path, {"image": IMAGE, "staging": direct}, template=SOURCE_TEMPLATE))

    assert run.staging is not None and run.staging.mode == "direct"
    assert run.staging.remote == {}


def test_a_staged_run_mounts_its_version_instead_of_the_dataset_claim(tmp_path: Path) -> None:
    settings = {"image": IMAGE, "data_pvc": "cpfs-train", **OUTPUTS, "staging": POD}

    run = ack.plan_run(request(tmp_path, settings, template=SOURCE_TEMPLATE))

    mounts = run.job.spec.datasets
    assert [(m.uri, m.read_only) for m in mounts] == [("pvc://oss-outputs", False)], "only the outputs"
    assert run.dataset.fixed is None and "DATA_DIR" not in run.job.spec.env
    assert run.job.dataset_mount_path == "/mnt/data/cifar10", "where the staged claim will be mounted"


def test_oss_is_reached_through_the_alibaba_cloud_connection_and_the_cluster_through_its_own(
    tmp_path: Path,
) -> None:
    settings = {
        "image": IMAGE,
        "data_pvc": "cpfs-train",
        **OUTPUTS,
        "artifact_root": "oss://ml-bucket/models/",
        "kubernetes_conn_id": "ack_prod",
        "alibaba_cloud_conn_id": "aliyun_prod",
        "staging": {**POD, "mode": "direct"},
    }

    run = ack.plan_run(request(tmp_path, settings, template=SOURCE_TEMPLATE))

    assert run.job.backend_config["kubernetes_conn_id"] == "ack_prod"
    assert run.staging is not None and run.staging.alibaba_cloud_conn_id == "aliyun_prod"
    assert run.artifacts.alibaba_cloud_conn_id == "aliyun_prod"
    assert isinstance(run.staging.registration, PvcRegistration)
    assert run.staging.registration.kubernetes_conn_id == "ack_prod"


def test_an_ack_run_plans_no_lingjun_preflight_settings(tmp_path: Path) -> None:
    run = ack.plan_run(request(tmp_path, {"image": IMAGE, "data_pvc": "cpfs-train"}))

    preflight = run.preflight
    assert (preflight.lingjun_regions, preflight.zone_id, preflight.role_name, preflight.policy_file) == (
        [],
        None,
        None,
        None,
    )


def test_the_backend_config_fills_in_the_clusters_defaults_for_blank_settings() -> None:
    config = ack.ack_backend_config(AckEnvironment(namespace="ml", username="trainer"))

    assert (config["kubernetes_conn_id"], config["rdma_resource"], config["mpi_api_version"]) == (
        "kubernetes_default",
        "rdma/hca",
        "v2beta1",
    )
    assert (config["namespace"], config["username"], config["host_network"]) == ("ml", "trainer", False)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mpi_api_version": "v1"}, r"mpi_api_version: Input should be 'v2beta1' or 'v1alpha1'"),
        ({"nccl_env": {"MASTER_PORT": "1"}}, r"nccl_env: \['MASTER_PORT'\] are set on every node"),
        ({"rdma_resource": "rdma"}, r"rdma_resource: 'rdma' is not an extended resource name"),
    ],
)
def test_the_environment_file_and_the_backend_settings_refuse_what_the_cluster_would_alike(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    """One definition of each ACK setting: the file is refused when it loads, naming the file, and
    the backend's own settings (a job's backend_config) refuse the same value with the same words."""
    path = tmp_path / "arena.json"
    path.write_text(json.dumps(settings))

    with pytest.raises(EnvironmentFileError, match=message) as in_the_file:
        load_environment(path, "arena")
    with pytest.raises(SpecError, match=message) as in_the_backend:
        ack_settings(settings)

    assert str(path) in str(in_the_file.value)
    assert "(fix: " in str(in_the_file.value) and "(fix: " in str(in_the_backend.value)


def test_a_prepare_job_reads_the_raw_version_from_the_dataset_claim(tmp_path: Path) -> None:
    settings = {
        "image": IMAGE,
        "data_pvc": "cpfs-raw",
        "mount_path": "/mnt/raw-data/",
        **OUTPUTS,
        "staging": {**POD, "mode": "direct"},
    }

    run = ack.plan_run(prepare_request(tmp_path, settings))

    assert run.prepare is not None
    spec = run.prepare.job.spec
    assert spec.env["RAW_DIR"] == "/mnt/raw-data/2026-11-01", "the raw version's folder on the claim"
    assert [(m.uri, m.mount_path, m.read_only) for m in spec.datasets] == [
        ("pvc://cpfs-raw", "/mnt/raw-data/", True),
        ("pvc://oss-outputs", "/mnt/data/outputs/cifar10", False),
    ]
    assert run.prepare.output_uri.startswith("oss://ml-bucket/outputs/prepared/imagenet-shards/2026-11-01.")


def test_a_prepare_job_without_a_dataset_claim_fails_naming_data_pvc_and_the_fix(tmp_path: Path) -> None:
    settings = {"image": IMAGE, **OUTPUTS, "staging": {**POD, "mode": "direct"}}

    with pytest.raises(SpecError, match=r"^data_pvc: on ACK the prepare stage reads raw versions") as refused:
        ack.plan_run(prepare_request(tmp_path, settings))

    assert "(fix: set data_pvc" in str(refused.value)
