"""The PAI-DLC backend, operator and trigger through the real SDK against the DLC (and STS) emulator."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.backends.base import JobHandle
from aliyun_training.backends.dlc.backend import DlcBackend
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.kubernetes.names import job_name
from aliyun_training.monitor import JobMonitor
from aliyun_training.operators.training import HANDLE_KEY, TrainingJobOperator
from aliyun_training.spec import JobOwner, TrainingJobSpec
from fakes.base import FaultPlan
from fakes.cloud import DLC_JOB_SETTINGS, dlc_backend, dlc_job, use_alibaba_connection
from fakes.dlc import DlcEmulator, JobScript
from fakes.environment_files import INSTALLATION
from fakes.paistudio import PaiStudioEmulator
from fakes.sts import StsEmulator
from tests.operator_harness import TaskInstanceIds, defer, fire, task_context

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

AK, SK = "LTAI-test-access-key", "dlc-secret-access-key-value"
REGISTRY_PASSWORD = "registry-password-value"
ROLE_ARN = "acs:ram::1234567890123456:role/pai-dlc-runner"
VPC = {
    "vpc_id": "vpc-0abc",
    "switch_id": "vsw-0abc",
    "security_group_id": "sg-0abc",
    "extended_cidrs": ["10.8.0.0/16", "172.20.0.0/16"],
}


@pytest.fixture
def dlc() -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        yield emulator
        assert emulator.internal_errors == []


def connect(monkeypatch: pytest.MonkeyPatch, endpoints: dict[str, str], **extra: Any) -> None:
    use_alibaba_connection(monkeypatch, endpoints, AK, SK, **extra)
    registry = {
        "conn_type": "docker",
        "host": "registry.example.com",
        "login": "puller",
        "password": REGISTRY_PASSWORD,
    }
    monkeypatch.setenv("AIRFLOW_CONN_TRAINING_REGISTRY", json.dumps(registry))


@pytest.fixture
def studio() -> Iterator[PaiStudioEmulator]:
    """PAI Studio, where a queued job's place in its quota is asked (the quota has no queue here)."""
    with PaiStudioEmulator({AK: SK}) as emulator:
        emulator.add_quota("quota12345")
        yield emulator


@pytest.fixture
def connected(dlc: DlcEmulator, studio: PaiStudioEmulator, monkeypatch: pytest.MonkeyPatch) -> DlcEmulator:
    connect(monkeypatch, {"dlc": dlc.endpoint, "paistudio": studio.endpoint})
    return dlc


def spec(**overrides: Any) -> dict[str, Any]:
    job = dlc_job(
        shared_memory_gib=64,
        rdma=True,
        command=(
            "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
            "--master_port=$MASTER_PORT --nproc_per_node=8 train.py"
        ),
        env={"EPOCHS": "3"},
        datasets=[{"dataset_id": "d-cifar10", "dataset_version": "v3", "mount_path": "/mnt/data"}],
        output_dir="/mnt/output/run-1",
        timeout_minutes=120,
    )
    return {**job, **overrides}


def operator(job_settings: dict[str, Any] | None = None, **overrides: Any) -> TrainingJobOperator:
    return TrainingJobOperator(
        task_id="train",
        job={
            "spec": spec(**overrides),
            "backend_config": {
                "workspace_id": "ws-1",
                "vpc": VPC,
                "image_registry_conn_id": "training_registry",
                "job_settings": {**DLC_JOB_SETTINGS, "priority": 3, **(job_settings or {})},
            },
        },
        poll_interval=0.05,
    )


