"""The ACK backend through the cncf.kubernetes hooks (sync and async) against the Kubernetes API fake."""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.backends.ack import backend as ack_backend
from aliyun_training.backends.ack import logs as ack_logs
from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.base import JobState
from aliyun_training.hooks import kubernetes as kube_hooks
from aliyun_training.kubernetes.names import job_name
from aliyun_training.operators.training import HANDLE_KEY, TrainingJobOperator
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.validation import SpecError
from fakes.base import ManualClock
from fakes.cloud import arena_job
from fakes.environment_files import INSTALLATION
from fakes.kube import NS, arena_delete, core, kubernetes_fake
from fakes.kubernetes_fake import KubernetesFake, TrainingScript
from tests.operator_harness import TaskInstanceIds, defer, fire, task_context

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CONN_ID = "ack_cluster"


NAME = job_name("retrain", "manual__2026-11-30T00:00:00+00:00", "train", installation=INSTALLATION)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, conn_id=CONN_ID) as server:
        yield server


def settings(**overrides: Any) -> dict[str, Any]:
    return {
        "kubernetes_conn_id": CONN_ID,
        "namespace": NS,
        "nccl_env": {"NCCL_DEBUG": "INFO"},
        "host_network": True,
        **overrides,
    }


def spec(**overrides: Any) -> dict[str, Any]:
    job = arena_job(
        command="torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK train.py",
        rdma=True,
        datasets=[{"uri": "pvc://cpfs-train", "mount_path": "/mnt/data"}],
        output_dir="/mnt/data/outputs/run-1",
    )
    return {**job, **overrides}


def operator(backend_settings: dict[str, Any] | None = None, **overrides: Any) -> TrainingJobOperator:
    return TrainingJobOperator(
        task_id="train",
        job={"spec": spec(**overrides), "backend_config": backend_settings or settings()},
        poll_interval=0.05,
    )


def custom_objects(
    fake: KubernetesFake, plural: str = "pytorchjobs", version: str = "v1"
) -> list[dict[str, Any]]:
    backend = AckBackend(**settings())
    hook = backend._hook()
    return hook.custom_object_client.list_namespaced_custom_object("kubeflow.org", version, NS, plural)[
        "items"
    ]


def configmaps() -> list[str]:
    hook = AckBackend(**settings())._hook()
    return [cm.metadata.name for cm in hook.core_v1_client.list_namespaced_config_map(NS).items]


@pytest.mark.slow
def test_a_job_runs_to_success_with_every_nodes_log_streamed_while_deferred(
    fake: KubernetesFake, capfd: pytest.CaptureFixture[str]
) -> None:
    fake.default_script = TrainingScript(
        phases=[("Created", 0.1), ("Running", 1.5)],
        log_lines=[f"epoch {i} loss={3 - i / 2}" for i in range(1, 5)],
    )
    op, ctx = operator(), task_context()
    trigger = defer(op, ctx)
    (job,) = custom_objects(fake)
    assert job["metadata"]["labels"]["release"] == NAME and f"{NAME}-pytorchjob" in configmaps()

    loop = asyncio.new_event_loop()
    task = loop.create_task(fire(trigger))
    seen = ""
    deadline = time.monotonic() + 15
    while "epoch 1 loss" not in seen and time.monotonic() < deadline:
        loop.run_until_complete(asyncio.sleep(0.05))
        seen += capfd.readouterr().out
    assert "epoch 1 loss=2.5" in seen and not task.done()
    event = loop.run_until_complete(task)
    loop.close()
    result = op.execute_complete(ctx, event)
    output = seen + capfd.readouterr().out

    for i in range(1, 5):
        for node in (0, 1):
            assert output.count(f"[node-{node}] epoch {i} loss={3 - i / 2}") == 1
    assert "-> Running" in output and "Running -> Succeeded" in output
    assert result["status"] == "Succeeded" and result["backend"] == "arena"
    assert result["output_uri"] == "/mnt/data/outputs/run-1"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (TrainingScript(outcome="OOMKilled", failing_replica="worker"), "OOMKilled (exit code 137)"),
        (TrainingScript(outcome="ExitCode", exit_code=3, failing_replica="master"), "exit code 3"),
    ],
)
def test_a_failed_job_fails_the_task_naming_the_pod_and_reason(
    fake: KubernetesFake, script: TrainingScript, expected: str
) -> None:
    fake.default_script = script
    op, ctx = operator(), task_context()
    event = asyncio.run(fire(defer(op, ctx)))

    with pytest.raises(AirflowException) as failure:
        op.execute_complete(ctx, event)

    message = str(failure.value)
    assert "failed:" in message and expected in message
    assert "Last log lines of node" in message


