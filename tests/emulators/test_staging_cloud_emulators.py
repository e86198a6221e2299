"""The AIWorkspace (PAI datasets) and NAS (CPFS data flow) emulators, driven through the real SDK clients.

Every answer must also pass the SDK response model's round trip (else the emulator records an
internal error, checked after each test), so what is asserted here is what production code sees.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from alibabacloud_aiworkspace20210204 import models as ws_models
from alibabacloud_aiworkspace20210204.client import Client as WorkspaceClient
from alibabacloud_nas20170626 import models as nas_models
from alibabacloud_nas20170626.client import Client as NasClient
from alibabacloud_tea_openapi import utils_models
from alibabacloud_tea_openapi.exceptions import ClientException, ServerException
from alibabacloud_tea_openapi.utils_models import Config
from darabonba.runtime import RuntimeOptions

from fakes.aiworkspace import AIWorkspaceEmulator
from fakes.base import FaultPlan, ManualClock
from fakes.nas import NasDataFlowEmulator

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

AK, SK = "test-ak", "test-sk"
REGION = "cn-wulanchabu"
WS = "ws-1"
FS = "bmcpfs-0015abcd"
DF = "df-194433a5be310001"
#: A Lingjun CPFS Uri: the mount target's domain, then the path (see the AIWorkspace emulator).
MOUNT_TARGET = "cpfs-0015abcd-vpc-9x8y.cn-wulanchabu.cpfs.aliyuncs.com"
URI1 = f"bmcpfs://{MOUNT_TARGET}/datasets/cifar10/v1/"
URI2 = f"bmcpfs://{MOUNT_TARGET}/datasets/cifar10/v2/"


def _config(endpoint: str) -> Config:
    return Config(
        access_key_id=AK, access_key_secret=SK, endpoint=endpoint, protocol="http", region_id=REGION
    )


def _client_error(call: Callable[[], Any]) -> ClientException:
    with pytest.raises(ClientException) as caught:
        call()
    return caught.value


# ------------------------------------------------------------------------------------ AIWorkspace


@pytest.fixture
def workspace() -> Iterator[AIWorkspaceEmulator]:
    with AIWorkspaceEmulator({AK: SK}) as emulator:
        emulator.clock = ManualClock(1_800_000_000.0)
        yield emulator
        assert emulator.internal_errors == []


@pytest.fixture
def ws_client(workspace: AIWorkspaceEmulator) -> WorkspaceClient:
    return WorkspaceClient(_config(workspace.endpoint))


def _create(client: WorkspaceClient, name: str = "cifar10", uri: str = URI1, **extra: Any) -> str:
    request = ws_models.CreateDatasetRequest(
        workspace_id=WS,
        name=name,
        data_source_type="BMCPFS",
        property="DIRECTORY",
        uri=uri,
        options=json.dumps({"mountPath": "/mnt/data/"}),
        provider_type="Lingjun",
        **extra,
    )
    return client.create_dataset(request).body.dataset_id


def test_create_dataset_makes_version_v1_from_its_uri(ws_client, workspace):
    dataset_id = _create(
        ws_client,
        version_description="first",
        labels=[ws_models.Label(key="team", value="vision")],
    )
    assert dataset_id.startswith("d-") and len(dataset_id) == 20
    dataset = ws_client.get_dataset(dataset_id, ws_models.GetDatasetRequest()).body
    assert (dataset.name, dataset.workspace_id, dataset.uri, dataset.property) == (
        "cifar10",
        WS,
        URI1,
        "DIRECTORY",
    )
    assert (dataset.data_source_type, dataset.provider_type) == ("BMCPFS", "Lingjun")
    assert json.loads(dataset.options) == {"mountPath": "/mnt/data/"}
    assert [(label.key, label.value) for label in dataset.labels] == [("team", "vision")]
    assert dataset.latest_version.version_name == "v1"
    assert dataset.gmt_create_time.endswith(".000Z")
    version = ws_client.get_dataset_version(dataset_id, "v1", ws_models.GetDatasetVersionRequest()).body
    assert (version.uri, version.description, version.dataset_id) == (URI1, "first", dataset_id)
    assert workspace.requests_for("CreateDataset")[0].path == "/api/v1/datasets"


def test_versions_are_named_in_order_and_listed_with_paging(ws_client):
    dataset_id = _create(ws_client)
    names = [
        ws_client.create_dataset_version(
            dataset_id,
            ws_models.CreateDatasetVersionRequest(
                data_source_type="BMCPFS", property="DIRECTORY", uri=f"{URI1}{n}/", description=f"d{n}"
            ),
        ).body.version_name
        for n in range(2, 5)
    ]
    assert names == ["v2", "v3", "v4"]
    page = ws_client.list_dataset_versions(
        dataset_id, ws_models.ListDatasetVersionsRequest(page_number=2, page_size=3)
    ).body
    assert (page.total_count, page.page_number, page.page_size) == (4, 2, 3)
    assert [v.version_name for v in page.dataset_versions] == ["v4"]
    newest = ws_client.list_dataset_versions(
        dataset_id, ws_models.ListDatasetVersionsRequest(page_number=1, page_size=1, order="DESC")
    ).body
    assert newest.dataset_versions[0].uri == f"{URI1}4/"
    latest = ws_client.get_dataset(dataset_id, ws_models.GetDatasetRequest()).body.latest_version
    assert latest.version_name == "v4"


def test_list_versions_needs_its_documented_paging_parameters(ws_client):
    dataset_id = _create(ws_client)
    error = _client_error(
        lambda: ws_client.list_dataset_versions(dataset_id, ws_models.ListDatasetVersionsRequest())
    )
    assert (error.status_code, error.code) == (400, "MissingParameter")


def test_list_datasets_filters_fuzzy_names_workspaces_and_types(ws_client):
    _create(ws_client, name="cifar10")
    _create(ws_client, name="cifar100")
    ws_client.create_dataset(
        ws_models.CreateDatasetRequest(
            workspace_id=WS,
            name="imagenet",
            data_source_type="OSS",
            property="DIRECTORY",
            uri="oss://b.ep/x/",
        )
    )
    ws_client.create_dataset(
        ws_models.CreateDatasetRequest(
            workspace_id="ws-2",
            name="cifar10",
            data_source_type="OSS",
            property="DIRECTORY",
            uri="oss://b.ep/y/",
        )
    )

    def names(**query: Any) -> tuple[list[str], int]:
        body = ws_client.list_datasets(ws_models.ListDatasetsRequest(workspace_id=WS, **query)).body
        return [d.name for d in body.datasets], body.total_count

    assert names(name="cifar10") == (["cifar10", "cifar100"], 2)  # Name is a fuzzy match
    assert names(data_source_types="OSS") == (["imagenet"], 1)
    assert names(data_source_types="OSS,BMCPFS", page_size=2, page_number=2) == (["imagenet"], 3)
    other = ws_client.list_datasets(ws_models.ListDatasetsRequest(workspace_id="ws-2")).body
    assert [d.uri for d in other.datasets] == ["oss://b.ep/y/"]


def test_duplicate_dataset_name_in_a_workspace_is_refused(ws_client, workspace):
    _create(ws_client)
    error = _client_error(lambda: _create(ws_client, uri=URI2))
    assert (error.status_code, error.code) == (409, "DatasetNameAlreadyExists")
    assert len(workspace.datasets) == 1


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"name": "_bad"}, "InvalidParameter"),
        ({"data_source_type": "S3"}, "InvalidParameter"),
        ({"property": "FOLDER"}, "InvalidParameter"),
        ({"uri": "oss://bucket/x/"}, "InvalidParameter"),  # not a CPFS Uri
        ({"options": "not json"}, "InvalidParameter"),
        ({"uri": None}, "MissingParameter"),
    ],
)
def test_create_dataset_validates_like_the_sdk_docstrings(ws_client, change, code):
    fields = {
        "workspace_id": WS,
        "name": "cifar10",
        "data_source_type": "BMCPFS",
        "property": "DIRECTORY",
        "uri": URI1,
        **change,
    }
    error = _client_error(lambda: ws_client.create_dataset(ws_models.CreateDatasetRequest(**fields)))
    assert (error.status_code, error.code) == (400, code)


def test_version_must_have_the_dataset_data_source_type(ws_client):
    dataset_id = _create(ws_client)
    request = ws_models.CreateDatasetVersionRequest(
        data_source_type="OSS", property="DIRECTORY", uri="oss://b.e/x/"
    )
    error = _client_error(lambda: ws_client.create_dataset_version(dataset_id, request))
    assert error.code == "InvalidParameter" and "DataSourceType" in error.message


def test_unknown_dataset_and_version_are_not_found(ws_client):
    error = _client_error(lambda: ws_client.get_dataset("d-missing", ws_models.GetDatasetRequest()))
    assert (error.status_code, error.code) == (404, "DatasetNotFound")
    dataset_id = _create(ws_client)
    error = _client_error(
        lambda: ws_client.get_dataset_version(dataset_id, "v9", ws_models.GetDatasetVersionRequest())
    )
    assert (error.status_code, error.code) == (404, "DatasetVersionNotFound")


def test_dry_run_creates_nothing(ws_client, workspace):
    assert _create(ws_client, dry_run=True) is None
    assert workspace.datasets == {}


def test_unknown_body_fields_are_refused(ws_client, workspace):
    """A body the SDK model could not have produced is refused, whichever client sent it."""
    params = utils_models.Params(
        action="CreateDataset",
        version="2021-02-04",
        protocol="HTTP",
        pathname="/api/v1/datasets",
        method="POST",
        auth_type="AK",
        style="ROA",
        req_body_type="json",
        body_type="json",
    )
    body = {"Name": "x", "DataSourceType": "OSS", "Property": "FILE", "Uri": "oss://b.e/x", "Colour": "red"}
    request = utils_models.OpenApiRequest(body=body)
    error = _client_error(lambda: ws_client.call_api(params, request, RuntimeOptions()))
    assert error.code == "InvalidParameter" and "Colour" in error.message
    assert workspace.datasets == {}


def test_ram_denial_and_faults(ws_client, workspace):
    workspace.deny("CreateDataset")
    error = _client_error(lambda: _create(ws_client))
    assert (error.status_code, error.code) == (403, "Forbidden.RAM")
    workspace.allow("CreateDataset")
    workspace.faults = FaultPlan(unavailable_rate=1.0, actions=frozenset({"ListDatasets"}))
    with pytest.raises(ServerException):
        ws_client.list_datasets(ws_models.ListDatasetsRequest(workspace_id=WS))


# ------------------------------------------------------------------------------------ NAS data flows


class ObjectStore:
    """bucket -> key -> bytes, read the way the emulator's ``read_source`` wants."""

    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, bytes]] = {}

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.buckets.setdefault(bucket, {})[key] = data

    def read(self, bucket: str, prefix: str) -> dict[str, bytes]:
        if bucket not in self.buckets:
            raise KeyError(f"NoSuchBucket: {bucket}")
        return {k[len(prefix) :]: v for k, v in self.buckets[bucket].items() if k.startswith(prefix)}


