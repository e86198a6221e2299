"""The DLC backend sends what PAI-DLC documents, and reads its answers as documented.

Each test drives the real backend through the SDK against the DLC emulator (and the VPC emulator
where the backend reads the VPC), and asserts the request the platform received or what the user
sees: UserVpc's ExtendedCIDRs, OSS mounts with the bucket's endpoint, elastic PyTorch as
PyTorchJob + ElasticSpec, a shell-quoted working directory, ListJobs searched from the run's
start and paged, and a log tail that is the log's real end under GetPodLogs' documented paging.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc_models

from aliyun_training.backends.base import FoundJob, JobHandle
from aliyun_training.backends.dlc.logs import POD_LOGS_MAX_LINES, TAIL_MAX_REQUESTS
from aliyun_training.backends.dlc.request import create_job_request
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.validation import SpecError
from fakes.base import ManualClock
from fakes.cloud import REGION, dlc_backend, dlc_job, use_alibaba_connection
from fakes.dlc import DlcEmulator, JobScript
from fakes.network import NetworkEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

    from aliyun_training.backends.dlc.backend import DlcBackend

AK, SK = "LTAI-dlc-fidelity", "dlc-fidelity-secret"
DAY = 24 * 3600.0


@pytest.fixture
def dlc() -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        yield emulator
        assert emulator.internal_errors == []


@pytest.fixture
def network() -> Iterator[NetworkEmulator]:
    with NetworkEmulator({AK: SK}) as emulator:
        emulator.standard()  # vpc-test 172.16.0.0/12, vsw-test, sg-test
        yield emulator


@pytest.fixture
def connected(dlc: DlcEmulator, network: NetworkEmulator, monkeypatch: pytest.MonkeyPatch) -> DlcEmulator:
    use_alibaba_connection(monkeypatch, {"dlc": dlc.endpoint, "vpc": network.endpoint}, AK, SK)
    return dlc


def job_spec(**fields: Any) -> TrainingJobSpec:
    return TrainingJobSpec.parse(dlc_job(command="torchrun train.py", **fields))


def submitted_body(dlc: DlcEmulator, backend: DlcBackend, spec: TrainingJobSpec, name: str) -> dict[str, Any]:
    backend.submit(spec, name)
    return dlc.requests_for("CreateJob")[-1].body


# -- UserVpc.ExtendedCIDRs ---------------------------------------------------------------------------

VPC = {"vpc_id": "vpc-test", "switch_id": "vsw-test", "security_group_id": "sg-test"}


def test_without_extended_cidrs_the_vpcs_cidr_blocks_are_read_once_and_sent_with_the_vswitch(
    connected: DlcEmulator, network: NetworkEmulator
) -> None:
    backend = dlc_backend(workspace_id="ws-1", vpc={**VPC, "extended_cidrs": []})

    first = submitted_body(connected, backend, job_spec(), "vpc-a")
    second = submitted_body(connected, backend, job_spec(), "vpc-b")

    expected = {
        "VpcId": "vpc-test",
        "SwitchId": "vsw-test",
        "SecurityGroupId": "sg-test",
        "ExtendedCIDRs": ["172.16.0.0/12"],
    }
    assert first["UserVpc"] == second["UserVpc"] == expected
    assert network.count("DescribeVpcs") == 1, "the VPC is read once per backend"


@pytest.mark.slow
def test_secondary_and_user_cidr_blocks_of_the_vpc_are_sent_too(
    connected: DlcEmulator, network: NetworkEmulator
) -> None:
    network.add_vpc(
        "vpc-wide", "192.168.0.0/16", secondary_cidrs=("10.8.0.0/16",), user_cidrs=("100.64.0.0/10",)
    )
    backend = dlc_backend(vpc={**VPC, "vpc_id": "vpc-wide"})

    body = submitted_body(connected, backend, job_spec(), "vpc-wide")

    assert body["UserVpc"]["ExtendedCIDRs"] == ["192.168.0.0/16", "10.8.0.0/16", "100.64.0.0/10"]


def test_extended_cidrs_from_the_environment_are_sent_as_given_without_reading_the_vpc(
    connected: DlcEmulator, network: NetworkEmulator
) -> None:
    backend = dlc_backend(vpc={**VPC, "extended_cidrs": ["10.0.0.0/8", "192.168.0.0/16"]})

    body = submitted_body(connected, backend, job_spec(), "vpc-given")

    assert body["UserVpc"]["ExtendedCIDRs"] == ["10.0.0.0/8", "192.168.0.0/16"]
    assert network.count("DescribeVpcs") == 0


def test_a_vpc_without_cidr_blocks_fails_naming_extended_cidrs_before_anything_is_submitted(
    connected: DlcEmulator,
) -> None:
    backend = dlc_backend(vpc={**VPC, "vpc_id": "vpc-elsewhere"})

    with pytest.raises(SpecError) as failure:
        backend.submit(job_spec(), "vpc-missing")

    message = str(failure.value)
    assert message.startswith("vpc.extended_cidrs: DescribeVpcs reports no CIDR block for VPC vpc-elsewhere")
    assert 'list them in the environment file\'s vpc.extended_cidrs, e.g. ["192.168.0.0/16"]' in message
    assert connected.count("CreateJob") == 0


def test_submit_sends_exactly_the_request_the_pure_builder_makes(
    connected: DlcEmulator, network: NetworkEmulator
) -> None:
    """The dry run shows ``create_job_request``; submit reads the VPC's blocks, then sends that body."""
    spec = job_spec(datasets=[{"uri": "oss://pai-training/cifar10/v1/", "mount_path": "/mnt/data"}])
    backend = dlc_backend(workspace_id="ws-1", vpc={**VPC, "extended_cidrs": []})

    sent = submitted_body(connected, backend, spec, "built")

    built = create_job_request(
        spec,
        "built",
        job_settings=backend.job_settings,
        workspace_id="ws-1",
        region=REGION,
        vpc=VPC,
        extended_cidrs=["172.16.0.0/12"],
        image_config=None,
    )
    assert sent == _as_sent(built.to_map())
    assert network.count("DescribeVpcs") == 1


