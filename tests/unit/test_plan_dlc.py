"""plan.dlc, called directly: the PAI-DLC job, its fixed or staged dataset, its registration and settings.

Covers what the plans made through ``resolve_run`` (tests/unit/test_pipeline.py, the staging mode
tests) leave out: a fixed dataset mounted by URI, the PAI dataset registration of a staged version
(Lingjun or ECS, direct or data flow), the environment's own connection reaching every stage, the
backend settings' VPC rule, the preflight settings and the prepare job's raw mount.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.environments import DlcEnvironment
from aliyun_training.plan import dlc
from aliyun_training.plan.prepare import RAW_MOUNT_PATH
from aliyun_training.staging.registration import PaiDatasetRegistration
from aliyun_training.validation import SpecError
from fakes.environment_files import INSTALLATION, write_environment
from tests.plan_requests import VERSION, cifar10_request, imagenet_prepare_request

if TYPE_CHECKING:
    from aliyun_training.plan.inputs import PlanRequest

SOURCE_TEMPLATE = "oss://ml-datasets/{dataset}/{version}/"
#: The settings a DLC run cannot do without; each test lays its own over them.
CONFIGURED: dict[str, Any] = {
    "quota_id": "quota1ab2",
    "gpu_type": "GU8TF",
    "image": "registry.example.com/train:1",
    "workspace_id": "ws-9",
    "dataset": {"dataset_id": "d-cifar", "uri": "", "mount_path": "/mnt/data/cifar10"},
}
MOUNT_TARGET = "cpfs-0015abcd-vpc-0a1b2c.cn-wulanchabu.cpfs.aliyuncs.com"
DIRECT = {
    "mode": "direct",
    "target_root": "/mnt/cpfs/datasets/cifar10",
    "cpfs_path": "/datasets/cifar10",
    "file_system_id": "bmcpfs-0015abcd",
    "mount_target": MOUNT_TARGET,
}


def request(
    tmp_path: Path,
    settings: dict[str, Any],
    *,
    template: str | None = None,
    gpus_per_node: int = 8,
    overrides: dict[str, Any] | None = None,
) -> PlanRequest:
    """A two-node CIFAR-10 run of VERSION on DLC whose ``dlc.json`` is the shipped one with ``settings``."""
    return cifar10_request(
        tmp_path,
        write_environment(tmp_path / "config", "dlc", settings),
        Backend.DLC,
        template=template,
        parameters={"epochs": 1, "batch_size": 32},
        gpus_per_node=gpus_per_node,
        timeout_minutes=30,
        backend_overrides=overrides or {},
    )


def prepare_request(tmp_path: Path, settings: dict[str, Any], raw_template: str | None) -> PlanRequest:
    """A run of the ImageNet pipeline, whose prepare stage shards raw version 2026-11-01 first."""
    environment = write_environment(tmp_path / "config", "dlc", settings)
    return imagenet_prepare_request(tmp_path, environment, Backend.DLC, raw_template, gpus_per_node=8)


def test_the_fixed_dataset_is_mounted_by_its_uri_when_the_environment_names_no_dataset_id(
    tmp_path: Path,
) -> None:
    dataset = {"dataset_id": "", "uri": "oss://ml-datasets/cifar10/", "mount_path": "/mnt/cifar"}

    run = dlc.plan_run(request(tmp_path, {**CONFIGURED, "dataset": dataset}))

    (mount,) = run.job.spec.datasets
    assert (mount.uri, mount.dataset_id, mount.mount_path, mount.read_only) == (
        dataset["uri"],
        None,
        "/mnt/cifar",
        True,
    )
    assert run.job.spec.env["DATA_DIR"] == f"/mnt/cifar/{VERSION}", "the version's folder in the mount"
    assert run.dataset.fixed is not None and run.dataset.fixed.uri == dataset["uri"]
    assert run.dataset.source_uri is None and run.staging is None, "a fixed dataset is not staged"


def test_a_staged_version_is_registered_as_a_pai_dataset_of_the_workspace_and_not_mounted_fixed(
    tmp_path: Path,
) -> None:
    run = dlc.plan_run(request(tmp_path, {**CONFIGURED, "staging": DIRECT}, template=SOURCE_TEMPLATE))

    staging = run.staging
    assert staging is not None
    assert (staging.mode, staging.source_uri, staging.target_root, staging.version) == (
        "direct",
        f"oss://ml-datasets/cifar10/{VERSION}/",
        DIRECT["target_root"],
        VERSION,
    )
    assert staging.remote == {}, "a direct copy runs on the worker: no remote stager settings"
    registration = staging.registration
    assert isinstance(registration, PaiDatasetRegistration)
    assert (registration.workspace_id, registration.name, registration.provider_type) == (
        "ws-9",
        "cifar10",
        "Lingjun",
    )
    assert (registration.cpfs_path, registration.file_system_id, registration.mount_target) == (
        DIRECT["cpfs_path"],
        DIRECT["file_system_id"],
        MOUNT_TARGET,
    )
    assert (registration.mount_path, registration.region, registration.installation) == (
        "/mnt/data/cifar10",
        "cn-wulanchabu",
        INSTALLATION,
    )
    assert run.dataset.fixed is None and run.dataset.source_uri == staging.source_uri
    assert run.job.spec.datasets == [], "the staged version is mounted from its own record, later"
    assert "DATA_DIR" not in run.job.spec.env
    assert run.job.dataset_mount_path == "/mnt/data/cifar10"


def test_an_ecs_environment_registers_its_staged_versions_for_ecs_jobs(tmp_path: Path) -> None:
    settings = {**CONFIGURED, "resource_type": "ecs", "ecs_spec": "ecs.gn7i-c8g1.2xlarge", "staging": DIRECT}

    run = dlc.plan_run(request(tmp_path, settings, template=SOURCE_TEMPLATE))

    assert run.staging is not None and isinstance(run.staging.registration, PaiDatasetRegistration)
    assert run.staging.registration.provider_type == "Ecs"
    assert run.job.backend_config["job_settings"]["resource_type"] == "ecs"
    assert run.job.backend_config["job_settings"]["ecs_spec"] == "ecs.gn7i-c8g1.2xlarge"


def test_a_data_flow_import_names_its_file_system_flow_and_the_environments_connection(
    tmp_path: Path,
) -> None:
    staging = {
        "mode": "dataflow",
        "target_root": "/datasets/cifar10",
        "cpfs_path": "",
        "file_system_id": "bmcpfs-0015abcd",
        "data_flow_id": "df-194433a5be310001",
        "mount_target": MOUNT_TARGET,
    }
    settings = {**CONFIGURED, "alibaba_cloud_conn_id": "aliyun_prod", "staging": staging}

    run = dlc.plan_run(request(tmp_path, settings, template=SOURCE_TEMPLATE))

    assert run.staging is not None and isinstance(run.staging.registration, PaiDatasetRegistration)
    assert run.staging.remote == {
        "file_system_id": staging["file_system_id"],
        "data_flow_id": staging["data_flow_id"],
        "alibaba_cloud_conn_id": "aliyun_prod",
    }
    assert run.staging.registration.cpfs_path == "/datasets/cifar10", (
        "a data flow imports into target_root inside the file system: the versions' directory"
    )
    assert run.staging.alibaba_cloud_conn_id == "aliyun_prod"


def test_the_environments_connection_reaches_the_job_and_the_artifacts(tmp_path: Path) -> None:
    outputs = {"output_uri": "oss://ml-bucket/outputs/", "artifact_root": "oss://ml-bucket/models/"}

    run = dlc.plan_run(request(tmp_path, {**CONFIGURED, **outputs, "alibaba_cloud_conn_id": "aliyun_prod"}))

    assert run.job.backend_config["alibaba_cloud_conn_id"] == "aliyun_prod"
    assert run.artifacts.alibaba_cloud_conn_id == "aliyun_prod"
    assert run.image is not None and run.image.fixed == CONFIGURED["image"]


def test_staging_without_a_workspace_fails_naming_workspace_id_and_the_fix(tmp_path: Path) -> None:
    settings = {**CONFIGURED, "workspace_id": "", "staging": DIRECT}

    with pytest.raises(SpecError, match=r"^workspace_id: a PAI dataset lives in a workspace \(fix: set"):
        dlc.plan_run(request(tmp_path, settings, template=SOURCE_TEMPLATE))


def test_staging_without_a_source_fails_naming_staging_source_uri(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^staging\.source_uri: .*\(fix: e\.g\. oss://"):
        dlc.plan_run(request(tmp_path, {**CONFIGURED, "staging": DIRECT}, template=None))


def test_a_shared_memory_override_sizes_the_job_when_the_run_requests_gpus(tmp_path: Path) -> None:
    run = dlc.plan_run(request(tmp_path, CONFIGURED, overrides={"shared_memory_gib_per_node": 128}))

    assert run.job.spec.shared_memory_gib == 128


def test_the_preflight_plan_names_the_lingjun_settings_and_the_shipped_role_policy(tmp_path: Path) -> None:
    settings = {**CONFIGURED, "zone_id": "cn-wulanchabu-c", "role_name": "pai-dlc-runner"}

    preflight = dlc.plan_run(request(tmp_path, settings)).preflight

    assert (preflight.lingjun_regions, preflight.zone_id, preflight.role_name) == (
        ["cn-wulanchabu"],
        "cn-wulanchabu-c",
        "pai-dlc-runner",
    )
    assert preflight.policy_file is not None
    assert "policy" in json.loads(Path(preflight.policy_file).read_text()), "the file the check reads"


@pytest.mark.parametrize("blank", ["vpc_id", "switch_id", "security_group_id"])
def test_the_backend_config_leaves_out_a_vpc_missing_any_of_its_three_ids(blank: str) -> None:
    ids = {"vpc_id": "vpc-1", "switch_id": "vsw-1", "security_group_id": "sg-1"}

    whole = dlc.dlc_backend_config(DlcEnvironment(vpc=ids))
    partial = dlc.dlc_backend_config(DlcEnvironment(vpc={**ids, blank: ""}))

    assert whole["vpc"] is not None and {k: whole["vpc"][k] for k in ids} == ids
    assert partial["vpc"] is None, f"a VPC without {blank} is not sent half-empty"


def test_the_backend_config_uses_the_default_connection_when_alibaba_cloud_conn_id_is_blank() -> None:
    config = dlc.dlc_backend_config(
        DlcEnvironment(region="cn-beijing", workspace_id="ws-2", image_registry_conn_id="acr_ee")
    )

    assert config == {
        "alibaba_cloud_conn_id": "alibaba_cloud_default",
        "region": "cn-beijing",
        "workspace_id": "ws-2",
        "vpc": None,
        "image_registry_conn_id": "acr_ee",
        "job_settings": {
            "resource_type": "lingjun",
            "quota_id": None,
            "gpu_type": None,
            "ecs_spec": None,
            "priority": 1,
        },
    }


def test_a_prepare_job_mounts_the_raw_versions_oss_folder_read_only_and_reads_it_there(
    tmp_path: Path,
) -> None:
    settings = {
        **CONFIGURED,
        "output_uri": "oss://ml-bucket/outputs/",
        "staging": {**DIRECT, "target_root": "/mnt/cpfs/datasets", "cpfs_path": "/datasets"},
    }
    raw_template = "oss://example-bucket/raw/{dataset}/{version}/"

    run = dlc.plan_run(prepare_request(tmp_path, settings, raw_template))

    assert run.prepare is not None
    spec = run.prepare.job.spec
    raw = [m for m in spec.datasets if m.mount_path == RAW_MOUNT_PATH]
    assert [(m.uri, m.read_only) for m in raw] == [("oss://example-bucket/raw/imagenet/2026-11-01/", True)]
    assert spec.env["RAW_DIR"] == RAW_MOUNT_PATH
    assert [m.uri for m in spec.datasets if not m.read_only] == ["oss://ml-bucket/outputs/"]
    assert run.dataset.prepared_from == "imagenet/2026-11-01"


def test_a_prepare_job_whose_raw_versions_have_no_source_fails_naming_staging_source_uri(
    tmp_path: Path,
) -> None:
    settings = {**CONFIGURED, "output_uri": "oss://ml-bucket/outputs/", "staging": DIRECT}

    with pytest.raises(SpecError, match=r"^staging\.source_uri: "):
        dlc.plan_run(prepare_request(tmp_path, settings, raw_template=None))