@pytest.mark.slow
def test_a_job_stuck_pending_names_why_when_the_timeout_stops_it(
    fake: KubernetesFake, capfd: pytest.CaptureFixture[str]
) -> None:
    """Pods the scheduler cannot place may fit later: the job waits out its timeout, and the error
    names why it was pending. (A pull that keeps failing does not wait that long: see
    test_recovery_cloud's image test.)"""
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

    expected = "Insufficient nvidia.com/gpu"
    fake.default_script = TrainingScript(outcome="Unschedulable")
    op, ctx = operator(timeout_minutes=1), task_context()
    trigger = defer(op, ctx)

    async def wait_a_little() -> None:
        task = asyncio.create_task(fire(trigger))
        await asyncio.sleep(0.8)
        task.cancel()

    asyncio.run(wait_a_little())
    with pytest.raises(AirflowException) as failure:
        op.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, ctx)

    assert expected in capfd.readouterr().out, "the pending reason is logged while the task waits"
    assert expected in str(failure.value)
    assert custom_objects(fake) == [] and f"{NAME}-pytorchjob" not in configmaps()


@pytest.mark.slow
def test_killed_while_deferred_deletes_the_cr_and_the_configmap(fake: KubernetesFake) -> None:
    fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 60.0)])
    trigger = defer(operator(), task_context())

    async def kill() -> None:
        task = asyncio.create_task(fire(trigger))
        await asyncio.sleep(0.4)
        task.cancel()
        await trigger.on_kill()

    asyncio.run(kill())

    assert custom_objects(fake) == []
    assert f"{NAME}-pytorchjob" not in configmaps()


def test_a_retry_after_the_worker_died_reattaches_and_creates_once(fake: KubernetesFake) -> None:
    fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 60.0)])
    owned = TrainingJobSpec.parse(spec(owner=TaskInstanceIds().owner.model_dump()))
    died_after = AckBackend(**settings()).submit(owned, NAME)
    ctx = task_context()

    trigger = defer(operator(), ctx)

    assert trigger.handle["job_id"] == died_after.job_id
    assert fake.count("POST", "/pytorchjobs") == 1 and fake.count("POST", "/configmaps") == 1
    assert ctx["task_state_store"][HANDLE_KEY]["job_id"] == died_after.job_id
    AckBackend(**settings()).stop(died_after)


def test_a_failed_job_under_the_same_name_is_replaced_not_reattached(fake: KubernetesFake) -> None:
    fake.default_script = TrainingScript(phases=[("Created", 0.01), ("Running", 0.05)], outcome="Failed")
    owned = TrainingJobSpec.parse(spec(owner=TaskInstanceIds().owner.model_dump()))
    earlier = AckBackend(**settings()).submit(owned, NAME)
    deadline = time.monotonic() + 10
    while AckBackend(**settings()).status(earlier).state.value != "failed" and time.monotonic() < deadline:
        time.sleep(0.05)
    fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 60.0)])

    trigger = defer(operator(), task_context())

    assert trigger.handle["job_id"] != earlier.job_id
    assert fake.count("POST", "/pytorchjobs") == 2
    (job,) = custom_objects(fake)
    assert job["metadata"]["uid"] == trigger.handle["job_id"].rsplit("/", 1)[-1]
    with pytest.raises(LookupError, match="replaced by a newer attempt"):
        AckBackend(**settings()).status(earlier)


