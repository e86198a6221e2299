"""The emulators speak the SDKs' language: every test drives the real Alibaba Cloud SDK clients.

If the SDK could not sign for, reach, or parse an emulator, or would raise a different exception
class than the cloud makes it raise, these tests fail; tests built on the emulators can then trust
that what passes against them is what the SDK does against the service.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc_models
from alibabacloud_pai_dlc20201203.client import Client as DlcClient
from alibabacloud_sts20150401 import models as sts_models
from alibabacloud_sts20150401.client import Client as StsClient
from alibabacloud_tea_openapi.exceptions import ClientException, ServerException
from alibabacloud_tea_openapi.utils_models import Config
from darabonba.exceptions import UnretryableException

from fakes.base import FaultPlan, ManualClock, iso_utc
from fakes.dlc import DlcEmulator, JobScript
from fakes.sts import StsEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

AK, SK = "test-ak", "test-sk"
REGION = "cn-wulanchabu"
ROLE_ARN = "acs:ram::1234567890123456:role/dlc-runner"


def _config(endpoint: str, **overrides: Any) -> Config:
    return Config(
        access_key_id=AK,
        access_key_secret=SK,
        endpoint=endpoint,
        protocol="http",
        region_id=REGION,
        **overrides,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def dlc(clock: ManualClock) -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        emulator.clock = clock
        yield emulator
        assert emulator.internal_errors == []


@pytest.fixture
def client(dlc: DlcEmulator) -> DlcClient:
    return DlcClient(_config(dlc.endpoint))


def _pytorch_job(display_name: str = "train-resnet", **overrides: Any) -> dlc_models.CreateJobRequest:
    """A Lingjun PyTorchJob as the backend would submit it: 1 master + 2 workers on a quota."""

    def spec(role: str, count: int) -> dlc_models.JobSpec:
        return dlc_models.JobSpec(
            type=role,
            image="registry.cn-wulanchabu.aliyuncs.com/pai/pytorch:2.3",
            pod_count=count,
            resource_config=dlc_models.ResourceConfig(
                cpu="96", gpu="8", memory="800Gi", shared_memory="400Gi"
            ),
        )

    fields: dict[str, Any] = {
        "display_name": display_name,
        "job_type": "PyTorchJob",
        "job_specs": [spec("Master", 1), spec("Worker", 2)],
        "user_command": "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK train.py",
        "resource_id": "quota12345",
        "workspace_id": "ws-1",
        "user_vpc": dlc_models.CreateJobRequestUserVpc(
            vpc_id="vpc-1", switch_id="vsw-1", security_group_id="sg-1", extended_cidrs=["10.8.0.0/16"]
        ),
        "settings": dlc_models.JobSettings(enable_rdma=True),
        "envs": {"NCCL_DEBUG": "INFO"},
        "data_sources": [
            dlc_models.CreateJobRequestDataSources(data_source_id="d-cifar", mount_path="/mnt/data")
        ],
        "job_max_running_time_minutes": 120,
        "priority": 5,
    }
    return dlc_models.CreateJobRequest(**{**fields, **overrides})


def _status(client: DlcClient, job_id: str) -> str:
    return client.get_job(job_id, dlc_models.GetJobRequest()).body.status


def _raw_post(endpoint: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST JSON without the SDK: a body its request model would never produce."""
    request = urllib.request.Request(
        f"http://{endpoint}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json; charset=utf-8",
            "Authorization": "ACS3-HMAC-SHA256 Credential=raw-ak,SignedHeaders=host,Signature=00",
            "x-acs-action": "CreateJob",
            "x-acs-version": "2020-12-03",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


# --------------------------------------------------------------------------------- lifecycle


def test_job_walks_its_script_and_reports_history_and_pods(
    dlc: DlcEmulator, client: DlcClient, clock: ManualClock
) -> None:
    job_id = client.create_job(_pytorch_job()).body.job_id
    assert job_id.startswith("dlc")
    seen = [_status(client, job_id)]
    for _ in range(10):
        clock.advance(0.1)
        if seen[-1] != (status := _status(client, job_id)):
            seen.append(status)
    assert seen == ["Creating", "Queuing", "EnvPreparing", "Running", "Succeeded"]

    body = client.get_job(job_id, dlc_models.GetJobRequest()).body
    assert [h.status for h in body.status_history] == seen
    assert all(h.end_time for h in body.status_history[:-1])
    assert body.status_history[0].start_time == body.gmt_create_time
    assert body.gmt_running_time and body.gmt_finish_time and body.duration >= 0
    assert [(p.pod_id, p.type, p.status) for p in body.pods] == [
        (f"{job_id}-master-0", "Master", "Succeeded"),
        (f"{job_id}-worker-0", "Worker", "Succeeded"),
        (f"{job_id}-worker-1", "Worker", "Succeeded"),
    ]
    assert body.request_gpu == 24
    assert (body.resource_id, body.resource_type, body.display_name) == (
        "quota12345",
        "Lingjun",
        "train-resnet",
    )
    assert body.settings.enable_rdma is True and body.envs == {"NCCL_DEBUG": "INFO"}
    assert body.user_vpc.extended_cidrs == ["10.8.0.0/16"]
    assert dlc.jobs[job_id].body["JobSpecs"][1]["PodCount"] == 2


def test_get_job_answer_round_trips_through_the_sdk_model(dlc: DlcEmulator, client: DlcClient) -> None:
    job_id = client.create_job(_pytorch_job()).body.job_id
    response = client.get_job(job_id, dlc_models.GetJobRequest())
    wire = response.body.to_map()
    assert dlc_models.GetJobResponseBody().from_map(wire).to_map() == wire
    assert response.headers["x-acs-request-id"] == response.body.request_id


def test_pods_appear_only_after_scheduling(client: DlcClient, clock: ManualClock) -> None:
    job_id = client.create_job(_pytorch_job()).body.job_id
    assert client.get_job(job_id, dlc_models.GetJobRequest()).body.pods == []
    clock.advance(0.2)
    pods = client.get_job(job_id, dlc_models.GetJobRequest()).body.pods
    assert {p.status for p in pods} == {"Pending"}


def test_failed_script_reports_reason(dlc: DlcEmulator, client: DlcClient, clock: ManualClock) -> None:
    dlc.script_for("oom-", JobScript(final="Failed", reason_code="JobFailed", reason_message="exit code 137"))
    job_id = client.create_job(_pytorch_job("oom-run")).body.job_id
    clock.advance(5)
    body = client.get_job(job_id, dlc_models.GetJobRequest()).body
    assert (body.status, body.reason_code, body.reason_message) == ("Failed", "JobFailed", "exit code 137")
    assert body.status_history[-1].reason_code == "JobFailed"
    assert body.gmt_failed_time == body.gmt_finish_time


def test_list_jobs_filters_by_display_name_newest_first(client: DlcClient, clock: ManualClock) -> None:
    older = client.create_job(_pytorch_job("nightly-a")).body.job_id
    clock.advance(1)
    newer = client.create_job(_pytorch_job("nightly-b")).body.job_id
    client.create_job(_pytorch_job("other"))

    found = client.list_jobs(dlc_models.ListJobsRequest(display_name="nightly-a")).body
    assert (found.total_count, [j.job_id for j in found.jobs]) == (1, [older])
    assert found.jobs[0].job_max_running_time_minutes == 120

    both = client.list_jobs(dlc_models.ListJobsRequest(display_name="NIGHTLY", workspace_id="ws-1")).body
    assert [j.job_id for j in both.jobs] == [newer, older]
    page = client.list_jobs(dlc_models.ListJobsRequest(page_number=2, page_size=2, order="asc")).body
    assert (page.total_count, len(page.jobs)) == (3, 1)
    succeeded = client.list_jobs(dlc_models.ListJobsRequest(status="Succeeded")).body
    assert [j.job_id for j in succeeded.jobs] == [older]


def test_pod_logs_grow_while_running_and_filter_by_time(client: DlcClient, clock: ManualClock) -> None:
    job_id = client.create_job(_pytorch_job()).body.job_id
    pod = f"{job_id}-master-0"

    def logs(**query: Any) -> list[str]:
        return client.get_pod_logs(job_id, pod, dlc_models.GetPodLogsRequest(**query)).body.logs

    running_at = clock.advance(0.25)  # Creating 0.05 + Queuing 0.1 + EnvPreparing 0.1
    assert logs() == []
    clock.advance(0.25)  # half of the 0.5 s Running phase: 2 of 5 lines
    assert logs() == ["Starting training: WORLD_SIZE=2 RANK=0", "epoch 1/3 loss=2.3026"]
    clock.advance(1)
    assert len(logs()) == 5
    # Without StartTime, GetPodLogs reads from 7 days ago: the first MaxLines lines, not the last.
    assert logs(max_lines=2) == ["Starting training: WORLD_SIZE=2 RANK=0", "epoch 1/3 loss=2.3026"]
    third_line_at = running_at + 0.5 * 3 / 5
    assert logs(start_time=_iso_fraction(third_line_at)) == [
        "epoch 2/3 loss=1.8412",
        "epoch 3/3 loss=1.5107",
        "Training finished",
    ]
    assert logs(start_time=_iso_fraction(third_line_at), max_lines=1) == ["epoch 2/3 loss=1.8412"]
    assert logs(end_time=_iso_fraction(running_at + 0.15)) == ["Starting training: WORLD_SIZE=2 RANK=0"]


def _iso_fraction(epoch: float) -> str:
    """An ISO 8601 UTC time with milliseconds, to aim between lines emitted in the same second."""
    return f"{iso_utc(epoch)[:-1]}.{int(epoch * 1000) % 1000:03d}Z"


def test_stop_job_goes_through_stopping_to_stopped(
    dlc: DlcEmulator, client: DlcClient, clock: ManualClock
) -> None:
    job_id = client.create_job(_pytorch_job()).body.job_id
    clock.advance(0.35)
    assert client.stop_job(job_id).body.job_id == job_id
    assert _status(client, job_id) == "Stopping"
    clock.advance(0.1)
    body = client.get_job(job_id, dlc_models.GetJobRequest()).body
    assert body.status == "Stopped" and body.gmt_stopped_time
    assert [h.status for h in body.status_history][-3:] == ["Running", "Stopping", "Stopped"]
    clock.advance(5)
    assert _status(client, job_id) == "Stopped"
    client.stop_job(job_id)  # a finished job: accepted, nothing changes
    assert dlc.count("StopJob") == 2 and _status(client, job_id) == "Stopped"


def test_events_and_sanity_check_results(dlc: DlcEmulator, client: DlcClient) -> None:
    check = {"CheckNumber": 1, "Phase": "Before", "Status": "Succeeded", "Message": "nccl ok"}
    dlc.default_script = JobScript(sanity_check_results=[[check]])
    job_id = client.create_job(_pytorch_job()).body.job_id
    events = client.get_job_events(job_id, dlc_models.GetJobEventsRequest(max_events_num=2)).body
    assert events.events == ["Job is created", "Job is queuing for resources"]
    results = client.list_job_sanity_check_results(job_id, dlc_models.ListJobSanityCheckResultsRequest()).body
    assert results.request_id and results.total_count == 1
    assert results.sanity_check_results[0][0].message == "nccl ok"


async def test_async_sdk_methods_work(client: DlcClient) -> None:
    job_id = (await client.create_job_async(_pytorch_job())).body.job_id
    body = (await client.get_job_async(job_id, dlc_models.GetJobRequest())).body
    assert (body.job_id, body.status) == (job_id, "Creating")


# --------------------------------------------------------------------------------- test hook


def test_on_create_sees_the_stored_job_and_holds_its_answer_while_others_are_served(
    dlc: DlcEmulator, client: DlcClient
) -> None:
    release, hooked = threading.Event(), threading.Event()
    bodies: list[dict[str, Any]] = []

    def hold(body: dict[str, Any]) -> None:
        bodies.append(body)
        hooked.set()
        release.wait(10)

    dlc.on_create = hold
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(client.create_job, _pytorch_job("held-answer"))
        assert hooked.wait(10)
        listed = DlcClient(_config(dlc.endpoint)).list_jobs(dlc_models.ListJobsRequest()).body.jobs
        answered_early = pending.done()
        release.set()
        job_id = pending.result(timeout=10).body.job_id

    assert [job.job_id for job in listed] == [job_id], "stored before the hook, served while held"
    assert not answered_early
    assert [body["DisplayName"] for body in bodies] == ["held-answer"]
    assert bodies[0]["JobSpecs"][1]["PodCount"] == 2
    with pytest.raises(ClientException):
        client.create_job(_pytorch_job(user_command=None))
    assert len(bodies) == 1, "a rejected CreateJob creates nothing to hook"


# --------------------------------------------------------------------------------- validation


def test_body_the_sdk_model_would_not_produce_is_rejected(dlc: DlcEmulator) -> None:
    dlc.accept_access_key("raw-ak")
    body = {**dlc_models.CreateJobRequest().from_map({}).to_map(), **_pytorch_job().to_map(), "GpuCount": 8}
    status, answer = _raw_post(dlc.endpoint, "/api/v1/jobs", body)
    assert (status, answer["Code"]) == (400, "InvalidParameter")
    assert "GpuCount" in answer["Message"] and answer["RequestId"]
    assert dlc.jobs == {} and dlc.requests_for("CreateJob")[0].status == 400


def test_missing_user_command_is_named(dlc: DlcEmulator, client: DlcClient) -> None:
    with pytest.raises(ClientException) as caught:
        client.create_job(_pytorch_job(user_command=None))
    assert caught.value.code == "InvalidParameter" and "UserCommand" in caught.value.message
    assert dlc.jobs == {}


def test_unknown_job_is_not_found(client: DlcClient) -> None:
    with pytest.raises(ClientException) as caught:
        client.get_job("dlc-missing", dlc_models.GetJobRequest())
    assert (caught.value.status_code, caught.value.code) == (404, "JobNotFound")


# --------------------------------------------------------------------------------- faults


def test_throttled_create_job_raises_client_exception_and_creates_nothing(
    dlc: DlcEmulator, client: DlcClient
) -> None:
    dlc.faults = FaultPlan(throttle_rate=1.0, actions=frozenset({"CreateJob"}))
    with pytest.raises(ClientException) as caught:
        client.create_job(_pytorch_job())
    error = caught.value
    assert (error.code, error.status_code) == ("Throttling.User", 400)
    assert "Request was denied due to user flow control." in error.message
    recorded = dlc.requests_for("CreateJob")[0]
    assert error.request_id == error.data["RequestId"] == recorded.request_id
    assert (recorded.status, recorded.fault, dlc.faults_injected) == (400, "throttle", 1)
    assert dlc.jobs == {}
    client.list_jobs(dlc_models.ListJobsRequest())  # not a targeted action: answered normally


def test_unavailable_raises_server_exception(dlc: DlcEmulator, client: DlcClient) -> None:
    dlc.faults = FaultPlan(unavailable_rate=1.0)
    with pytest.raises(ServerException) as caught:
        client.list_jobs(dlc_models.ListJobsRequest())
    assert (caught.value.code, caught.value.status_code) == ("ServiceUnavailable", 503)


def test_dropped_connection_raises_unretryable_exception(dlc: DlcEmulator, client: DlcClient) -> None:
    dlc.faults = FaultPlan(drop_rate=1.0)
    with pytest.raises(UnretryableException) as caught:
        client.create_job(_pytorch_job())
    assert "RemoteDisconnected" in str(caught.value)
    assert [(r.status, r.fault) for r in dlc.requests] == [(0, "drop")] and dlc.jobs == {}


async def test_dropped_connection_raises_unretryable_exception_async(
    dlc: DlcEmulator, client: DlcClient
) -> None:
    dlc.faults = FaultPlan(drop_rate=1.0)
    with pytest.raises(UnretryableException) as caught:
        await client.create_job_async(_pytorch_job())
    assert "Server disconnected" in str(caught.value)
    assert dlc.count("CreateJob") == 1
    with pytest.raises(UnretryableException):
        await client.get_job_async("dlc-any", dlc_models.GetJobRequest())
    assert dlc.count("GetJob") == 2  # aiohttp itself resends an idempotent request once after a drop


@pytest.mark.slow
def test_slow_answer_times_out_the_client_but_the_job_exists(dlc: DlcEmulator) -> None:
    impatient = DlcClient(_config(dlc.endpoint, read_timeout=100))
    dlc.faults = FaultPlan(slow_rate=1.0, slow_seconds=0.4)
    with pytest.raises(UnretryableException):
        impatient.create_job(_pytorch_job())
    dlc.faults = FaultPlan()
    deadline = time.monotonic() + 5
    while not dlc.jobs and time.monotonic() < deadline:  # the server is still sleeping on its answer
        time.sleep(0.02)
    assert len(impatient.list_jobs(dlc_models.ListJobsRequest()).body.jobs) == 1  # no idempotency token


def test_fault_plan_is_deterministic_per_seed(dlc: DlcEmulator, client: DlcClient) -> None:
    def outcomes() -> list[str]:
        start = len(dlc.requests)
        dlc.faults = FaultPlan(throttle_rate=0.3, unavailable_rate=0.2, seed=7)
        for _ in range(12):
            with contextlib.suppress(ClientException, ServerException):
                client.list_jobs(dlc_models.ListJobsRequest())
        return [r.fault for r in dlc.requests[start:]]

    first = outcomes()
    assert first == outcomes()
    assert {"throttle", "unavailable", ""} == set(first)


# --------------------------------------------------------------------------------- credentials


def test_unknown_access_key_and_wrong_secret_are_rejected(dlc: DlcEmulator) -> None:
    stranger = DlcClient(
        Config(access_key_id="nobody", access_key_secret=SK, endpoint=dlc.endpoint, protocol="http")
    )
    with pytest.raises(ClientException) as unknown:
        stranger.list_jobs(dlc_models.ListJobsRequest())
    assert unknown.value.code == "InvalidAccessKeyId.NotFound"
    forger = DlcClient(
        Config(access_key_id=AK, access_key_secret="wrong", endpoint=dlc.endpoint, protocol="http")
    )
    with pytest.raises(ClientException) as forged:
        forger.list_jobs(dlc_models.ListJobsRequest())
    assert forged.value.code == "SignatureDoesNotMatch"


def test_sts_credentials_work_until_they_expire(dlc: DlcEmulator, clock: ManualClock) -> None:
    with StsEmulator({AK: SK}, token_ttl_seconds=2) as sts:
        sts.clock = clock
        sts.link(dlc)
        issued = StsClient(_config(sts.endpoint)).assume_role(
            sts_models.AssumeRoleRequest(role_arn=ROLE_ARN, role_session_name="airflow", duration_seconds=900)
        )
    credentials = issued.body.credentials
    assert credentials.access_key_id.startswith("STS.") and credentials.security_token == "token-1"
    assert credentials.expiration == iso_utc(sts.issued["token-1"].expires_at)
    assert 2 <= sts.issued["token-1"].expires_at - clock() < 3
    assert issued.body.assumed_role_user.arn == "acs:ram::1234567890123456:assumed-role/dlc-runner/airflow"
    assert sts.assumed == 1 and sts.requests_for("AssumeRole")[0].query["RoleSessionName"] == "airflow"

    session = DlcClient(
        Config(
            access_key_id=credentials.access_key_id,
            access_key_secret=credentials.access_key_secret,
            security_token=credentials.security_token,
            endpoint=dlc.endpoint,
            protocol="http",
            region_id=REGION,
        )
    )
    session.list_jobs(dlc_models.ListJobsRequest())
    assert dlc.requests[-1].headers["x-acs-security-token"] == "token-1"
    clock.advance(3)
    with pytest.raises(ClientException) as caught:
        session.list_jobs(dlc_models.ListJobsRequest())
    assert (caught.value.code, caught.value.status_code) == ("InvalidSecurityToken.Expired", 400)


def test_expire_security_token_takes_effect_at_once(dlc: DlcEmulator) -> None:
    with StsEmulator({AK: SK}) as sts:
        sts.link(dlc)
        credentials = (
            StsClient(_config(sts.endpoint))
            .assume_role(sts_models.AssumeRoleRequest(role_arn=ROLE_ARN, role_session_name="s"))
            .body.credentials
        )
    session_config = Config(
        access_key_id=credentials.access_key_id,
        access_key_secret=credentials.access_key_secret,
        security_token=credentials.security_token,
        endpoint=dlc.endpoint,
        protocol="http",
    )
    DlcClient(session_config).list_jobs(dlc_models.ListJobsRequest())
    dlc.expire_security_token(credentials.security_token)
    with pytest.raises(ClientException) as caught:
        DlcClient(session_config).list_jobs(dlc_models.ListJobsRequest())
    assert caught.value.code == "InvalidSecurityToken.Expired"


def test_assume_role_enforces_the_minimum_duration() -> None:
    with StsEmulator({AK: SK}) as sts, pytest.raises(ClientException) as caught:
        StsClient(_config(sts.endpoint)).assume_role(
            sts_models.AssumeRoleRequest(role_arn=ROLE_ARN, role_session_name="s", duration_seconds=60)
        )
    assert caught.value.code == "InvalidParameter.DurationSeconds"


# -- the DLC emulator enforces PAI-DLC's documented rules (sources in fakes/dlc.py) ----

DAY = 24 * 3600.0


def refused(client: DlcClient, request: dlc_models.CreateJobRequest) -> ClientException:
    with pytest.raises(ClientException) as caught:
        client.create_job(request)
    assert (caught.value.status_code, caught.value.code) == (400, "InvalidParameter")
    return caught.value


# -- CreateJob ---------------------------------------------------------------------------------------


def test_a_vswitch_without_extended_cidrs_is_refused_and_accepted_with_them(
    dlc: DlcEmulator, client: DlcClient
) -> None:
    def vpc(**cidrs: Any) -> dlc_models.CreateJobRequestUserVpc:
        return dlc_models.CreateJobRequestUserVpc(vpc_id="vpc-1", security_group_id="sg-1", **cidrs)

    error = refused(client, _pytorch_job(user_vpc=vpc(switch_id="vsw-1")))
    with_cidrs = client.create_job(
        _pytorch_job(user_vpc=vpc(switch_id="vsw-1", extended_cidrs=["10.0.0.0/8"]))
    )
    without_switch = client.create_job(_pytorch_job(user_vpc=vpc()))

    assert "UserVpc.ExtendedCIDRs is required when UserVpc.SwitchId is specified" in error.message
    assert set(dlc.jobs) == {with_cidrs.body.job_id, without_switch.body.job_id}


@pytest.mark.parametrize(
    ("uri", "accepted"),
    [
        ("oss://bucket.oss-cn-wulanchabu-internal.aliyuncs.com/data/", True),
        ("oss://bucket.oss-cn-hangzhou.aliyuncs.com/data/", True),
        ("oss://bucket/data/", False),
        ("oss://bucket.example.com/data/", False),
        ("nas://0a1b2c3d-abcd.cn-wulanchabu.nas.aliyuncs.com/data/", True),
    ],
)
def test_an_oss_data_source_must_name_the_buckets_endpoint(
    dlc: DlcEmulator, client: DlcClient, uri: str, accepted: bool
) -> None:
    request = _pytorch_job(
        data_sources=[dlc_models.CreateJobRequestDataSources(uri=uri, mount_path="/mnt/data")]
    )

    if accepted:
        client.create_job(request)
        assert len(dlc.jobs) == 1
    else:
        assert (
            f"DataSources[0].Uri {uri!r} must name the bucket's endpoint" in refused(client, request).message
        )
        assert dlc.jobs == {}


def test_elastic_spec_is_accepted_with_a_pytorch_job_and_echoed(client: DlcClient) -> None:
    elastic = dlc_models.JobElasticSpec(enable_elastic_training=True, min_parallelism=1, max_parallelism=4)

    job_id = client.create_job(_pytorch_job(elastic_spec=elastic)).body.job_id
    echoed = client.get_job(job_id, dlc_models.GetJobRequest()).body.elastic_spec

    assert (echoed.enable_elastic_training, echoed.min_parallelism, echoed.max_parallelism) == (True, 1, 4)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            {"job_type": "XGBoostJob", "job_specs": None},
            "ElasticSpec is not supported for JobType XGBoostJob",
        ),
        ({"min_parallelism": 4, "max_parallelism": 2}, "MinParallelism (4) and MaxParallelism (2)"),
        ({"min_parallelism": 0}, "MinParallelism (0) and MaxParallelism (4)"),
        ({"max_parallelism": None}, "MinParallelism (1) and MaxParallelism (None)"),
    ],
)
def test_elastic_spec_outside_what_aimaster_drives_or_with_a_bad_range_is_refused(
    dlc: DlcEmulator, client: DlcClient, overrides: dict[str, Any], named: str
) -> None:
    limits = {"min_parallelism": 1, "max_parallelism": 4}
    elastic_fields = {k: overrides.get(k, v) for k, v in limits.items()}
    elastic = dlc_models.JobElasticSpec(enable_elastic_training=True, **elastic_fields)
    request = _pytorch_job(elastic_spec=elastic)
    if "job_type" in overrides:
        request.job_type = overrides["job_type"]
        request.job_specs = [request.job_specs[1]]

    assert named in refused(client, request).message
    assert dlc.jobs == {}


