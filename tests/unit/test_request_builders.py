"""The pure request builders a dry run shows: no network, no connection, no secret, the SDK's models.

Each builder runs here with every Airflow connection gone and every socket refused; the tests
beside their callers (test_dlc_fidelity, test_dataflow_api, test_pai_dataset, test_image_acr)
show that what the callers send is exactly what these build.
"""

from __future__ import annotations

import json
import os
import socket
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc_models

from aliyun_training.backends.dlc.request import NAME_TAG, DlcJobSettings, create_job_request
from aliyun_training.image.acr import AcrBuildSettings, build_record_request, rule_update_request
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.staging.dataflow_api import import_task_request
from aliyun_training.staging.pai_dataset import create_dataset_request, create_dataset_version_request
from aliyun_training.validation import SpecError
from fakes.cloud import DLC_JOB_SETTINGS, dlc_job

if TYPE_CHECKING:
    from collections.abc import Iterator

VPC = {"vpc_id": "vpc-0abc", "switch_id": "vsw-0abc", "security_group_id": "sg-0abc"}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """No connection can be read and no socket can connect: a builder that tries fails the test."""
    for variable in [name for name in os.environ if name.startswith("AIRFLOW_CONN_")]:
        monkeypatch.delenv(variable)
    attempts: list[Any] = []

    def refuse(sock: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise AssertionError(f"a request builder opened a connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield attempts
    assert attempts == []


def test_the_create_job_request_is_built_from_the_spec_alone() -> None:
    spec = TrainingJobSpec.parse(
        dlc_job(
            command="torchrun train.py",
            env={"EPOCHS": "3"},
            output_dir="/mnt/output/run-1",
            datasets=[
                {"uri": "oss://pai-training/cifar10/v1/", "mount_path": "/mnt/data"},
                {"dataset_id": "d-cifar10", "dataset_version": "v3", "mount_path": "/mnt/pai"},
            ],
        )
    )
    image_config = dlc_models.ImageConfig(
        docker_registry="registry.example.com", username="puller", password="<password of training_registry>"
    )

    body = create_job_request(
        spec,
        "retrain-train",
        job_settings=DlcJobSettings.model_validate(DLC_JOB_SETTINGS),
        workspace_id="ws-1",
        region="cn-beijing",
        vpc=VPC,
        extended_cidrs=["10.8.0.0/16"],
        image_config=image_config,
    ).to_map()

    assert body["DisplayName"] == "retrain-train" and body["JobType"] == "PyTorchJob"
    assert body["WorkspaceId"] == "ws-1" and body["ResourceId"] == "quota12345"
    assert [(s["Type"], s["PodCount"]) for s in body["JobSpecs"]] == [("Master", 1), ("Worker", 1)]
    assert {s["ImageConfig"]["Password"] for s in body["JobSpecs"]} == {"<password of training_registry>"}
    assert body["UserVpc"] == {**_vpc_map(), "ExtendedCIDRs": ["10.8.0.0/16"]}
    assert [source.get("Uri") for source in body["DataSources"]] == [
        "oss://pai-training.oss-cn-beijing-internal.aliyuncs.com/cifar10/v1/",
        None,
    ]
    assert body["Envs"] == {"EPOCHS": "3", "OUTPUT_DIR": "/mnt/output/run-1"}
    assert body["Settings"]["Tags"] == {NAME_TAG: "retrain-train"}


def test_a_create_job_request_without_a_vpc_or_registry_names_neither() -> None:
    body = create_job_request(
        TrainingJobSpec.parse(dlc_job(command="python train.py")),
        "plain",
        job_settings=DlcJobSettings.model_validate(DLC_JOB_SETTINGS),
        workspace_id=None,
        region="cn-wulanchabu",
        vpc=None,
        extended_cidrs=[],
        image_config=None,
    ).to_map()

    assert "UserVpc" not in body and "WorkspaceId" not in body
    assert all("ImageConfig" not in job_spec for job_spec in body["JobSpecs"])


def test_the_import_task_request_sets_the_documented_fields_and_checks_its_inputs() -> None:
    lingjun = import_task_request(
        file_system_id="bmcpfs-290w65p03ok64ya",
        data_flow_id="df-1",
        directory="/2026-11-22/",
        dst_directory="/cifar10/2026-11-22/",
        client_token="stage-abc",
    ).to_map()
    general = import_task_request(
        file_system_id="cpfs-0123abcd",
        data_flow_id="df-1",
        directory="/a/",
        dst_directory="/b/",
        client_token="stage-abc",
    ).to_map()

    assert lingjun == {
        "FileSystemId": "bmcpfs-290w65p03ok64ya",
        "DataFlowId": "df-1",
        "TaskAction": "Import",
        "DataType": "MetaAndData",
        "Directory": "/2026-11-22/",
        "DstDirectory": "/cifar10/2026-11-22/",
        "ConflictPolicy": "OVERWRITE_EXISTING",
        "CreateDirIfNotExist": True,
        "ClientToken": "stage-abc",
    }
    assert "CreateDirIfNotExist" not in general  # documented for CPFS for Lingjun only
    with pytest.raises(SpecError, match=r"^dst_directory: "):
        import_task_request(
            file_system_id="cpfs-1", data_flow_id="df-1", directory="/a/", dst_directory="b", client_token="t"
        )


def test_the_dataset_requests_describe_a_directory_with_its_mount_path() -> None:
    common = {
        "version_uri": "bmcpfs://cpfs-0015abcd-vpc-9x8y.cn-wulanchabu.cpfs.aliyuncs.com/d/v1/",
        "data_source_type": "BMCPFS",
        "mount_path": "/mnt/data/cifar10/",
        "version_description": "v1: 3 files",
    }

    dataset = create_dataset_request(
        workspace_id="ws-train",
        name="cifar10",
        provider_type="Lingjun",
        labels={"z": "1", "pipeline": "cifar10"},
        **common,
    ).to_map()
    version = create_dataset_version_request(version_labels={"run": "r1"}, **common).to_map()

    assert (dataset["WorkspaceId"], dataset["Name"], dataset["ProviderType"]) == (
        "ws-train",
        "cifar10",
        "Lingjun",
    )
    assert (dataset["Property"], dataset["Uri"], dataset["DataSourceType"]) == (
        "DIRECTORY",
        common["version_uri"],
        "BMCPFS",
    )
    assert (
        json.loads(dataset["Options"])
        == json.loads(version["Options"])
        == {"mountPath": "/mnt/data/cifar10/"}
    )
    assert dataset["Labels"] == [{"Key": "pipeline", "Value": "cifar10"}, {"Key": "z", "Value": "1"}]
    assert dataset["VersionDescription"] == version["Description"] == "v1: 3 files"
    assert version["Labels"] == [{"Key": "run", "Value": "r1"}] and "Name" not in version


def test_the_acr_requests_point_the_rule_at_the_tag_and_build_it() -> None:
    settings = AcrBuildSettings(
        instance_id="cri-emulated0001",
        repo_id="crr-1",
        build_rule_id="crbr-1",
        tag="3f9a1c2b7d4e",
        image="emulated-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train:3f9a1c2b7d4e",
    )
    rule = SimpleNamespace(
        build_args=["PYTHON=3.11"],
        dockerfile_location="/include/docker",
        dockerfile_name="Dockerfile",
        platforms=["linux/amd64"],
        push_name="image-v1",
        push_type="GIT_TAG",
    )

    update = rule_update_request(settings, "crr-1", rule).to_map()
    build = build_record_request(settings, "crr-1").to_map()

    assert update == {
        "InstanceId": "cri-emulated0001",
        "RepoId": "crr-1",
        "BuildRuleId": "crbr-1",
        "ImageTag": "3f9a1c2b7d4e",
        "BuildArgs": ["PYTHON=3.11"],
        "DockerfileLocation": "/include/docker",
        "DockerfileName": "Dockerfile",
        "Platforms": ["linux/amd64"],
        "PushName": "image-v1",
        "PushType": "GIT_TAG",
    }
    assert build == {"InstanceId": "cri-emulated0001", "RepoId": "crr-1", "BuildRuleId": "crbr-1"}


def _vpc_map() -> dict[str, str]:
    return {"VpcId": VPC["vpc_id"], "SwitchId": VPC["switch_id"], "SecurityGroupId": VPC["security_group_id"]}
