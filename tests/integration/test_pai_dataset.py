"""PAI dataset registration (staging/pai_dataset.py) through AIWorkspaceHook, against the AIWorkspace
emulator."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from aliyun_training.hooks.aiworkspace import AIWorkspaceHook
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.staging.pai_dataset import (
    create_dataset_request,
    create_dataset_version_request,
    dataset_uri,
    register_dataset_version,
)
from aliyun_training.validation import SpecError
from fakes.base import FaultPlan
from fakes.cloud import emulated_workspace

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fakes.aiworkspace import AIWorkspaceEmulator

AK, SK = "LTAI-dataset-test", "dataset-secret-value"
WS = "ws-train"
MOUNT_TARGET = "cpfs-0015abcd-vpc-9x8y.cn-wulanchabu.cpfs.aliyuncs.com"
URI_A = f"bmcpfs://{MOUNT_TARGET}/datasets/cifar10/2026-11-22/"
URI_B = f"bmcpfs://{MOUNT_TARGET}/datasets/cifar10/2026-11-29/"
CREATES = ("CreateDataset", "CreateDatasetVersion")


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch) -> Iterator[AIWorkspaceEmulator]:
    with emulated_workspace(monkeypatch, AK, SK) as emulator:
        yield emulator


def register(uri: str, name: str = "cifar10", **extra: object) -> tuple[str, str]:
    arguments: dict[str, object] = {
        "workspace_id": WS,
        "name": name,
        "version_uri": uri,
        "data_source_type": "BMCPFS",
        "provider_type": "Lingjun",
        "mount_path": "/mnt/data/cifar10/",
        "version_description": f"staged {uri}",
        **extra,
    }
    return register_dataset_version(AIWorkspaceHook(), **arguments)  # type: ignore[arg-type]


def creates(emulator: AIWorkspaceEmulator) -> int:
    return sum(emulator.count(action) for action in CREATES)


@pytest.mark.slow
def test_first_registration_creates_the_dataset_whose_v1_is_the_version(workspace):
    dataset_id, version = register(URI_A, labels={"pipeline": "cifar10"}, description="CIFAR-10")
    assert version == "v1"
    assert (workspace.count("CreateDataset"), workspace.count("CreateDatasetVersion")) == (1, 0)
    dataset = workspace.datasets[dataset_id]
    assert (dataset.name, dataset.workspace_id, dataset.provider_type) == ("cifar10", WS, "Lingjun")
    assert dataset.labels == [{"Key": "pipeline", "Value": "cifar10"}]
    (v1,) = dataset.versions
    assert (v1.uri, v1.property, v1.description) == (URI_A, "DIRECTORY", f"staged {URI_A}")
    assert json.loads(v1.options) == {"mountPath": "/mnt/data/cifar10/"}


@pytest.mark.slow
def test_the_creates_send_exactly_the_requests_the_pure_builders_make(workspace):
    dataset_id, _ = register(URI_A, labels={"pipeline": "cifar10"})
    register(URI_B, version_labels={"run": "r2"})

    common = {
        "data_source_type": "BMCPFS",
        "mount_path": "/mnt/data/cifar10/",
    }
    dataset = create_dataset_request(
        workspace_id=WS,
        name="cifar10",
        version_uri=URI_A,
        provider_type="Lingjun",
        version_description=f"staged {URI_A}",
        labels={"pipeline": "cifar10"},
        **common,
    )
    version = create_dataset_version_request(
        version_uri=URI_B, version_description=f"staged {URI_B}", version_labels={"run": "r2"}, **common
    )
    (sent_dataset,) = workspace.requests_for("CreateDataset")
    (sent_version,) = workspace.requests_for("CreateDatasetVersion")
    assert sent_dataset.body == {key: value for key, value in dataset.to_map().items() if value != []}
    assert sent_version.body == {key: value for key, value in version.to_map().items() if value != []}
    assert sent_version.path.endswith(f"/{dataset_id}/versions")


@pytest.mark.slow
def test_registering_again_creates_nothing(workspace):
    first = register(URI_A)
    before = creates(workspace)
    assert register(URI_A) == first
    assert creates(workspace) == before == 1


def test_an_existing_version_is_reused_by_uri(workspace):
    dataset_id, _ = register(URI_A)
    assert register(URI_B) == (dataset_id, "v2")
    before = creates(workspace)
    assert register(URI_A) == (dataset_id, "v1")
    assert register(URI_B) == (dataset_id, "v2")
    assert creates(workspace) == before


@pytest.mark.slow
def test_a_new_uri_makes_a_new_version(workspace):
    dataset_id, _ = register(URI_A)
    assert register(URI_B) == (dataset_id, "v2")
    assert register(URI_B.replace("11-29", "12-06")) == (dataset_id, "v3")
    assert workspace.count("CreateDataset") == 1
    assert workspace.count("CreateDatasetVersion") == 2


def test_names_are_matched_exactly_although_the_api_matches_fuzzily(workspace):
    longer, _ = register(URI_A, name="cifar100")
    exact, version = register(URI_A, name="cifar10")
    assert exact != longer and version == "v1"
    assert workspace.count("CreateDataset") == 2


def test_datasets_of_other_workspaces_are_not_reused(workspace):
    other, _ = register(URI_A, workspace_id="ws-other")
    mine, _ = register(URI_A)
    assert other != mine


@pytest.mark.slow
def test_versions_are_found_beyond_the_first_page(workspace):
    dataset_id, _ = register(URI_A)
    dataset = workspace.datasets[dataset_id]
    for n in range(2, 106):
        dataset.versions.append(
            type(dataset.first)(f"v{n}", "BMCPFS", "DIRECTORY", f"{URI_A}{n}/", dataset.first.created_at + n)
        )
    assert register(f"{URI_A}105/") == (dataset_id, "v105")
    assert workspace.count("CreateDatasetVersion") == 0


def test_transient_faults_are_retried_without_duplicates(workspace):
    workspace.faults = FaultPlan(unavailable_rate=0.3, throttle_rate=0.2, seed=7)
    dataset_id, _ = register(URI_A)
    assert register(URI_B) == (dataset_id, "v2")
    assert workspace.faults_injected > 0
    assert len(workspace.datasets) == 1 and len(workspace.datasets[dataset_id].versions) == 2


def test_creates_whose_answers_were_lost_are_not_repeated(workspace):
    """The service made the dataset / version but answered 503: the retry finds it, makes no other."""
    workspace.lose_answer_after_commit("CreateDataset")
    dataset_id, version = register(URI_A)
    assert version == "v1"
    assert workspace.count("CreateDataset") == 1 and len(workspace.datasets) == 1
    workspace.lose_answer_after_commit("CreateDatasetVersion", times=2)
    assert register(URI_B) == (dataset_id, "v2")
    assert workspace.count("CreateDatasetVersion") == 1
    assert [v.uri for v in workspace.datasets[dataset_id].versions] == [URI_A, URI_B]


def test_a_concurrent_create_of_the_same_dataset_is_adopted(workspace, monkeypatch):
    """Another run creates the dataset between our look-up and our create: its refusal is not an error."""
    real_find = AIWorkspaceHook.find_dataset
    calls = []

    def find_then_race(*args: object) -> str | None:
        calls.append(args)
        if len(calls) == 1:
            register_dataset_version(
                AIWorkspaceHook(),
                workspace_id=WS,
                name="cifar10",
                version_uri=URI_A,
                data_source_type="BMCPFS",
                provider_type="Lingjun",
                mount_path="/mnt/data/cifar10/",
                version_description="the other run",
            )
            return None
        return real_find(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(AIWorkspaceHook, "find_dataset", find_then_race)
    _, version = register(URI_A)
    assert (version, len(workspace.datasets)) == ("v1", 1)
    assert workspace.requests_for("CreateDataset")[-1].status == 409


def test_api_errors_surface_as_alibaba_cloud_api_errors(workspace):
    register(URI_A)  # a BMCPFS dataset
    with pytest.raises(AlibabaCloudApiError) as caught:
        register("oss://bucket.oss-cn-wulanchabu.aliyuncs.com/x/", data_source_type="OSS")
    assert caught.value.code == "InvalidParameter" and "DataSourceType" in str(caught.value)
    workspace.deny("ListDatasets")
    with pytest.raises(AlibabaCloudApiError) as caught:
        register(URI_A)
    assert caught.value.code == "Forbidden.RAM"


def test_dataset_uri_builds_both_documented_cpfs_forms():
    cpfs = {"file_system_id": "cpfs-0123abcd", "protocol_service_id": "ptc-45ef", "export_id": "exp-67ab"}
    assert dataset_uri("cpfs", region="cn-wulanchabu", path="/datasets/cifar10/2026-11-22", **cpfs) == (
        "cpfs://cpfs-0123abcd.cn-wulanchabu/ptc-45ef/exp-67ab/datasets/cifar10/2026-11-22/"
    )
    assert dataset_uri("cpfs", region="cn-wulanchabu", path="/", **cpfs) == (
        "cpfs://cpfs-0123abcd.cn-wulanchabu/ptc-45ef/exp-67ab/"
    )


def test_a_lingjun_cpfs_uri_names_the_mount_target_domain_verbatim():
    uri = dataset_uri(
        "bmcpfs",
        file_system_id="bmcpfs-0015abcd",
        region="cn-wulanchabu",
        path="datasets/x/",
        mount_target=MOUNT_TARGET,
    )

    assert uri == f"bmcpfs://{MOUNT_TARGET}/datasets/x/"


@pytest.mark.parametrize(
    ("kind", "arguments", "field"),
    [
        ("s3", {}, "dataset_uri_kind"),
        ("bmcpfs", {}, "staging.mount_target"),
        ("bmcpfs", {"mount_target": "mt1"}, "staging.mount_target"),
        ("bmcpfs", {"mount_target": MOUNT_TARGET, "path": "/a/../b/"}, "path"),
        ("cpfs", {"region": ""}, "region"),
        ("cpfs", {"protocol_service_id": None}, "staging.protocol_service_id"),
        ("cpfs", {"export_id": "exp/1"}, "staging.export_id"),
    ],
)
def test_dataset_uri_names_the_bad_field(kind, arguments, field):
    values = {
        "file_system_id": "cpfs-0015abcd",
        "region": "cn-wulanchabu",
        "path": "/d/",
        "protocol_service_id": "ptc-1",
        "export_id": "exp-1",
        **arguments,
    }
    with pytest.raises(SpecError, match=rf"^{field}: .*\(fix: "):
        dataset_uri(kind, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("source_type", "uri"),
    [
        ("BMCPFS", "bmcpfs://bmcpfs-0015abcd/datasets/x/"),
        ("BMCPFS", "nas://bmcpfs-0015abcd.cn-wulanchabu/datasets/x/"),
        ("CPFS", "nas://cpfs-0123abcd.cn-wulanchabu/datasets/x/"),
        ("CPFS", "cpfs://cpfs-0123abcd.cn-wulanchabu/datasets/x/"),
    ],
)
def test_the_emulator_refuses_cpfs_uris_not_of_the_documented_forms(workspace, source_type, uri):
    with pytest.raises(AlibabaCloudApiError) as refused:
        register(uri, data_source_type=source_type)

    assert refused.value.code == "InvalidParameter" and "Uri" in str(refused.value)
    assert workspace.datasets == {}