@pytest.fixture
def store() -> ObjectStore:
    store = ObjectStore()
    store.put("train-data", "cifar10/2026-11-22/train/a.bin", b"a" * 100)
    store.put("train-data", "cifar10/2026-11-22/train/b.bin", b"b" * 300)
    store.put("train-data", "cifar10/2026-11-22/meta.json", b"{}")
    store.put("train-data", "cifar10/2026-11-29/meta.json", b"{}")
    return store


@pytest.fixture
def nas(tmp_path: Path, store: ObjectStore) -> Iterator[NasDataFlowEmulator]:
    root = tmp_path / "cpfs"
    root.mkdir()
    with NasDataFlowEmulator(root, store.read, {AK: SK}, pending_seconds=2, task_seconds=10) as emulator:
        emulator.clock = ManualClock(1_800_000_000.0)
        emulator.add_data_flow(FS, DF, file_system_path="/fset/", source_storage="oss://train-data/cifar10/")
        yield emulator
        assert emulator.internal_errors == []


@pytest.fixture
def nas_client(nas: NasDataFlowEmulator) -> NasClient:
    return NasClient(_config(nas.endpoint))


def _import(client: NasClient, **overrides: Any) -> str:
    fields = {
        "file_system_id": FS,
        "data_flow_id": DF,
        "task_action": "Import",
        "data_type": "MetaAndData",
        "directory": "/2026-11-22/",
        "dst_directory": "/staged/2026-11-22/",
        "conflict_policy": "OVERWRITE_EXISTING",
        "create_dir_if_not_exist": True,
        **overrides,
    }
    return client.create_data_flow_task(nas_models.CreateDataFlowTaskRequest(**fields)).body.task_id


