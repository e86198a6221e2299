"""Recovery on the local backend: each failure class leads to its action, a lost node resumes from
the last checkpoint, and no job outlives its task (stopping jobs, failure callbacks, the reconciler).

The operator runs blocking (no triggerer) against real process trees; the retry policy is the
one Airflow's task runner evaluates, called with the exception the operator raised.
"""

from __future__ import annotations

import json
import pickle
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.definitions.retry_policy import RetryAction

from aliyun_training.artifacts.collect import publish_artifacts
from aliyun_training.backends.base import JobHandle, JobState
from aliyun_training.backends.local import LocalBackend
from aliyun_training.backends.local_node import kill_processes
from aliyun_training.failures import FailureClass, RecoveryAction, RecoveryRule
from aliyun_training.kubernetes.names import job_name
from aliyun_training.operators.ownership import task_owner
from aliyun_training.operators.reconcile import OrphanedJobsOperator, StopRunJobs
from aliyun_training.operators.recovery import FailureClassRetryPolicy, TrainingJobFailed
from aliyun_training.operators.training import ATTEMPTS_KEY, HANDLE_KEY, TrainingJobOperator, stop_saved_job
from aliyun_training.plan.backends import WatchedBackend
from aliyun_training.spec import JobOwner
from aliyun_training.stage_records import BuiltImage, JobResult, StagedDataset
from fakes.environment_files import INSTALLATION

PROJECT_DIR = Path(__file__).resolve().parents[2]
TRAINING_DIR = PROJECT_DIR / "include" / "training"
RUN_ID = "manual__2026-12-01T00:00:00+00:00"
TORCHRUN = (
    f"{Path(sys.executable).parent}/torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK "
    "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT --nproc_per_node=1"
)


class MemoryStore(dict):
    def set(self, key: str, value: Any, *, retention: timedelta | None = None) -> None:
        self[key] = json.loads(json.dumps(value))


@dataclass
class TaskInstance:
    """What the operator reads of its task instance; ``states`` answers ``get_task_states``."""

    try_number: int = 1
    max_tries: int = 2
    dag_id: str = "cifar10_retrain"
    run_id: str = RUN_ID
    task_id: str = "train"
    map_index: int = -1
    states: dict[str, dict[str, str]] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        pass

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict[str, Any]:
        return {run: self.states[run] for run in run_ids if run in self.states}


def operator(
    local_root: Path, command: str, nodes: int = 1, retries: int = 2, **spec: Any
) -> TrainingJobOperator:
    job = {
        "spec": {"nodes": nodes, "command": command, "working_dir": str(TRAINING_DIR), **spec},
        "backend_config": {"root": str(local_root / "runs"), "stop_grace_seconds": 2},
        "output_root": str(local_root / "outputs"),
    }
    return TrainingJobOperator(task_id="train", job=job, deferrable=False, poll_interval=0.1, retries=retries)


def context_for(ti: TaskInstance, store: MemoryStore, op: TrainingJobOperator) -> dict[str, Any]:
    return {"ti": ti, "task_state_store": store, "task": op}


def backend(local_root: Path) -> LocalBackend:
    return LocalBackend(root=str(local_root / "runs"), stop_grace_seconds=2)


def jobs_launched(local_root: Path) -> int:
    """Every job ever launched under local_root: the live ones and those archived by a later attempt."""
    runs = local_root / "runs"
    archived = list((runs / ".archive").iterdir()) if (runs / ".archive").exists() else []
    return len(list(runs.glob("*/job.json"))) + len(archived)


def fail_once(op: TrainingJobOperator, context: dict[str, Any]) -> TrainingJobFailed:
    with pytest.raises(TrainingJobFailed) as failed:
        op.execute(context)
    return failed.value