@pytest.mark.slow
def test_the_spec_becomes_a_create_job_request_the_sdk_model_accepts(connected: DlcEmulator) -> None:
    ctx = task_context()
    defer(operator(), ctx)

    (create,) = connected.requests_for("CreateJob")
    body = create.body
    assert body["DisplayName"] == job_name(
        "retrain", "manual__2026-11-30T00:00:00+00:00", "train", installation=INSTALLATION
    )
    assert body["JobType"] == "PyTorchJob"
    assert [(s["Type"], s["PodCount"]) for s in body["JobSpecs"]] == [("Master", 1), ("Worker", 1)]
    assert body["JobSpecs"][0]["ResourceConfig"] == {
        "CPU": "96",
        "GPU": "8",
        "GPUType": "GU8TF",
        "Memory": "800Gi",
        "SharedMemory": "64Gi",
    }
    assert body["JobSpecs"][0]["ImageConfig"] == {
        "DockerRegistry": "registry.example.com",
        "Username": "puller",
        "Password": REGISTRY_PASSWORD,
    }
    assert body["ResourceId"] == "quota12345" and body["WorkspaceId"] == "ws-1"
    assert body["UserVpc"] == {
        "VpcId": "vpc-0abc",
        "SwitchId": "vsw-0abc",
        "SecurityGroupId": "sg-0abc",
        "ExtendedCIDRs": ["10.8.0.0/16", "172.20.0.0/16"],
    }
    assert body["Settings"]["EnableRDMA"] is True
    assert body["Settings"]["Tags"]["airflow-job-name"] == body["DisplayName"]
    assert body["Envs"].items() >= {"EPOCHS": "3", "OUTPUT_DIR": "/mnt/output/run-1"}.items()
    assert body["DataSources"] == [
        {
            "DataSourceId": "d-cifar10",
            "DataSourceVersion": "v3",
            "MountPath": "/mnt/data",
            "MountAccess": "RO",
        }
    ]
    assert body["JobMaxRunningTimeMinutes"] == 120 and body["Priority"] == 3
    assert body["UserCommand"].startswith("torchrun --nnodes=$WORLD_SIZE")
    assert (
        ctx["ti"]
        .pushed["training_job_console_url"]
        .endswith(f"#/dlc/jobs/{create_job_id(connected)}/overview")
    )


def create_job_id(dlc: DlcEmulator) -> str:
    (job_id,) = dlc.jobs
    return job_id


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "job_type", "roles"),
    [
        ("tensorflow", "TFJob", [("Worker", 2)]),
        ("mpi", "MPIJob", [("Launcher", 1), ("Worker", 2)]),
        ("elastic", "PyTorchJob", [("Master", 1), ("Worker", 1)]),
        ("elastic_batch", "ElasticBatchJob", [("Worker", 2)]),
    ],
)
def test_each_framework_maps_to_its_dlc_job_type_and_roles(
    connected: DlcEmulator, framework: str, job_type: str, roles: list[tuple[str, int]]
) -> None:
    defer(operator(framework=framework), task_context())

    body = connected.requests_for("CreateJob")[0].body
    assert body["JobType"] == job_type
    assert [(s["Type"], s["PodCount"]) for s in body["JobSpecs"]] == roles
    # Elastic PyTorch is a PyTorchJob with ElasticSpec (min = max = nodes when the range is unset).
    elastic = {"EnableElasticTraining": True, "MinParallelism": 2, "MaxParallelism": 2}
    assert body.get("ElasticSpec") == (elastic if framework == "elastic" else None)
    for job_spec in body["JobSpecs"]:
        resources = job_spec.get("ResourceConfig") or {}
        if job_spec["Type"] == "Launcher":  # it runs mpirun only: a node's worth would need a node more
            assert (resources["CPU"], resources["Memory"], resources["GPU"]) == ("2", "4Gi", "0")