def _task(client: NasClient, task_id: str) -> Any:
    request = nas_models.DescribeDataFlowTasksRequest(
        file_system_id=FS,
        filters=[nas_models.DescribeDataFlowTasksRequestFilters(key="TaskIds", value=task_id)],
    )
    (task,) = client.describe_data_flow_tasks(request).body.task_info.task
    return task


def test_describe_data_flows_reports_the_flow_and_filters_by_id(nas_client, nas):
    nas.add_data_flow(FS, "df-other", status="Stopped")
    request = nas_models.DescribeDataFlowsRequest(
        file_system_id=FS, filters=[nas_models.DescribeDataFlowsRequestFilters(key="DataFlowIds", value=DF)]
    )
    (flow,) = nas_client.describe_data_flows(request).body.data_flow_info.data_flow
    assert (flow.data_flow_id, flow.status, flow.file_system_path) == (DF, "Running", "/fset/")
    assert (flow.source_storage, flow.source_storage_path) == ("oss://train-data", "/cifar10/")
    every = nas_client.describe_data_flows(nas_models.DescribeDataFlowsRequest(file_system_id=FS)).body
    assert sorted(f.data_flow_id for f in every.data_flow_info.data_flow) == sorted([DF, "df-other"])
    query = nas.requests_for("DescribeDataFlows")[0].query
    assert query["Filters.1.Key"] == "DataFlowIds" and query["FileSystemId"] == FS