def test_another_installations_job_under_the_task_name_fails_the_task_and_is_not_deleted(
    fake: KubernetesFake,
) -> None:
    fake.default_script = TrainingScript(phases=[("Created", 0.01), ("Running", 0.05)], outcome="Failed")
    staging = TaskInstanceIds().owner.model_copy(update={"installation": "ml-staging"})
    squatting = AckBackend(**settings()).submit(TrainingJobSpec.parse(spec(owner=staging.model_dump())), NAME)

    with pytest.raises(AirflowFailException, match=r"not launched by this task: .*installation ml-staging"):
        operator().execute(task_context())
    # The backend refuses as well when asked to submit over it (a race with the lookup).
    with pytest.raises(
        SpecError, match=r"exists and was not launched by this task .* neither replaced nor deleted"
    ):
        AckBackend(**settings()).submit(
            TrainingJobSpec.parse(spec(owner=TaskInstanceIds().owner.model_dump())), NAME
        )

    (job,) = custom_objects(fake)
    assert job["metadata"]["uid"] == squatting.job_id.rsplit("/", 1)[-1], "left in place"
    assert fake.count("POST", "/pytorchjobs") == 1 and fake.count("DELETE", "/pytorchjobs") == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "plural", "version", "backend_settings"),
    [
        ("tensorflow", "tfjobs", "v1", {}),
        ("mpi", "mpijobs", "v2beta1", {}),
        ("mpi", "mpijobs", "v1alpha1", {"mpi_api_version": "v1alpha1"}),
    ],
)
def test_tfjob_and_mpijob_submit_and_succeed(
    fake: KubernetesFake, framework: str, plural: str, version: str, backend_settings: dict[str, Any]
) -> None:
    op, ctx = operator(settings(**backend_settings), framework=framework), task_context()

    result = op.execute_complete(ctx, asyncio.run(fire(defer(op, ctx))))

    assert result["status"] == "Succeeded"
    (job,) = custom_objects(fake, plural, version)
    assert job["metadata"]["labels"]["app"] == job["kind"].lower()


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tensorflow", "mpi"])
def test_tfjob_and_mpijob_failures_carry_the_reason(fake: KubernetesFake, framework: str) -> None:
    fake.default_script = TrainingScript(outcome="ExitCode", exit_code=2)
    op, ctx = operator(framework=framework), task_context()
    event = asyncio.run(fire(defer(op, ctx)))

    with pytest.raises(AirflowException, match="exit code 2"):
        op.execute_complete(ctx, event)


@pytest.mark.parametrize(
    ("overrides", "backend_settings", "expected"),
    [
        ({"nodes": 0}, {}, "nodes: Input should be greater than or equal to 1"),
        ({"gpus_per_node": 16}, {}, "gpus_per_node: 16 GPUs per node, but the cluster's GPU nodes have 8"),
        (
            {"datasets": [{"uri": "/mnt/cpfs", "mount_path": "/mnt/data"}]},
            {},
            "datasets: mount '/mnt/cpfs' names no PVC",
        ),
    ],
)
def test_an_invalid_spec_fails_before_anything_is_created(
    fake: KubernetesFake, overrides: dict[str, Any], backend_settings: dict[str, Any], expected: str
) -> None:
    with pytest.raises(AirflowFailException, match=expected):
        operator(settings(**backend_settings), **overrides).execute(task_context())

    assert fake.count("POST") == 0


# -- what arena and the operators do with the objects -----------------------------------------------

KINDS = [
    ("pytorch", {}, "pytorchjobs", "v1", "pytorchjob"),
    ("elastic", {}, "pytorchjobs", "v1", "pytorchjob"),
    ("tensorflow", {}, "tfjobs", "v1", "tfjob"),
    ("mpi", {}, "mpijobs", "v2beta1", "mpijob"),
    ("mpi", {"mpi_api_version": "v1alpha1"}, "mpijobs", "v1alpha1", "mpijob"),
]


@pytest.mark.parametrize(("framework", "backend_settings", "plural", "version", "arena_type"), KINDS)
def test_arena_delete_deletes_every_kind_of_job_this_backend_submits(
    fake: KubernetesFake,
    framework: str,
    backend_settings: dict[str, Any],
    plural: str,
    version: str,
    arena_type: str,
) -> None:
    fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 60.0)])
    backend = AckBackend(**settings(**backend_settings))
    backend.submit(TrainingJobSpec.parse(spec(framework=framework)), NAME)

    deleted = arena_delete(NAME, arena_type, conn_id=CONN_ID)

    assert deleted == [f"{arena_type}.kubeflow.org/{NAME}"]
    assert custom_objects(fake, plural, version) == [] and f"{NAME}-{arena_type}" not in configmaps()
    assert fake.count("DELETE", f"/{plural}/{NAME}") == 1