def _as_sent(body: dict[str, Any]) -> dict[str, Any]:
    """A request's ``to_map()`` as CreateJob sends it: the client sends each top-level field only
    when it is set, where ``to_map`` writes an unset list of models as ``[]``."""
    return {key: value for key, value in body.items() if value != []}


# -- DataSources: OSS with the bucket's endpoint -----------------------------------------------------


def test_a_bare_oss_mount_is_sent_with_the_buckets_internal_endpoint_and_an_endpoint_is_kept(
    connected: DlcEmulator,
) -> None:
    spec = job_spec(
        datasets=[
            {"uri": "oss://pai-training/outputs/cifar10", "mount_path": "/mnt/output", "read_only": False},
            {"uri": "oss://data.oss-cn-shanghai-internal.aliyuncs.com/cifar10/v1/", "mount_path": "/mnt/d"},
        ]
    )

    regional = submitted_body(connected, dlc_backend(), spec, "oss-mounts")
    elsewhere = submitted_body(connected, dlc_backend(region="cn-beijing"), spec, "oss-mounts-bj")

    assert [s["Uri"] for s in regional["DataSources"]] == [
        "oss://pai-training.oss-cn-wulanchabu-internal.aliyuncs.com/outputs/cifar10/",
        "oss://data.oss-cn-shanghai-internal.aliyuncs.com/cifar10/v1/",
    ]
    assert regional["DataSources"][0]["MountAccess"] == "RW"
    assert elsewhere["DataSources"][0]["Uri"] == (
        "oss://pai-training.oss-cn-beijing-internal.aliyuncs.com/outputs/cifar10/"
    )


# -- framework and command ---------------------------------------------------------------------------


def test_elastic_pytorch_is_a_pytorch_job_with_elastic_spec_between_min_and_max_nodes(
    connected: DlcEmulator,
) -> None:
    spec = job_spec(framework="elastic", nodes=2, min_nodes=1, max_nodes=4)

    body = submitted_body(connected, dlc_backend(), spec, "elastic")

    assert body["JobType"] == "PyTorchJob"
    assert [(s["Type"], s["PodCount"]) for s in body["JobSpecs"]] == [("Master", 1), ("Worker", 1)]
    assert body["ElasticSpec"] == {"EnableElasticTraining": True, "MinParallelism": 1, "MaxParallelism": 4}