def test_unknown_file_system_is_not_found(nas_client):
    request = nas_models.DescribeDataFlowsRequest(file_system_id="bmcpfs-nope")
    error = _client_error(lambda: nas_client.describe_data_flows(request))
    assert (error.status_code, error.code) == (404, "InvalidFileSystem.NotFound")


def test_import_task_runs_pending_executing_completed_and_writes_files(nas_client, nas):
    task_id = _import(nas_client)
    assert task_id.startswith("task-")
    pending = _task(nas_client, task_id)
    assert (pending.status, pending.progress_stats.files_total, pending.filesystem_id) == ("Pending", 0, FS)
    nas.clock.advance(2 + 5)
    running = _task(nas_client, task_id)
    assert running.status == "Executing"
    stats = running.progress_stats
    assert (stats.files_total, stats.bytes_total, stats.files_done, stats.bytes_done) == (3, 402, 1, 201)
    assert (stats.remain_time, stats.average_speed) == (5, 40)
    assert not (nas.filesystem_root / "fset" / "staged").exists()
    nas.clock.advance(5)
    done = _task(nas_client, task_id)
    assert (done.status, done.progress) == ("Completed", 100)
    assert (done.progress_stats.files_done, done.progress_stats.actual_files) == (3, 3)
    assert (done.progress_stats.actual_bytes, done.progress_stats.remain_time) == (402, 0)
    assert done.end_time and done.start_time and not done.error_msg
    staged = nas.filesystem_root / "fset" / "staged" / "2026-11-22"
    assert (staged / "train" / "b.bin").read_bytes() == b"b" * 300
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == [
        "meta.json",
        "train/a.bin",
        "train/b.bin",
    ]


def test_client_token_makes_create_idempotent(nas_client, nas):
    first = _import(nas_client, client_token="stage-run-1")
    assert _import(nas_client, client_token="stage-run-1") == first
    assert len(nas.tasks) == 1
    error = _client_error(lambda: _import(nas_client, client_token="stage-run-1", directory="/2026-11-29/"))
    assert (error.status_code, error.code) == (400, "IdempotentParameterMismatch")
    assert _import(nas_client, client_token="stage-run-2") != first


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"directory": "2026-11-22/"}, "InvalidParameter.Directory"),
        ({"directory": "/2026-11-22"}, "InvalidParameter.Directory"),
        ({"dst_directory": "/a/../b/"}, "InvalidParameter.DstDirectory"),
        ({"task_action": "Copy"}, "InvalidParameter.TaskAction"),
        ({"task_action": "Evict"}, "InvalidParameter.TaskAction"),  # not on CPFS for Lingjun
        ({"data_type": "Blocks"}, "InvalidParameter.DataType"),
        ({"conflict_policy": None}, "InvalidParameter.ConflictPolicy"),  # required on Lingjun
        ({"conflict_policy": "NEWEST"}, "InvalidParameter.ConflictPolicy"),
        ({"data_flow_id": None}, "MissingDataFlowId"),
    ],
)
def test_create_task_validates_parameters(nas_client, nas, change, code):
    error = _client_error(lambda: _import(nas_client, **change))
    assert (error.status_code, error.code) == (400, code)
    assert nas.tasks == {}


def test_tasks_need_an_existing_running_data_flow(nas_client, nas):
    error = _client_error(lambda: _import(nas_client, data_flow_id="df-missing"))
    assert (error.status_code, error.code) == (404, "InvalidDataFlow.NotFound")
    nas.set_data_flow_status(FS, DF, "Stopped")
    error = _client_error(lambda: _import(nas_client))
    assert (error.status_code, error.code) == (403, "InvalidStatus.DataFlow")


def test_dry_run_checks_without_creating(nas_client, nas):
    assert _import(nas_client, dry_run=True) == ""
    assert nas.tasks == {}