def test_an_elastic_batch_job_is_accepted_with_its_workers(dlc: DlcEmulator, client: DlcClient) -> None:
    request = _pytorch_job(job_type="ElasticBatchJob")
    request.job_specs = [request.job_specs[1]]

    client.create_job(request)

    assert [body.body["JobType"] for body in dlc.jobs.values()] == ["ElasticBatchJob"]


# -- GetPodLogs --------------------------------------------------------------------------------------


def test_pod_logs_without_start_time_read_the_first_2000_lines_of_the_last_7_days(
    dlc: DlcEmulator, client: DlcClient, clock: ManualClock
) -> None:
    clock.now = float(int(clock()))  # whole seconds: line i is emitted at created + i + 2
    created = clock()
    lines = [f"line {i}" for i in range(5000)]
    dlc.default_script = JobScript(phases=[("Creating", 1.0), ("Running", 5000.0)], log_lines=lines)
    job_id = client.create_job(_pytorch_job()).body.job_id
    clock.advance(6000)
    pod = f"{job_id}-master-0"

    def logs(**query: Any) -> list[str]:
        return client.get_pod_logs(job_id, pod, dlc_models.GetPodLogsRequest(**query)).body.logs

    default = logs()
    from_start = logs(start_time=iso_utc(created + 3002))
    capped = logs(start_time=iso_utc(created + 3002), max_lines=3)
    clock.advance(8 * DAY)
    aged_out = logs()

    assert default == lines[:2000]
    assert from_start == lines[3000:5000]
    assert capped == ["line 3000", "line 3001", "line 3002"]
    assert aged_out == [], "without StartTime only the last 7 days are read"