@pytest.mark.slow
def test_mpijob_v2beta1_workers_leave_the_command_to_the_launcher_and_run_sshd(fake: KubernetesFake) -> None:
    backend = AckBackend(**settings())
    handle = backend.submit(TrainingJobSpec.parse(spec(framework="mpi")), NAME)

    sent = next(r.body for r in fake.requests if r.method == "POST" and r.path.endswith("/mpijobs"))
    replicas = sent["spec"]["mpiReplicaSpecs"]
    (launcher,) = replicas["Launcher"]["template"]["spec"]["containers"]
    (worker,) = replicas["Worker"]["template"]["spec"]["containers"]
    assert launcher["command"] == ["sh", "-c", "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK train.py"]
    assert "command" not in worker and "args" not in worker
    pods = {
        p.metadata.name: p
        for p in core(CONN_ID).list_namespaced_pod(NS, label_selector=f"release={NAME}").items
    }
    assert pods[f"{NAME}-worker-1"].spec.containers[0].command == ["/usr/sbin/sshd", "-De"]

    deadline = time.monotonic() + 10
    while not (status := backend.status(handle)).state.is_terminal and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status.state is JobState.SUCCEEDED, status.reason


@pytest.mark.slow
def test_an_elastic_job_is_a_pytorchjob_of_workers_with_the_operators_rendezvous(
    fake: KubernetesFake,
) -> None:
    backend = AckBackend(**settings())
    elastic = spec(framework="elastic", nodes=2, min_nodes=1, max_nodes=4, gpus_per_node=8)
    handle = backend.submit(TrainingJobSpec.parse(elastic), NAME)

    (job,) = custom_objects(fake)
    assert job["spec"]["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 4,
        "rdzvBackend": "c10d",
        "nProcPerNode": 8,
    }
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    listed = core(CONN_ID).list_namespaced_pod(NS, label_selector=f"release={NAME}").items
    assert sorted(p.metadata.name for p in listed) == [f"{NAME}-worker-0", f"{NAME}-worker-1"]
    env = {e.name: e.value for e in listed[0].spec.containers[0].env}
    assert env["PET_NNODES"] == "1:4" and env["PET_RDZV_ENDPOINT"] == f"{NAME}-worker-0:23456"
    assert env["PET_RDZV_BACKEND"] == "c10d" and env["PET_NPROC_PER_NODE"] == "8"
    assert "MASTER_ADDR" not in env and env["NCCL_DEBUG"] == "INFO"

    deadline = time.monotonic() + 10
    while not (status := backend.status(handle)).state.is_terminal and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status.state is JobState.SUCCEEDED, status.reason
    assert backend.logs(handle).lines[-2:] == ["[node-0] Training finished", "[node-1] Training finished"]


@pytest.mark.slow
def test_status_and_failure_details_read_every_page_of_pods_and_events(
    fake: KubernetesFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two items a page: three pods take two pages, and each pod's three events two more."""
    monkeypatch.setattr(kube_hooks, "LIST_PAGE_SIZE", 2)
    fake.default_script = TrainingScript(outcome="ImagePullBackOff")
    backend = AckBackend(**settings())
    handle = backend.submit(TrainingJobSpec.parse(spec(nodes=3)), NAME)
    time.sleep(0.2)  # the kubelet's pull attempts and their events

    sync_details = backend.failure_details(handle)
    async_details = asyncio.run(backend.afailure_details(handle))
    status = asyncio.run(backend.astatus(handle))

    last_pod = f"{NAME}-worker-1"  # the second page of pods
    for details in (sync_details, async_details):
        assert f'event {last_pod}: BackOff: Back-off pulling image "{spec()["image"]}"' in details
    assert f"pod {last_pod}: ImagePullBackOff" in status.reason
    pod_lists = [r for r in fake.requests if r.method == "GET" and r.path.endswith("/pods")]
    event_lists = [r for r in fake.requests if r.method == "GET" and r.path.endswith("/events")]
    assert pod_lists and all(r.query.get("limit") == "2" for r in pod_lists + event_lists)
    assert any("continue" in r.query for r in pod_lists) and any("continue" in r.query for r in event_lists)


@pytest.mark.parametrize(
    ("backend_settings", "expected"),
    [
        ({"namespace": "ML_Team"}, "namespace: 'ML_Team' is not a DNS-1123 label"),
        ({"max_gpus_per_node": 0}, "max_gpus_per_node: Input should be greater than or equal to 1"),
        ({"nccl_env": {"MASTER_ADDR": "10.0.0.1"}}, "nccl_env: ['MASTER_ADDR'] are set on every node"),
    ],
)
def test_bad_cluster_settings_fail_the_task_before_anything_is_created(
    fake: KubernetesFake, backend_settings: dict[str, Any], expected: str
) -> None:
    with pytest.raises(AirflowFailException, match=re.escape(expected)) as failure:
        operator(settings(**backend_settings)).execute(task_context())

    assert "(fix:" in str(failure.value)
    assert fake.count("POST") == 0


@pytest.mark.slow
def test_logs_and_tail_on_a_fresh_backend_need_no_status_call_first(fake: KubernetesFake) -> None:
    """A retried worker or a new triggerer builds a new backend: it reads the pods itself."""
    lines = [f"epoch {i}" for i in range(1, 6)]
    fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 0.3)], log_lines=lines)
    handle = AckBackend(**settings()).submit(TrainingJobSpec.parse(spec()), NAME)
    deadline = time.monotonic() + 10
    while not AckBackend(**settings()).status(handle).state.is_terminal and time.monotonic() < deadline:
        time.sleep(0.05)

    # Both nodes wrote each line at the same moment: merged by time, not one node after the other.
    merged = [f"[node-{node}] {line}" for line in lines for node in (0, 1)]
    assert AckBackend(**settings()).logs(handle).lines == merged
    assert AckBackend(**settings()).tail(handle, 0, 2) == lines[-2:]
    assert asyncio.run(AckBackend(**settings()).alogs(handle)).lines == merged
    assert asyncio.run(AckBackend(**settings()).atail(handle, 0, 2)) == lines[-2:]