def test_the_working_directory_reaches_the_shell_quoted(connected: DlcEmulator) -> None:
    spec = job_spec(working_dir="/mnt/code dir;touch /tmp/owned")

    body = submitted_body(connected, dlc_backend(), spec, "quoted")

    assert body["UserCommand"] == "cd '/mnt/code dir;touch /tmp/owned' && torchrun train.py"


# -- find: ListJobs from the run's start, every page ---------------------------------------------------


def test_a_job_created_8_days_ago_is_found_from_the_runs_start_though_listjobs_defaults_to_7_days(
    connected: DlcEmulator,
) -> None:
    clock = ManualClock(start=time.time() - 8 * DAY)
    connected.clock = clock
    backend = dlc_backend(workspace_id="ws-1")
    created = backend.submit(job_spec(), "long-queued")
    clock.now = time.time()

    default_window = backend.hook.conn.list_jobs(dlc_models.ListJobsRequest(display_name="long-queued"))
    since = datetime.now(UTC) - timedelta(days=9)
    found = backend.find("long-queued", since=since)
    found_without_since = backend.find("long-queued")

    assert default_window.body.total_count == 0, "without StartTime ListJobs searches the last 7 days"
    assert found == found_without_since == FoundJob(handle=created, owner=None)
    since_query, horizon_query = (r.query for r in connected.requests_for("ListJobs")[1:])
    assert since_query["StartTime"] == since.strftime("%Y-%m-%dT%H:%M:%SZ"), "the run's start, to the second"
    assert datetime.fromisoformat(horizon_query["StartTime"]) < datetime.now(UTC) - timedelta(days=30)


@pytest.mark.slow
def test_find_pages_past_a_full_page_of_fuzzy_matches_to_the_exact_name(connected: DlcEmulator) -> None:
    clock = ManualClock()
    connected.clock = clock
    backend = dlc_backend(workspace_id="ws-1")
    exact = backend.submit(job_spec(), "nightly")
    for index in range(100):  # newer jobs whose names contain "nightly": page 1 holds only them
        clock.advance(1)
        backend.hook.conn.create_job(backend.create_request(job_spec(), f"nightly-{index}"))

    found = backend.find("nightly", since=datetime.now(UTC) - timedelta(hours=1))

    assert found is not None and found.handle == exact
    pages = [(r.query["PageNumber"], r.query["PageSize"]) for r in connected.requests_for("ListJobs")]
    assert pages == [("1", "100"), ("2", "100")]


# -- the log tail ------------------------------------------------------------------------------------


def finished_job(dlc: DlcEmulator, lines: list[str], running_seconds: float) -> tuple[DlcBackend, JobHandle]:
    """A job that logged ``lines`` over ``running_seconds`` and failed, as GetJob last reported it."""
    clock = ManualClock()
    dlc.clock = clock
    dlc.default_script = JobScript(
        phases=[("Creating", 1.0), ("Running", running_seconds)], final="Failed", log_lines=lines
    )
    backend = dlc_backend()
    handle = backend.submit(job_spec(), "tail")
    clock.advance(running_seconds + 60)
    assert backend.status(handle).raw == "Failed"
    return backend, handle


@pytest.mark.slow
@pytest.mark.parametrize("wanted", [50, 1500])  # 1500: windows alternate too wide / too narrow
def test_the_tail_of_a_log_much_longer_than_max_lines_is_its_real_end(
    connected: DlcEmulator, wanted: int
) -> None:
    lines = [f"step {i}" for i in range(100_000)]  # 100 lines a second: a first window holds too many
    backend, handle = finished_job(connected, lines, running_seconds=1000.0)

    tail = backend.tail(handle, 0, wanted)
    requests = connected.count("GetPodLogs")
    atail = asyncio.run(backend.atail(handle, 0, wanted))

    assert len(lines) > 40 * POD_LOGS_MAX_LINES
    assert tail == atail == lines[-wanted:]
    assert 2 <= requests <= TAIL_MAX_REQUESTS, "one window was too wide, and the search is bounded"
    assert all("StartTime" in r.query for r in connected.requests_for("GetPodLogs"))