# -- ListJobs ----------------------------------------------------------------------------------------


def test_list_jobs_pages_10_by_default_and_refuses_more_than_100(
    client: DlcClient, clock: ManualClock
) -> None:
    for index in range(12):
        clock.advance(1)
        client.create_job(_pytorch_job(f"run-{index}"))

    first = client.list_jobs(dlc_models.ListJobsRequest()).body
    second = client.list_jobs(dlc_models.ListJobsRequest(page_number=2)).body
    with pytest.raises(ClientException) as too_big:
        client.list_jobs(dlc_models.ListJobsRequest(page_size=101))

    assert (first.total_count, len(first.jobs), len(second.jobs)) == (12, 10, 2)
    assert [j.display_name for j in first.jobs + second.jobs] == [f"run-{i}" for i in reversed(range(12))]
    assert (
        too_big.value.code == "InvalidParameter" and "PageSize must be at most 100" in too_big.value.message
    )


def test_list_jobs_searches_7_days_back_unless_given_start_time(
    client: DlcClient, clock: ManualClock
) -> None:
    now = clock()
    clock.now = now - 8 * DAY
    old = client.create_job(_pytorch_job("nightly-old")).body.job_id
    clock.now = now
    new = client.create_job(_pytorch_job("nightly-new")).body.job_id

    def listed(**query: Any) -> list[str]:
        jobs = client.list_jobs(dlc_models.ListJobsRequest(display_name="nightly", **query)).body.jobs
        return [j.job_id for j in jobs]

    assert listed() == [new]
    assert listed(start_time=iso_utc(now - 9 * DAY)) == [new, old]
    assert listed(start_time=iso_utc(now - 9 * DAY), end_time=iso_utc(now - 7 * DAY)) == [old]


def test_list_jobs_start_time_must_be_a_time(client: DlcClient) -> None:
    with pytest.raises(ClientException) as caught:
        client.list_jobs(dlc_models.ListJobsRequest(start_time=str(time.time())))
    assert "StartTime must be an ISO 8601 UTC time" in caught.value.message


# -- GetJobEvents ------------------------------------------------------------------------------------


def test_job_events_answer_up_to_2000_by_default(dlc: DlcEmulator, client: DlcClient) -> None:
    dlc.default_script = JobScript(events=[f"event {i}" for i in range(2100)])
    job_id = client.create_job(_pytorch_job()).body.job_id

    events = client.get_job_events(job_id, dlc_models.GetJobEventsRequest()).body.events

    assert events == [f"event {i}" for i in range(2000)]
