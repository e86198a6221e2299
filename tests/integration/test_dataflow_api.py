"""CPFS data-flow calls (staging/dataflow_api.py) through NasHook against the NAS emulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from aliyun_training.hooks.nas import NasHook
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.staging.dataflow_api import (
    DataFlowInfo,
    DataFlowTaskNotFoundError,
    cancel_task,
    cancel_task_async,
    create_import_task,
    describe_task,
    describe_task_async,
    find_data_flow,
    import_task_request,
)
from aliyun_training.validation import SpecError
from fakes.base import FaultPlan, ManualClock
from fakes.cloud import use_alibaba_connection
from fakes.nas import NasDataFlowEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

AK, SK = "LTAI-dataflow-test", "dataflow-secret-value"
FS = "bmcpfs-290w65p03ok64ya"
DF = "df-194433a5be31aaaa"
VERSION = "2026-11-22"
FILES = {
    f"cifar10/{VERSION}/train/part-0.bin": b"0" * 1000,
    f"cifar10/{VERSION}/train/part-1.bin": b"1" * 3000,
    f"cifar10/{VERSION}/manifest.json": b'{"files": 2}',
}


def read_source(bucket: str, prefix: str) -> dict[str, bytes]:
    if bucket != "train-data":
        raise KeyError(f"NoSuchBucket: {bucket}")
    return {key[len(prefix) :]: data for key, data in FILES.items() if key.startswith(prefix)}


@pytest.fixture
def nas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NasDataFlowEmulator]:
    with NasDataFlowEmulator(tmp_path / "cpfs", read_source, {AK: SK}, task_seconds=20) as emulator:
        emulator.clock = ManualClock(1_800_000_000.0)
        emulator.add_data_flow(
            FS, DF, file_system_path="/datasets/", source_storage="oss://train-data/cifar10/"
        )
        use_alibaba_connection(
            monkeypatch, {"nas": emulator.endpoint}, AK, SK, retry={"max_attempts": 8, "base_delay": 0.001}
        )
        yield emulator
        assert emulator.internal_errors == []


def start_import(client_token: str = "stage-cifar10-2026-11-22") -> str:
    return create_import_task(
        NasHook(),
        file_system_id=FS,
        data_flow_id=DF,
        directory=f"/{VERSION}/",
        dst_directory=f"/cifar10/{VERSION}/",
        client_token=client_token,
    )


def test_find_data_flow_reports_where_it_maps(nas):
    nas.add_data_flow(FS, DF + "-2", status="Stopped")  # a longer id the API's partial match also finds
    info = find_data_flow(NasHook(), FS, DF)
    assert info == DataFlowInfo(
        id=DF,
        status="Running",
        file_system_path="/datasets/",
        source_storage="oss://train-data",
        source_storage_path="/cifar10/",
    )
    assert info.source_uri == "oss://train-data/cifar10/"


def test_missing_data_flow_is_a_spec_error_naming_the_field_and_fix(nas):
    with pytest.raises(SpecError, match=r"^data_flow_id: data flow df-nope does not exist on .*\(fix: "):
        find_data_flow(NasHook(), FS, "df-nope")


def test_missing_file_system_is_a_spec_error(nas):
    with pytest.raises(SpecError, match=r"^file_system_id: CPFS file system bmcpfs-nope does not exist"):
        find_data_flow(NasHook(), "bmcpfs-nope", DF)


def test_a_data_flow_that_is_not_running_is_a_spec_error(nas):
    nas.set_data_flow_status(FS, DF, "Misconfigured")
    with pytest.raises(SpecError, match=r"^data_flow_id: .* is Misconfigured, not Running: .*\(fix: "):
        find_data_flow(NasHook(), FS, DF)


def test_import_runs_to_completed_and_the_files_appear(nas):
    task_id = start_import()
    request = nas.requests_for("CreateDataFlowTask")[0].query
    assert (request["TaskAction"], request["DataType"], request["ConflictPolicy"]) == (
        "Import",
        "MetaAndData",
        "OVERWRITE_EXISTING",
    )
    assert request["CreateDirIfNotExist"].lower() == "true"  # a bmcpfs- file system
    hook = NasHook()
    assert describe_task(hook, FS, task_id).status == "Pending"
    nas.clock.advance(1 + 10)
    halfway = describe_task(hook, FS, task_id)
    assert (halfway.status, halfway.finished) == ("Executing", False)
    assert (halfway.files_total, halfway.bytes_total, halfway.bytes_done) == (3, 4012, 2006)
    assert halfway.average_speed == 200 and halfway.remain_time == 10
    nas.clock.advance(10)
    done = describe_task(hook, FS, task_id)
    assert (done.status, done.succeeded, done.finished, done.error_message) == ("Completed", True, True, "")
    assert (done.files_done, done.bytes_done) == (3, 4012)
    staged = nas.filesystem_root / "datasets" / "cifar10" / VERSION
    assert (staged / "train" / "part-1.bin").read_bytes() == b"1" * 3000
    assert (staged / "manifest.json").read_bytes() == b'{"files": 2}'


def test_the_import_sends_exactly_the_request_the_pure_builder_makes(nas):
    start_import()

    built = import_task_request(
        file_system_id=FS,
        data_flow_id=DF,
        directory=f"/{VERSION}/",
        dst_directory=f"/cifar10/{VERSION}/",
        client_token="stage-cifar10-2026-11-22",
    )
    sent = nas.requests_for("CreateDataFlowTask")[0].query
    assert {key: sent[key] for key in built.to_map()} == {
        key: str(value) for key, value in built.to_map().items()
    }


async def test_describe_task_async_twin(nas):
    task_id = start_import()
    nas.clock.advance(60)
    info = await describe_task_async(NasHook(), FS, task_id)
    assert (info.status, info.files_done) == ("Completed", 3)


def test_a_failed_task_surfaces_its_error_message(nas):
    nas.fail_next_task("OSS access denied: the data flow role cannot read oss://train-data/cifar10/")
    task_id = start_import()
    nas.clock.advance(60)
    info = describe_task(NasHook(), FS, task_id)
    assert (info.status, info.finished, info.succeeded) == ("Failed", True, False)
    assert info.error_message == "OSS access denied: the data flow role cannot read oss://train-data/cifar10/"


def test_the_same_client_token_twice_makes_one_task(nas):
    first = start_import()
    assert start_import() == first
    assert len(nas.tasks) == 1
    assert start_import("stage-cifar10-other-run") != first


@pytest.mark.slow
def test_retried_creates_under_faults_make_one_task(nas):
    nas.faults = FaultPlan(
        throttle_rate=0.4, unavailable_rate=0.3, seed=3, actions=frozenset({"CreateDataFlowTask"})
    )
    task_id = start_import()
    assert nas.faults_injected > 0
    assert list(nas.tasks) == [task_id]


def test_bad_directories_and_tokens_are_refused_before_any_call(nas):
    hook = NasHook()
    common = {"file_system_id": FS, "data_flow_id": DF, "client_token": "t"}
    with pytest.raises(SpecError, match=r"^directory: .*\(fix: "):
        create_import_task(hook, directory="2026-11-22", dst_directory="/x/", **common)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"^dst_directory: .*/\.\./"):
        create_import_task(hook, directory="/a/", dst_directory="/a/../b/", **common)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"^client_token: "):
        create_import_task(
            hook,
            file_system_id=FS,
            data_flow_id=DF,
            directory="/a/",
            dst_directory="/b/",
            client_token="x" * 65,
        )
    assert nas.count("CreateDataFlowTask") == 0


def test_api_refusals_surface_as_alibaba_cloud_api_errors(nas):
    nas.set_data_flow_status(FS, DF, "Stopped")
    with pytest.raises(AlibabaCloudApiError) as caught:
        start_import()
    assert caught.value.code == "InvalidStatus.DataFlow"


def test_cancel_stops_the_task(nas):
    task_id = start_import()
    cancel_task(NasHook(), FS, DF, task_id)
    assert describe_task(NasHook(), FS, task_id).status == "Canceling"
    nas.clock.advance(60)
    info = describe_task(NasHook(), FS, task_id)
    assert (info.status, info.finished) == ("Canceled", True)
    assert not (nas.filesystem_root / "datasets" / "cifar10").exists()


@pytest.mark.slow
async def test_cancel_task_async_twin(nas):
    task_id = start_import()
    await cancel_task_async(NasHook(), FS, DF, task_id)
    assert nas.tasks[task_id].status == "Canceling"


def test_an_unknown_task_is_a_lookup_error(nas):
    with pytest.raises(DataFlowTaskNotFoundError, match="task-0000"):
        describe_task(NasHook(), FS, "task-0000")


def test_the_data_flow_is_found_behind_a_page_of_partial_id_matches(nas):
    """The DataFlowIds filter matches parts of ids: 120 flows whose ids contain ours come first."""
    nas.data_flows.clear()
    for n in range(120):
        nas.add_data_flow(FS, f"{DF}{n:03d}", file_system_path=f"/other-{n}/", source_storage="oss://other/")
    nas.add_data_flow(FS, DF, file_system_path="/datasets/", source_storage="oss://train-data/cifar10/")

    flow = find_data_flow(NasHook(), FS, DF)

    assert (flow.id, flow.file_system_path) == (DF, "/datasets/")
    assert [
        (r.query.get("NextToken") is None, r.query["MaxResults"])
        for r in nas.requests_for("DescribeDataFlows")
    ] == [
        (True, "100"),
        (False, "100"),
    ]