# -- each class fails or retries as the table says ---------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected", "action"),
    [
        ("no-such-command --train", FailureClass.CONFIG, RetryAction.FAIL),
        (f"{sys.executable} -c 'raise SystemExit(65)'", FailureClass.DATA, RetryAction.FAIL),
        (
            f"{sys.executable} -c 'raise ValueError(\"bug in the script\")'",
            FailureClass.USER_CODE,
            RetryAction.FAIL,
        ),
        (
            f"{sys.executable} -c 'print(\"NCCL error: unhandled system error\"); raise SystemExit(1)'",
            FailureClass.INFRASTRUCTURE,
            RetryAction.RETRY,
        ),
        ("kill -KILL $$", FailureClass.PREEMPTION, RetryAction.RETRY),
    ],
    ids=["config", "data", "user_code", "infrastructure", "preemption"],
)
def test_each_local_failure_class_leads_to_its_action(
    local_root: Path, command: str, expected: FailureClass, action: RetryAction
) -> None:
    op, ti, store = operator(local_root, command), TaskInstance(), MemoryStore()

    failed = fail_once(op, context_for(ti, store, op))

    assert failed.failure.failure_class is expected
    assert f"Failure class: {expected.value}" in str(failed)
    decision = op.retry_policy.evaluate(failed, try_number=1, max_tries=3)
    assert decision.action is action
    assert expected.value in (decision.reason or "")
    [attempt] = store[ATTEMPTS_KEY]
    assert attempt["failure_class"] == expected.value and attempt["evidence"]
    assert jobs_launched(local_root) == 1


def test_a_config_failure_runs_one_job_and_the_retry_policy_fails_the_task(local_root: Path) -> None:
    op, ti, store = operator(local_root, "no-such-command"), TaskInstance(), MemoryStore()

    failed = fail_once(op, context_for(ti, store, op))

    decision = op.retry_policy.evaluate(failed, try_number=1, max_tries=3)
    assert decision.action is RetryAction.FAIL
    assert decision.reason.startswith("config (")
    assert jobs_launched(local_root) == 1, "no retry is asked for, so nothing launches again"


def test_the_recovery_table_is_configurable_per_class(local_root: Path) -> None:
    policy = FailureClassRetryPolicy(
        {FailureClass.USER_CODE: RecoveryRule(action=RecoveryAction.RETRY, delay_minutes=3)}
    )
    op = TrainingJobOperator(
        task_id="train",
        job={"spec": {"command": "exit 1"}, "backend_config": {"root": str(local_root / "runs")}},
        deferrable=False,
        poll_interval=0.1,
        retry_policy=policy,
    )

    failed = fail_once(op, context_for(TaskInstance(), MemoryStore(), op))

    decision = policy.evaluate(failed, try_number=1, max_tries=3)
    assert failed.failure.failure_class is FailureClass.USER_CODE
    assert (decision.action, decision.retry_delay) == (RetryAction.RETRY, timedelta(minutes=3))
    assert policy.evaluate(ValueError("not a job"), 1, 3).action is RetryAction.DEFAULT
    assert FailureClassRetryPolicy.deserialize(policy.serialize()).table == policy.table
    copied = pickle.loads(pickle.dumps(failed))
    assert (str(copied), copied.failure) == (str(failed), failed.failure)


@pytest.mark.slow
def test_a_run_past_its_gpu_hours_is_stopped_with_class_budget(local_root: Path) -> None:
    op = operator(local_root, "sleep 60", gpus_per_node=1)
    op.job["max_gpu_hours"] = 0.0002  # 0.72 s of one GPU
    store = MemoryStore()

    failed = fail_once(op, context_for(TaskInstance(), store, op))

    assert failed.failure.failure_class is FailureClass.BUDGET
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.FAIL
    handle = JobHandle.model_validate(store[HANDLE_KEY])
    assert backend(local_root).status(handle).state in (JobState.STOPPING, JobState.STOPPED)
    [attempt] = store[ATTEMPTS_KEY]
    assert attempt["failure_class"] == "budget" and attempt["gpu_hours"] >= 0.0002