def test_a_poll_lists_the_pods_once_and_a_later_log_read_lists_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logs reuse the pods of the status call just before them, and only those: never old ones."""
    clock = ManualClock(1_800_000_000.0)
    with kubernetes_fake(tmp_path, monkeypatch, conn_id=CONN_ID, clock=clock) as fake:
        fake.default_script = TrainingScript(phases=[("Created", 5.0), ("Running", 5.0)])
        backend = AckBackend(**settings())
        handle = backend.submit(TrainingJobSpec.parse(spec()), NAME)
        lists = fake.count("GET", "/pods")

        assert backend.status(handle).state is JobState.PENDING
        assert backend.logs(handle).lines == []
        assert fake.count("GET", "/pods") == lists + 1, "the log read reuses the pods status listed"

        clock.advance(20)
        fake.reconcile()
        monkeypatch.setattr(ack_backend, "POD_LIST_MAX_AGE_SECONDS", 0.0)  # that status call is long past
        assert backend.logs(handle).lines[-1] == "[node-1] Training finished"
        assert asyncio.run(backend.alogs(handle)).lines[-1] == "[node-1] Training finished"


@pytest.mark.slow
def test_every_nodes_log_arrives_once_in_time_order_however_the_reads_are_cut(
    fake: KubernetesFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polls read both pods with a small byte bound while they log: a read cut short holds back the
    other node's later lines until the next read, and the per-pod cursors drop what was seen. (On
    the real clock: the log API takes ``sinceSeconds``, counted back from the server's now.)"""
    lines = [f"step {i:03d} " + "x" * 40 for i in range(120)]
    monkeypatch.setattr(ack_logs, "LOG_BYTES_PER_POLL", 400)
    fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 3.0)], log_lines=lines)
    backend = AckBackend(**settings())
    handle = backend.submit(TrainingJobSpec.parse(spec()), NAME)
    seen: list[str] = []
    cursor: dict[str, Any] | None = None
    cut_short, deadline = 0, time.monotonic() + 20
    while time.monotonic() < deadline:
        ended = backend.status(handle).state.is_terminal
        while True:
            chunk = backend.logs(handle, cursor)
            seen, cursor = seen + chunk.lines, chunk.cursor
            if not chunk.more:
                break
            cut_short += 1
        if ended:
            break
        time.sleep(0.3)

    for node in (0, 1):
        assert [
            line.removeprefix(f"[node-{node}] ") for line in seen if line.startswith(f"[node-{node}] ")
        ] == (lines), f"node {node}'s lines, each once, in order"
    steps = [int(line.split()[2]) for line in seen]
    assert steps == sorted(steps), (
        "merged by time: no line after one written later (equal times in any order)"
    )
    assert cut_short > 0, "some reads stopped at the byte bound"