@pytest.mark.slow
def test_a_job_runs_to_success_with_logs_streamed_while_deferred(
    connected: DlcEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    connected.default_script = JobScript(
        phases=[("Creating", 0.05), ("Queuing", 0.2), ("EnvPreparing", 0.5), ("Running", 1.5)],
        log_lines=[f"epoch {i} loss={3 - i * 0.5:.2f}" for i in range(1, 5)],
    )
    op, ctx = operator(), task_context()
    trigger = defer(op, ctx)
    task = asyncio.new_event_loop()
    seen_while_running = ""
    future = task.create_task(fire(trigger))
    deadline = time.monotonic() + 10
    while "epoch 1 loss" not in seen_while_running and time.monotonic() < deadline:
        task.run_until_complete(asyncio.sleep(0.05))
        seen_while_running += capfd.readouterr().out
    assert "epoch 1 loss=2.50" in seen_while_running and not future.done()

    event = task.run_until_complete(future)
    task.close()
    result = op.execute_complete(ctx, event)
    output = seen_while_running + capfd.readouterr().out

    for line in (f"epoch {i} loss={3 - i * 0.5:.2f}" for i in range(1, 5)):
        for node in (0, 1):
            assert output.count(f"[node-{node}] {line}") == 1, (
                f"{line!r} of node {node} is logged exactly once"
            )

    assert "Queuing -> EnvPreparing" in output and "Running -> Succeeded" in output
    assert result["status"] == "Succeeded" and result["backend"] == "dlc"
    assert set(result["phase_seconds"]) >= {"queuing", "preparing", "running"}
    assert result["phase_seconds"]["running"] >= 1.0
    assert result["gpu_hours"] == pytest.approx(16 * result["wall_seconds"] / 3600, rel=1e-3)
    assert result["output_uri"] == "/mnt/output/run-1"
    assert result["console_url"].startswith("https://pai.console.aliyun.com/?regionId=cn-wulanchabu")


@pytest.mark.slow
def test_a_failed_job_fails_the_task_with_reason_code_logs_events_and_sanity_checks(
    connected: DlcEmulator,
) -> None:
    connected.default_script = JobScript(
        phases=[("Creating", 0.05), ("Running", 0.2)],
        final="Failed",
        reason_code="JobFailed",
        reason_message="Pod master-0 exited with code 1",
        log_lines=[f"step {i}" for i in range(1, 80)] + ["RuntimeError: NCCL error: unhandled system error"],
        sanity_check_results=[
            [
                {
                    "CheckNumber": 1,
                    "Phase": "GPUCheck",
                    "Status": "Failed",
                    "Message": "GPU 3 has XID 79",
                    "StartedAt": "2026-11-30T00:00:00Z",
                    "FinishedAt": "2026-11-30T00:00:05Z",
                }
            ]
        ],
    )
    op, ctx = operator(), task_context()
    event = asyncio.run(fire(defer(op, ctx)))

    with pytest.raises(AirflowException) as failure:
        op.execute_complete(ctx, event)

    message = str(failure.value)
    assert "failed: JobFailed: Pod master-0 exited with code 1" in message
    assert "RuntimeError: NCCL error: unhandled system error" in message
    assert "step 31" in message and "step 30\n" not in message
    assert "event: Job is created" in message
    assert "sanity check #1 GPUCheck: Failed GPU 3 has XID 79" in message


@pytest.mark.slow
def test_throttling_and_server_errors_on_30_percent_of_calls_do_not_fail_the_run(
    connected: DlcEmulator,
) -> None:
    connected.faults = FaultPlan(throttle_rate=0.15, unavailable_rate=0.15, seed=7)
    op, ctx = operator(), task_context()

    result = op.execute_complete(ctx, asyncio.run(fire(defer(op, ctx))))

    assert result["status"] == "Succeeded"
    assert connected.faults_injected >= 3
    assert len(connected.jobs) == 1, "a throttled CreateJob must not lead to a second job"


@pytest.mark.slow
def test_a_create_job_retried_after_a_lost_response_finds_the_job_instead_of_creating_another(
    connected: DlcEmulator,
) -> None:
    backend = dlc_backend(workspace_id="ws-1")
    job_spec = TrainingJobSpec.parse(spec(datasets=[]))
    # A CreateJob reached DLC but its answer never came back: the job exists, the caller saw an error.
    # The emulator plays the lost answer as a dropped connection on the submit's first CreateJob.
    created = backend.hook.conn.create_job(backend.create_request(job_spec, "lost-answer")).body.job_id
    connected.faults = FaultPlan(drop_rate=1.0, actions=frozenset({"CreateJob"}))

    handle = backend.submit(job_spec, "lost-answer")

    assert handle.job_id == created
    assert len(connected.jobs) == 1
    assert connected.count("CreateJob") == 2, "one lost answer, then a lookup instead of a second create"
    assert connected.count("ListJobs") >= 1


@pytest.mark.slow
def test_killed_while_deferred_sends_stop_job(connected: DlcEmulator) -> None:
    connected.default_script = JobScript(phases=[("Creating", 0.05), ("Running", 30.0)])
    trigger = defer(operator(), task_context())

    async def kill_while_running() -> None:
        task = asyncio.create_task(fire(trigger))
        await asyncio.sleep(0.3)
        task.cancel()
        await trigger.on_kill()

    asyncio.run(kill_while_running())

    assert connected.count("StopJob") == 1
    job_id = trigger.handle["job_id"]
    assert connected.jobs[job_id].stop_requested_at is not None


def test_a_retry_after_the_worker_died_between_create_and_save_finds_the_job_by_name(
    connected: DlcEmulator,
) -> None:
    connected.default_script = JobScript(phases=[("Running", 3600.0)])  # still running when the retry looks
    ti = TaskInstanceIds()
    launched = TrainingJobSpec.parse(spec(datasets=[], owner=ti.owner.model_dump()))
    died_after = dlc_backend(workspace_id="ws-1").submit(launched, ti.job_name)
    ctx = task_context()
    assert HANDLE_KEY not in ctx["task_state_store"]

    trigger = defer(operator(datasets=[]), ctx)

    assert trigger.handle["job_id"] == died_after.job_id
    assert connected.count("CreateJob") == 1
    assert ctx["task_state_store"][HANDLE_KEY]["job_id"] == died_after.job_id


@pytest.mark.parametrize(
    "squatter",
    [
        None,  # a job someone created by hand under the predictable name
        TaskInstanceIds().owner.model_copy(update={"installation": "ml-staging"}),  # another deployment's
    ],
    ids=["no owner tags", "another installation"],
)
def test_a_job_under_the_task_name_that_the_task_did_not_launch_fails_it_and_is_left_alone(
    connected: DlcEmulator, squatter: JobOwner | None
) -> None:
    connected.default_script = JobScript(phases=[("Running", 3600.0)])
    foreign = TrainingJobSpec.parse(spec(datasets=[], owner=squatter.model_dump() if squatter else None))
    squatting = dlc_backend(workspace_id="ws-1").submit(foreign, TaskInstanceIds().job_name)

    with pytest.raises(AirflowFailException) as failed:
        operator(datasets=[]).execute(task_context())

    message = str(failed.value)
    assert f"Job {squatting.job_id} on dlc carries this task's job name" in message
    assert ("installation ml-staging" if squatter else "no owner of this package") in message
    assert "It was neither reattached to nor replaced" in message and "installation_id" in message
    assert connected.count("CreateJob") == 1 and connected.count("StopJob") == 0
    assert DlcBackend(workspace_id="ws-1").status(squatting).state.value == "running"


@pytest.mark.slow
def test_an_sts_token_expiring_mid_wait_is_refreshed_without_failing(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StsEmulator({AK: SK}) as sts:
        sts.link(dlc)
        connect(monkeypatch, {"dlc": dlc.endpoint, "sts": sts.endpoint}, role_arn=ROLE_ARN)
        dlc.default_script = JobScript(phases=[("Creating", 0.05), ("Running", 1.0)])
        op, ctx = operator(), task_context()
        trigger = defer(op, ctx)
        first_token = dlc.requests_for("CreateJob")[0].headers["x-acs-security-token"]

        async def expire_mid_wait() -> dict[str, Any]:
            task = asyncio.create_task(fire(trigger))
            await asyncio.sleep(0.3)
            dlc.expire_security_token(first_token)
            return await task

        result = op.execute_complete(ctx, asyncio.run(expire_mid_wait()))

    assert result["status"] == "Succeeded"
    assert sts.assumed >= 2, "the expired token must have been replaced by a new AssumeRole"
    tokens = {r.headers.get("x-acs-security-token") for r in dlc.requests}
    assert len(tokens) >= 2


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"nodes": 0}, "nodes: Input should be greater than or equal to 1"),
        ({"env": {"NCCL_IB_HCA": "mlx5_0"}}, "['NCCL_IB_HCA'] are set by DLC on every node"),
        (
            {"job_settings": {"quota_id": None}},
            "quota_id: Lingjun resources are only usable through a resource quota",
        ),
        (
            {"job_settings": {"gpu_type": None}},
            "gpu_type: 8 GPUs per node requested from quota quota12345 without a GPU type",
        ),
        ({"gpus_per_node": 16}, "gpus_per_node: a Lingjun node has 8 GPUs, not 16"),
    ],
)
def test_an_invalid_spec_fails_before_any_request(
    connected: DlcEmulator, overrides: dict[str, Any], expected: str
) -> None:
    with pytest.raises(AirflowFailException, match=expected.replace("[", r"\[").replace("]", r"\]")):
        operator(**overrides).execute(task_context())

    assert connected.requests == []