def test_the_next_try_gets_only_what_the_run_budget_leaves(local_root: Path) -> None:
    op = operator(local_root, "kill -KILL $$", gpus_per_node=2)
    op.job["max_gpu_hours"] = 1.0
    earlier = [
        {"try_number": 1, "job_id": "j1", "status": "Failed", "gpu_hours": 0.5},
        # Try 2 lost track of j2 (counted what it saw), try 3 watched it end: j2 counts once.
        {"try_number": 2, "job_id": "j2", "status": "Running", "gpu_hours": 0.1},
        {"try_number": 3, "job_id": "j2", "status": "Failed", "gpu_hours": 0.25},
        {"try_number": 4, "job_id": "j3", "status": "Running", "gpu_hours": 0.2},
    ]
    store = MemoryStore({ATTEMPTS_KEY: earlier})
    spec = op.plan.spec.model_copy(update={"gpus_per_node": 2})
    # The try reattaches to j3: the monitor counts j3 from its start, so the budget leaves it out.
    watched = JobHandle(backend="local", job_id="j3", name="train-job")

    budget = op._budget(spec, context_for(TaskInstance(5, max_tries=6), store, op), watched)

    assert budget is not None and (budget.gpus, budget.hours_left) == (2, 0.25)


@pytest.mark.slow
def test_a_clear_does_not_give_back_the_gpu_hours_of_the_earlier_rounds_job(local_root: Path) -> None:
    """The task is cleared while its job runs: the new round stops that job, counts its GPU-hours,
    and its own job gets only what is left of the run's budget."""
    op = operator(local_root, "sleep 60", gpus_per_node=1)
    op.job["max_gpu_hours"] = 0.001  # 3.6 s of one GPU
    first_round = TaskInstance(try_number=1, max_tries=2)
    spec = op.plan.spec.model_copy(update={"owner": task_owner(first_round, INSTALLATION)})
    runs = backend(local_root)
    earlier = runs.submit(spec, job_name(first_round.dag_id, RUN_ID, "train", installation=INSTALLATION))
    store = MemoryStore({HANDLE_KEY: earlier.model_dump()})
    while runs.status(earlier).state is not JobState.RUNNING:
        time.sleep(0.05)
    time.sleep(3.0)  # the earlier round's job uses most of the budget before the clear

    # Cleared after try 1: the new round's first try is 3 (max_tries 2 + retries 2).
    failed = fail_once(op, context_for(TaskInstance(try_number=3, max_tries=4), store, op))

    assert runs.status(earlier).state is JobState.STOPPED
    counted = next(a for a in store[ATTEMPTS_KEY] if a["job_id"] == earlier.job_id)
    assert counted["try_number"] == 2 and counted["gpu_hours"] >= 3.0 / 3600
    assert failed.failure.failure_class is FailureClass.BUDGET
    new = next(a for a in store[ATTEMPTS_KEY] if a["job_id"] != earlier.job_id)
    assert new["try_number"] == 3 and new["gpu_hours"] < 2.0 / 3600, "what was left (0.6 s), not 3.6 s"


# -- resume from the last checkpoint ------------------------------------------------------------------