def test_the_tail_of_a_sparse_log_widens_its_window_until_it_holds_the_lines_asked_for(
    connected: DlcEmulator,
) -> None:
    lines = [f"checkpoint {i}" for i in range(40)]  # one line every 15 minutes for 10 hours
    backend, handle = finished_job(connected, lines, running_seconds=36_000.0)

    tail = backend.tail(handle, 0, 10)

    assert tail == lines[-10:]
    assert 2 <= connected.count("GetPodLogs") <= TAIL_MAX_REQUESTS


def test_streamed_logs_read_forwards_from_the_jobs_start_each_line_once(connected: DlcEmulator) -> None:
    lines = [f"epoch {i}" for i in range(30)]
    clock = ManualClock()
    connected.clock = clock
    connected.default_script = JobScript(phases=[("Creating", 1.0), ("Running", 30.0)], log_lines=lines)
    backend = dlc_backend(log_lines_per_poll=500)
    handle = backend.submit(job_spec(), "stream")
    seen: list[str] = []
    cursor: dict[str, Any] | None = None
    for _ in range(4):
        clock.advance(10)
        backend.status(handle)
        chunk = backend.logs(handle, cursor)
        seen += chunk.lines
        cursor = chunk.cursor

    assert node_lines(seen, 0) == node_lines(seen, 1) == lines, "every node's lines, each once"
    assert seen[0] == "[node-0] epoch 0" and seen.index("[node-1] epoch 0") > seen.index(
        "[node-0] epoch 1"
    ), "a poll's lines go node by node, the master first"
    assert all("StartTime" in r.query for r in connected.requests_for("GetPodLogs"))


def node_lines(lines: list[str], node: int) -> list[str]:
    """The lines of one node in a task log's stream, without their prefix."""
    prefix = f"[node-{node}] "
    return [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]


def test_logs_and_tail_need_no_earlier_status_on_the_same_backend(connected: DlcEmulator) -> None:
    """Each read stands alone: a backend rebuilt for every call (as a retried task or a new trigger
    has) looks the job's pods and times up itself, sync and async alike."""
    lines = [f"epoch {i}" for i in range(30)]
    clock = ManualClock()
    connected.clock = clock
    connected.default_script = JobScript(
        phases=[("Creating", 1.0), ("Running", 30.0)], final="Failed", log_lines=lines
    )
    handle = dlc_backend().submit(job_spec(), "fresh")
    clock.advance(31.0 + 60)

    chunk = dlc_backend().logs(handle)
    achunk = asyncio.run(dlc_backend().alogs(handle))
    tail = dlc_backend().tail(handle, 0, 5)
    atail = asyncio.run(dlc_backend().atail(handle, 0, 5))

    assert chunk.lines == achunk.lines
    assert node_lines(chunk.lines, 0) == node_lines(chunk.lines, 1) == lines
    assert [pod["recent"][-1] for pod in chunk.cursor["pods"].values()] == ["epoch 29", "epoch 29"]
    assert tail == atail == lines[-5:]
    assert connected.count("GetJob") == 4, "each fresh backend read the job once"
    assert dlc_backend().tail(handle, 5, 5) == [], "a node the job does not have has no lines"


def test_a_log_read_right_after_a_status_reuses_what_the_status_read(connected: DlcEmulator) -> None:
    clock = ManualClock()
    connected.clock = clock
    connected.default_script = JobScript(
        phases=[("Creating", 1.0), ("Running", 40.0)], log_lines=["a", "b", "c", "d"]
    )  # lines at 11, 21, 31 and 41 s
    backend = dlc_backend()
    handle = backend.submit(job_spec(), "reuse")
    clock.advance(25)

    backend.status(handle)
    lines = backend.logs(handle).lines

    assert lines == ["[node-0] a", "[node-0] b", "[node-1] a", "[node-1] b"]
    assert connected.count("GetJob") == 1, "the monitor's poll (status, then logs) reads the job once"


# -- failure evidence ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_failure_shows_the_newest_events_of_a_job_with_many(connected: DlcEmulator) -> None:
    connected.default_script = JobScript(
        phases=[("Creating", 0.05)], final="Failed", events=[f"event {i}" for i in range(1, 31)]
    )
    backend = dlc_backend()
    handle = backend.submit(job_spec(), "events")

    details = backend.failure_details(handle)

    assert details == [f"event: event {i}" for i in range(11, 31)]