def test_a_client_error_fails_at_once_with_code_message_and_request_id(connected: DlcEmulator) -> None:
    backend = DlcBackend()

    with pytest.raises(AlibabaCloudApiError) as failure:
        backend.status(JobHandle(backend="dlc", job_id="dlc-missing", name="missing"))

    assert connected.count("GetJob") == 1, "a 4xx other than throttling is not retried"
    assert failure.value.code == "JobNotFound"
    assert failure.value.request_id == connected.requests_for("GetJob")[0].request_id
    assert f"RequestId: {failure.value.request_id}" in str(failure.value)


@pytest.mark.slow
def test_secrets_never_reach_task_logs_trigger_kwargs_or_xcom(
    connected: DlcEmulator, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    op, ctx = operator(), task_context()
    trigger = defer(op, ctx)
    result = op.execute_complete(ctx, asyncio.run(fire(trigger)))

    visible = capfd.readouterr().out + json.dumps(trigger.serialize()) + json.dumps(result)
    visible += json.dumps(ctx["ti"].pushed) + json.dumps(dict(ctx["task_state_store"]))
    for secret in (SK, REGISTRY_PASSWORD):
        assert secret not in visible
    assert "registry.example.com" in json.dumps(connected.requests_for("CreateJob")[0].body)


def test_a_queued_job_logs_its_queue_position_and_reason(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """While DLC says Queuing, the task log says where the job is in its quota's queue and why it
    waits (PAI Studio's QueueInfo of the job's workload), and again when that changes."""
    with PaiStudioEmulator({AK: SK}) as studio:
        connect(monkeypatch, {"dlc": dlc.endpoint, "paistudio": studio.endpoint})
        studio.add_quota("quota12345", allocatable_gpus=16, allocated_gpus=16)
        dlc.default_script = JobScript(phases=[("Creating", 0.01), ("Queuing", 3600.0)])
        backend = dlc_backend(workspace_id="ws-1")
        handle = backend.submit(TrainingJobSpec.parse(spec()), "queued")
        studio.add_workload("quota12345", "dlc-someone-elses-job")
        studio.add_workload("quota12345", handle.job_id, reason="the quota's GPUs are all allocated")
        time.sleep(0.1)
        caplog.set_level(logging.INFO, logger="queued-job")
        monitor = JobMonitor(backend, handle, logging.getLogger("queued-job"))

        queued = monitor.poll()
        studio.clear_workloads("quota12345")
        studio.add_workload("quota12345", handle.job_id, reason="the quota's GPUs are all allocated")
        first_in_line = monitor.poll()

    assert queued.raw == "Queuing" and queued.state.value == "pending"
    assert "queue position 2 in quota quota12345 since " in queued.reason
    assert "queue reason: the quota's GPUs are all allocated" in queued.reason
    assert "queue position 1 in quota quota12345" in first_in_line.reason
    assert monitor.waited_because == first_in_line.reason, "kept for the job's result and its report"
    logged = [r.getMessage() for r in caplog.records if r.name == "queued-job"]
    assert [line for line in logged if "queue position" in line] == [
        f"Job {handle.job_id}: submitted -> Queuing ({queued.reason})",
        f"Job {handle.job_id}: Queuing ({first_in_line.reason})",
    ]