def test_injected_failure_ends_failed_with_its_message(nas_client, nas):
    nas.fail_next_task("Access denied by the OSS bucket policy")
    task_id = _import(nas_client)
    nas.clock.advance(60)
    task = _task(nas_client, task_id)
    assert (task.status, task.error_msg) == ("Failed", "Access denied by the OSS bucket policy")
    assert not (nas.filesystem_root / "fset" / "staged").exists()


def test_missing_source_and_missing_destination_fail_the_task(nas_client, nas):
    empty = _import(nas_client, directory="/2030-01-01/", dst_directory="/x/")
    no_dir = _import(nas_client, create_dir_if_not_exist=None)
    nas.clock.advance(60)
    assert "has no objects" in _task(nas_client, empty).error_msg
    failed = _task(nas_client, no_dir)
    assert failed.status == "Failed" and "CreateDirIfNotExist" in failed.error_msg


def test_conflict_policies(nas_client, nas):
    target = nas.filesystem_root / "fset" / "staged" / "2026-11-22"
    target.mkdir(parents=True)
    (target / "meta.json").write_bytes(b"old")
    skip = _import(nas_client, conflict_policy="SKIP_THE_FILE")
    nas.clock.advance(60)
    assert _task(nas_client, skip).progress_stats.actual_files == 2
    assert (target / "meta.json").read_bytes() == b"old"
    overwrite = _import(nas_client, conflict_policy="OVERWRITE_EXISTING")
    nas.clock.advance(60)
    assert _task(nas_client, overwrite).progress_stats.actual_files == 3
    assert (target / "meta.json").read_bytes() == b"{}"


def test_cancel_goes_canceling_then_canceled(nas_client, nas):
    task_id = _import(nas_client)
    nas_client.cancel_data_flow_task(
        nas_models.CancelDataFlowTaskRequest(file_system_id=FS, data_flow_id=DF, task_id=task_id)
    )
    assert _task(nas_client, task_id).status == "Canceling"
    nas.clock.advance(60)
    assert _task(nas_client, task_id).status == "Canceled"
    assert not (nas.filesystem_root / "fset" / "staged").exists()
    error = _client_error(
        lambda: nas_client.cancel_data_flow_task(
            nas_models.CancelDataFlowTaskRequest(file_system_id=FS, data_flow_id=DF, task_id=task_id)
        )
    )
    assert (error.status_code, error.code) == (403, "InvalidStatus.ResourceMismatch")


def test_describe_tasks_pages_with_next_token_and_filters_status(nas_client, nas):
    ids = [_import(nas_client, client_token=f"t{n}") for n in range(12)]
    first = nas_client.describe_data_flow_tasks(
        nas_models.DescribeDataFlowTasksRequest(file_system_id=FS, max_results=10)
    ).body
    assert len(first.task_info.task) == 10 and first.next_token
    second = nas_client.describe_data_flow_tasks(
        nas_models.DescribeDataFlowTasksRequest(
            file_system_id=FS, max_results=10, next_token=first.next_token
        )
    ).body
    assert [t.task_id for t in first.task_info.task + second.task_info.task] == ids
    assert not second.next_token
    nas_client.cancel_data_flow_task(
        nas_models.CancelDataFlowTaskRequest(file_system_id=FS, data_flow_id=DF, task_id=ids[3])
    )
    canceling = nas_client.describe_data_flow_tasks(
        nas_models.DescribeDataFlowTasksRequest(
            file_system_id=FS,
            filters=[
                nas_models.DescribeDataFlowTasksRequestFilters(key="Status", value="Canceling,Canceled")
            ],
        )
    ).body
    assert [t.task_id for t in canceling.task_info.task] == [ids[3]]
    error = _client_error(
        lambda: nas_client.describe_data_flow_tasks(
            nas_models.DescribeDataFlowTasksRequest(file_system_id=FS, max_results=5)
        )
    )
    assert error.code == "InvalidParameter.MaxResults"


def test_faults_and_ram_denials_reach_the_sdk(nas_client, nas):
    nas.faults = FaultPlan(throttle_rate=1.0, actions=frozenset({"CreateDataFlowTask"}))
    error = _client_error(lambda: _import(nas_client))
    assert error.code == "Throttling.User"
    assert nas.tasks == {}
    nas.faults = FaultPlan()
    nas.deny("DescribeDataFlowTasks")
    error = _client_error(
        lambda: nas_client.describe_data_flow_tasks(
            nas_models.DescribeDataFlowTasksRequest(file_system_id=FS)
        )
    )
    assert (error.status_code, error.code) == (403, "Forbidden.RAM")