def _kill_node_after_checkpoint(local_root: Path, node: int, epoch: int, killed: list[str]) -> None:
    """Wait for ``epoch``'s complete checkpoint, then SIGKILL every process of ``node``: a lost machine."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        markers = list((local_root / "outputs").glob(f"*/checkpoints/*/epoch-{epoch:04d}/COMPLETE"))
        jobs = list((local_root / "runs").glob("*/job.json"))
        if markers and jobs:
            job_id = json.loads(jobs[0].read_text())["job_id"]
            kill_processes(f"{job_id}:node-{node}\0", signal.SIGKILL)
            killed.append(job_id)
            return
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_a_lost_node_is_retried_and_resumes_at_the_next_epoch(local_root: Path, make_dataset: Any) -> None:
    data = make_dataset("2026-12-01", train=512, test=64)
    epochs = 8
    command = f"{TORCHRUN} cifar10_ddp.py --data $DATA_DIR --epochs {epochs} --batch-size 64 --threads 1"
    op, store = operator(local_root, command, nodes=2), MemoryStore()
    op.dataset = {
        "uri": str(data),
        "version": "2026-12-01",
        "files": 3,
        "bytes": 1,
        "manifest_uri": "",
        "checksum": "",
    }
    killed: list[str] = []
    killer = threading.Thread(target=_kill_node_after_checkpoint, args=(local_root, 1, 2, killed))
    killer.start()

    failed = fail_once(op, context_for(TaskInstance(try_number=1), store, op))
    killer.join()

    assert killed, "node 1 was killed after epoch 2's checkpoint"
    assert failed.failure.failure_class is FailureClass.PREEMPTION
    decision = op.retry_policy.evaluate(failed, try_number=1, max_tries=3)
    assert decision.action is RetryAction.RETRY and "resuming" in (decision.reason or "")

    result = op.execute(context_for(TaskInstance(try_number=2), store, op))

    first, second = result["attempts"]
    assert (first["failure_class"], second["decision"]) == ("preemption", "succeeded")
    assert first["resume_from"] is None and second["resume_from"].endswith(tuple("0123456789abcdef"))
    assert "/checkpoints/2026-12-01-" in second["resume_from"]
    metrics = json.loads((Path(result["output_uri"]) / "metrics.json").read_text())
    assert [entry["epoch"] for entry in metrics["epochs"]] == list(range(1, epochs + 1))
    [resumed] = metrics["resumes"]
    assert resumed["attempt"] == 2 and resumed["from_epoch"] >= 2
    second_try_epochs = [entry["epoch"] for entry in metrics["epochs"] if entry["attempt"] == 2]
    assert second_try_epochs == list(range(resumed["from_epoch"] + 1, epochs + 1))
    assert len(second_try_epochs) < epochs, "the retry did not train from scratch"
    assert jobs_launched(local_root) == 2

    published = publish_artifacts(
        model="cnn",
        artifact_root=str(local_root / "artifacts"),
        job=JobResult.model_validate(result),
        dataset=StagedDataset.model_validate(op.dataset),
        runtime=BuiltImage(uri="local", digest="", python="3.11"),
    )
    manifest = json.loads(Path(published.manifest_uri).read_text())
    lost, resumed_try = manifest["attempts"]
    assert (lost["failure_class"], lost["epochs_run"]) == ("preemption", resumed["from_epoch"])
    assert lost["evidence"] and "vanished" in lost["evidence"][0]
    assert resumed_try["resumed_after_epoch"] == resumed["from_epoch"]
    assert resumed_try["epochs_run"] == len(second_try_epochs)
    report = Path(published.report_uri).read_text()
    assert "<h2>Attempts</h2>" in report and f"after epoch {resumed['from_epoch']}" in report


def test_a_corrupt_checkpoint_is_skipped_for_the_one_before(local_root: Path) -> None:
    sys.path.insert(0, str(TRAINING_DIR))
    try:
        import checkpoints
    finally:
        sys.path.remove(str(TRAINING_DIR))
    root = local_root / "ckpt"
    for epoch in (1, 2, 3):
        checkpoints.save(
            root, epoch, {"state.pt": f"weights {epoch}".encode()}, {"history": [], "epoch": epoch}
        )
    (root / "epoch-0003" / "state.pt").write_bytes(b"truncated")
    (root / "epoch-0004").mkdir()  # a save that died before its marker

    state, path = checkpoints.load_newest(root, lambda files, meta: files["state.pt"].decode())

    assert (state, path.name) == ("weights 2", "epoch-0002")


# -- no job outlives its task ---------------------------------------------------------------------


SLOW_TO_STOP = "trap 'sleep 1.5; exit 143' TERM; sleep 60 & wait"


@pytest.mark.slow
def test_a_retry_waits_for_a_stopping_job_then_launches_a_new_one(local_root: Path) -> None:
    store = MemoryStore()
    first = operator(local_root, SLOW_TO_STOP)
    runs = backend(local_root)
    owner = task_owner(TaskInstance(), INSTALLATION)
    handle = runs.submit(
        first.plan.spec.model_copy(update={"output_dir": str(local_root / "o"), "owner": owner}), "train-job"
    )
    store[HANDLE_KEY] = handle.model_dump()
    time.sleep(0.5)
    (local_root / "runs" / handle.name / "stop_requested").touch()
    while runs.status(handle).state is not JobState.STOPPING:
        time.sleep(0.05)

    op = operator(local_root, "echo done")
    result = op.execute(context_for(TaskInstance(try_number=2), store, op))

    assert runs.status(handle).state is JobState.STOPPED
    assert result["job_id"] != handle.job_id and result["status"] == "Succeeded"


def test_the_failure_callback_stops_the_saved_job_that_still_runs(local_root: Path) -> None:
    op, store = operator(local_root, "sleep 60"), MemoryStore()
    runs = backend(local_root)
    owner = task_owner(TaskInstance(), INSTALLATION)
    handle = runs.submit(op.plan.spec.model_copy(update={"owner": owner}), "train-job")
    store[HANDLE_KEY] = handle.model_dump()

    stop_saved_job(context_for(TaskInstance(), store, op))

    assert runs.status(handle).state is JobState.STOPPED


@pytest.mark.slow
@pytest.mark.parametrize(
    "owner",
    [
        JobOwner(installation="ml-staging", dag_id="cifar10_retrain", run_id=RUN_ID, task_id="train"),
        JobOwner(
            installation=INSTALLATION, dag_id="cifar10_retrain", run_id="manual__other", task_id="train"
        ),
        None,  # a job this package did not launch
    ],
)
def test_a_saved_handle_naming_a_job_of_another_task_is_neither_stopped_nor_reattached(
    local_root: Path, owner: JobOwner | None
) -> None:
    """task_state_store is writable through the REST API: a handle there is evidence, not authority."""
    runs = backend(local_root)
    theirs = runs.submit(
        operator(local_root, "sleep 60").plan.spec.model_copy(update={"owner": owner}), "their-job"
    )
    op, store = operator(local_root, "echo done"), MemoryStore()
    store[HANDLE_KEY] = theirs.model_dump()
    try:
        stop_saved_job(context_for(TaskInstance(), store, op))
        assert runs.status(theirs).state is JobState.RUNNING, "the callback leaves it alone"

        result = op.execute(context_for(TaskInstance(), store, op))

        assert result["job_id"] != theirs.job_id and result["status"] == "Succeeded", "a job of its own"
        assert runs.status(theirs).state is JobState.RUNNING, "a retry neither adopts nor stops it"
    finally:
        runs.stop(theirs)


def _owned_job(local_root: Path, name: str, owner: JobOwner) -> JobHandle:
    op = operator(local_root, "sleep 60")
    return backend(local_root).submit(op.plan.spec.model_copy(update={"owner": owner}), name)


@pytest.mark.slow
def test_the_reconciler_stops_jobs_no_task_waits_for_and_keeps_the_others(local_root: Path) -> None:
    waiting = JobOwner(
        installation=INSTALLATION, dag_id="cifar10_retrain", run_id=RUN_ID, task_id="train", try_number=1
    )
    marked_failed = waiting.model_copy(update={"task_id": "verify_image"})
    deleted_run = waiting.model_copy(update={"run_id": "manual__deleted"})
    handles = {
        "waiting": _owned_job(local_root, "job-a", waiting),
        "marked": _owned_job(local_root, "job-b", marked_failed),
        "deleted": _owned_job(local_root, "job-c", deleted_run),
    }
    unowned = backend(local_root).submit(operator(local_root, "sleep 60").plan.spec, "job-d")
    # Another deployment sharing the local root: the same run and task, failed in this database.
    foreign = _owned_job(local_root, "job-e", marked_failed.model_copy(update={"installation": "ml-staging"}))
    ti = TaskInstance(states={RUN_ID: {"train": "deferred", "verify_image": "failed"}})
    watched = [WatchedBackend(backend="local", environment=str(local_root / "local.json"))]
    reconcile = OrphanedJobsOperator(task_id="stop_orphaned_jobs", watched=watched, grace_minutes=0)
    runs = backend(local_root)
    try:
        dry = OrphanedJobsOperator(
            task_id="stop_orphaned_jobs", watched=watched, grace_minutes=0, report_only=True
        ).execute({"ti": ti})
        assert {entry["action"] for entry in dry} == {"kept", "would stop"}
        assert all(runs.status(h).state is JobState.RUNNING for h in handles.values())

        report = reconcile.execute({"ti": ti})

        actions = {entry["job_id"]: entry["action"] for entry in report}
        assert actions == {
            handles["waiting"].job_id: "kept",
            handles["marked"].job_id: "stopped",
            handles["deleted"].job_id: "stopped",
        }, "a job without an owner, or another installation's, is not ours to stop"
        assert runs.status(handles["waiting"]).state is JobState.RUNNING
        assert runs.status(handles["marked"]).state is JobState.STOPPED
        assert runs.status(handles["deleted"]).state is JobState.STOPPED
        assert runs.status(unowned).state is JobState.RUNNING
        assert runs.status(foreign).state is JobState.RUNNING
        young = OrphanedJobsOperator(task_id="stop_orphaned_jobs", watched=watched, grace_minutes=60)
        assert {entry["action"] for entry in young.execute({"ti": TaskInstance()})} == {"kept"}
    finally:
        for handle in [*handles.values(), unowned, foreign]:
            runs.stop(handle)


@pytest.mark.slow
def test_a_failed_run_stops_its_own_jobs_but_not_one_its_cleared_task_waits_for(local_root: Path) -> None:
    mine = JobOwner(installation=INSTALLATION, dag_id="cifar10_retrain", run_id=RUN_ID, task_id="train")
    other = mine.model_copy(update={"run_id": "scheduled__2026-11-24T00:00:00+00:00"})
    cleared = mine.model_copy(update={"task_id": "check_rdma", "try_number": 2})
    staging = mine.model_copy(update={"installation": "ml-staging"})  # the same run in another deployment
    handles = [
        _owned_job(local_root, "job-a", mine),
        _owned_job(local_root, "job-b", other),
        _owned_job(local_root, "job-c", cleared),
        _owned_job(local_root, "job-d", staging),
    ]
    runs = backend(local_root)

    @dataclass
    class Dag:
        dag_id: str = "cifar10_retrain"

    # The callback ran late: check_rdma was cleared since and waits for its new job.
    ti = TaskInstance(states={RUN_ID: {"train": "failed", "check_rdma": "deferred"}})
    try:
        StopRunJobs([WatchedBackend(backend="local", environment=str(local_root / "local.json"))])(
            {"dag": Dag(), "run_id": RUN_ID, "ti": ti}
        )
        states = [runs.status(h).state for h in handles]
        assert states == [JobState.STOPPED, JobState.RUNNING, JobState.RUNNING, JobState.RUNNING]
    finally:
        for handle in handles[1:]:
            runs.stop(handle)


def test_launched_lists_running_owned_jobs_with_their_owner(local_root: Path) -> None:
    owner = JobOwner(installation=INSTALLATION, dag_id="d", run_id="r", task_id="train", try_number=3)
    handle = _owned_job(local_root, "job-a", owner)
    runs = backend(local_root)
    try:
        [launched] = runs.launched(INSTALLATION)
        assert (launched.handle, launched.owner, launched.state) == (handle, owner, JobState.RUNNING)
        assert datetime.fromisoformat(launched.created) <= datetime.now(UTC)
    finally:
        runs.stop(handle)
    assert runs.launched(INSTALLATION) == []
