"""TrainingJobOperator with real local jobs: defer, reattach after a worker crash, failures, timeout.

The task_state_store here is a small stand-in persisted to a file (the real one needs a running task
supervisor; the DAG tests exercise it through dag.test()). Everything else is real: processes, run
directories, the trigger and the operator.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.definitions.retry_policy import RetryAction
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from aliyun_training.backends.base import JobHandle, JobState
from aliyun_training.backends.local import LocalBackend
from aliyun_training.backends.local_node import job_pids
from aliyun_training.declaration import LAUNCHERS
from aliyun_training.failures import FailureClass
from aliyun_training.kubernetes.names import job_name
from aliyun_training.live import LIVE_KEY, open_live
from aliyun_training.operators.recovery import TrainingJobFailed
from aliyun_training.operators.training import HANDLE_KEY, TrainingJobOperator
from aliyun_training.pages.urls import run_page
from aliyun_training.triggers.training import TrainingJobTrigger
from fakes.environment_files import INSTALLATION
from tests.integration.test_failure_corpus import RANKS_SCRIPT

PROJECT_DIR = Path(__file__).resolve().parents[2]
#: The job name of TaskInstanceIds' first round of tries.
FIRST_ROUND_NAME = job_name(
    "retrain", "scheduled__2026-11-22T00:00:00+00:00", "train", installation=INSTALLATION
)


class FileTaskStateStore:
    """The task_state_store interface (get/set/delete), persisted so another process sees it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, key: str, default: Any = None) -> Any:
        return self._load().get(key, default)

    def set(self, key: str, value: Any, *, retention: timedelta | None = None) -> None:
        self.path.write_text(json.dumps({**self._load(), key: value}))

    def delete(self, key: str) -> None:
        self.path.write_text(json.dumps({k: v for k, v in self._load().items() if k != key}))


@dataclass
class TaskInstanceIds:
    dag_id: str = "retrain"
    run_id: str = "scheduled__2026-11-22T00:00:00+00:00"
    task_id: str = "train"
    map_index: int = -1
    max_tries: int = 0  # the operator has no retries: one try a round; a clear moves it to try_number
    try_number: int = 1

    def xcom_push(self, key: str, value: Any) -> None:
        """Local jobs have no console: the operator stores an empty link; the run page's is the
        provider's page of this run; a deferring task writes the job's first live record, sealed."""
        if key == LIVE_KEY:
            record = open_live(value, self.dag_id, self.run_id, self.task_id)
            assert record is not None and record.job_id
            return
        assert (key, value) in {
            ("training_job_console_url", ""),
            ("run_page_url", run_page(self.dag_id, self.run_id)),
        }


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def context(tmp_path: Path) -> dict[str, Any]:
    return {"ti": TaskInstanceIds(), "task_state_store": FileTaskStateStore(tmp_path / "state.json")}


def operator(runs: Path, command: str, nodes: int = 2, **spec: Any) -> TrainingJobOperator:
    return TrainingJobOperator(
        task_id="train",
        job={
            "spec": {"nodes": nodes, "command": command, **spec},
            "backend_config": {"root": str(runs), "stop_grace_seconds": 2},
            "output_root": str(runs.parent / "outputs"),
        },
        poll_interval=0.2,
    )


def deferred_trigger(
    op: TrainingJobOperator, context: dict[str, Any]
) -> tuple[TrainingJobTrigger, TaskDeferred]:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert isinstance(deferred.value.trigger, TrainingJobTrigger)
    return deferred.value.trigger, deferred.value


async def fire(trigger: TrainingJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


def stop_job(runs: Path, handle: dict[str, Any]) -> None:
    LocalBackend(root=str(runs), stop_grace_seconds=1).stop(JobHandle.model_validate(handle))


def test_execute_saves_the_handle_and_defers_with_the_spec_timeout(
    runs: Path, context: dict[str, Any]
) -> None:
    op = operator(runs, "sleep 300", timeout_minutes=5)

    trigger, deferred = deferred_trigger(op, context)

    saved = context["task_state_store"].get(HANDLE_KEY)
    assert saved == trigger.handle
    assert saved["name"] == FIRST_ROUND_NAME
    assert deferred.method_name == "execute_complete"
    assert timedelta(minutes=4, seconds=50) < deferred.timeout <= timedelta(minutes=5)
    stop_job(runs, saved)


@pytest.mark.slow
def test_retry_after_the_launching_worker_died_reattaches_and_launches_once(
    runs: Path, context: dict[str, Any], tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    command = f"echo $RANK >> {starts}; sleep 300"
    worker = f"""
import os, signal, sys
sys.path[:0] = [{str(PROJECT_DIR / "plugins")!r}, {str(Path(__file__).parent)!r}]
from aliyun_training.backends.base import JobHandle
from aliyun_training.backends.local import LocalBackend
from test_training_operator import FileTaskStateStore, TaskInstanceIds, operator
from pathlib import Path

real_submit = LocalBackend.submit
def submit_then_die(self, spec, name):
    real_submit(self, spec, name)
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies before saving the job id
LocalBackend.submit = submit_then_die
store = FileTaskStateStore(Path({str(tmp_path / "state.json")!r}))
context = {{"ti": TaskInstanceIds(), "task_state_store": store}}
operator(Path({str(runs)!r}), {command!r}).execute(context)
"""
    died = subprocess.run([sys.executable, "-c", worker], check=False, capture_output=True, text=True)
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert context["task_state_store"].get(HANDLE_KEY) is None
    found = LocalBackend(root=str(runs)).find(FIRST_ROUND_NAME)
    assert found is not None
    launched = found.handle

    first_retry, _ = deferred_trigger(operator(runs, command), context)
    second_retry, _ = deferred_trigger(operator(runs, command), context)

    assert first_retry.handle["job_id"] == second_retry.handle["job_id"] == launched.job_id
    time.sleep(1)
    assert sorted(starts.read_text().split()) == ["0", "1"], "each node must have started exactly once"
    stop_job(runs, launched.model_dump())


def test_a_retry_returns_the_succeeded_job_its_round_launched_but_never_saved(
    runs: Path, context: dict[str, Any]
) -> None:
    trigger, _ = deferred_trigger(operator(runs, "true", nodes=1), context)
    assert asyncio.run(fire(trigger))["status"] == "succeeded"
    context["task_state_store"].delete(HANDLE_KEY)  # the worker died before saving the job id

    result = operator(runs, "true", nodes=1).execute(context)

    assert result["job_id"] == trigger.handle["job_id"] and result["status"] == "Succeeded"
    assert [path.parent.name for path in runs.glob("**/job.json")] == [FIRST_ROUND_NAME], "no second job"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "outcome", "cleared"),
    [("sleep 0.5; exit 4", "failed", False), ("true", "succeeded", True)],
    ids=["retried-after-a-failed-job", "cleared-after-a-succeeded-job"],
)
def test_a_retry_after_a_failure_and_a_clear_after_a_success_launch_a_new_job(
    runs: Path, context: dict[str, Any], command: str, outcome: str, cleared: bool
) -> None:
    earlier, _ = deferred_trigger(operator(runs, command, nodes=1), context)
    assert asyncio.run(fire(earlier))["status"] == outcome
    if cleared:
        context["ti"].max_tries = 1  # cleared after try 1: the new round begins at try 2

    again, _ = deferred_trigger(operator(runs, "sleep 300", nodes=1), context)

    assert again.handle["job_id"] != earlier.handle["job_id"]
    round_name = job_name(
        "retrain",
        "scheduled__2026-11-22T00:00:00+00:00",
        "train",
        -1,
        2 if cleared else 1,
        installation=INSTALLATION,
    )
    assert again.handle["name"] == round_name
    assert context["task_state_store"].get(HANDLE_KEY) == again.handle
    stop_job(runs, again.handle)


@pytest.mark.slow
def test_a_cleared_task_stops_the_job_its_earlier_round_still_runs_and_launches_its_own(
    runs: Path, context: dict[str, Any]
) -> None:
    # The cleared try's trigger may not have been killed (its on_kill not run) when the new try starts.
    first, _ = deferred_trigger(operator(runs, "sleep 300", nodes=1), context)
    context["ti"].max_tries = 1

    again, _ = deferred_trigger(operator(runs, "sleep 300", nodes=1), context)

    backend = LocalBackend(root=str(runs))
    assert backend.status(JobHandle.model_validate(first.handle)).state is JobState.STOPPED, (
        "two jobs of one task never run at once"
    )
    assert again.handle["name"] != first.handle["name"], "the new round runs a job of its own"
    stop_job(runs, again.handle)


def test_a_failed_rank_fails_the_task_naming_the_rank_with_its_last_lines(
    runs: Path, context: dict[str, Any]
) -> None:
    command = 'for i in $(seq 1 60); do echo "step $i rank $RANK"; done; [ "$RANK" != 1 ] || exit 5; sleep 60'
    op = operator(runs, command)
    trigger, _ = deferred_trigger(op, context)
    event = asyncio.run(fire(trigger))

    with pytest.raises(AirflowException) as failure:
        op.execute_complete(context, event)

    message = str(failure.value)
    assert "failed: node 1 (RANK=1) exited with code 5" in message
    assert "Last log lines of node 1:" in message
    assert "step 60 rank 1" in message and "step 11 rank 1" in message
    assert "step 10 rank 1" not in message, "only the last 50 lines belong in the error"
    assert "rank 0" not in message


@pytest.mark.slow
def test_a_script_error_on_rank_5_of_a_2x4_job_fails_the_task_naming_that_rank_and_its_node(
    runs: Path, context: dict[str, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    """torchrun as the declarations launch it, 2 nodes x 4 ranks: rank 5 raises, torchrun terminates
    its three siblings (SIGTERM) and the other node's ranks lose their peers. The task fails as
    user code, without a retry, and its log and error name rank 5 on node 1 as the origin."""
    launcher = (
        LAUNCHERS["torchrun"]
        .format(procs=4)
        .replace("torchrun", f"{Path(sys.executable).parent}/torchrun", 1)
    )
    op = operator(
        runs,
        f"{launcher} {RANKS_SCRIPT}",
        env={"PID_DIR": str(runs.parent / "pids"), "FAIL_RANK": "5", "FAIL_MODE": "raise"},
    )
    (runs.parent / "pids").mkdir(parents=True)
    op.retries = 3
    trigger, _ = deferred_trigger(op, context)
    event = asyncio.run(fire(trigger))

    with pytest.raises(TrainingJobFailed) as failure:
        op.execute_complete(context, event)

    first = "rank 5 (local_rank 1) on node 1 failed first"
    assert failure.value.failure.failure_class is FailureClass.USER_CODE
    assert op.retry_policy.evaluate(failure.value, 1, 3).action is RetryAction.FAIL
    assert first in str(failure.value) and "ValueError: batch of shape" in str(failure.value)
    assert first in capfd.readouterr().out, "the task log names it too"


#: A line of the job's output as the task log shows it: prefixed with the node it came from.
JOB_LINE = re.compile(r"\[node-\d\] line \d of rank \d")


@pytest.mark.slow
def test_the_train_log_interleaves_both_ranks_in_order_and_ends_with_the_final_status(
    runs: Path, context: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """What the train task's log shows, worker then triggerer: the ranks take turns (a turn file
    each), and one slow poll reads most lines at once, so order comes from the nodes, not the polls."""
    turns = tmp_path / "turns"
    turns.mkdir()
    (turns / "1-0").touch()
    command = (
        f"for i in 1 2 3; do while [ ! -e {turns}/$i-$RANK ]; do sleep 0.02; done; sleep 0.1; "
        'echo "line $i of rank $RANK"; '
        f"if [ $RANK = 0 ]; then touch {turns}/$i-1; else touch {turns}/$((i + 1))-0; fi; done"
    )
    op = operator(runs, command)
    op.poll_interval = 3
    trigger, _ = deferred_trigger(op, context)
    result = op.execute_complete(context, asyncio.run(fire(trigger)))

    log = capfd.readouterr().out.splitlines()
    job_lines = [(i, found.group()) for i, line in enumerate(log) if (found := JOB_LINE.search(line))]
    assert [text for _, text in job_lines] == [
        f"[node-{rank}] line {i} of rank {rank}" for i in (1, 2, 3) for rank in (0, 1)
    ]
    final = f"Job {trigger.handle['job_id']}: Running -> Succeeded"
    (final_at,) = [i for i, line in enumerate(log) if final in line]
    assert final_at > job_lines[-1][0], "the final status follows the job's last line"
    assert result["status"] == "Succeeded"


def test_a_deferral_timeout_stops_the_job_before_failing(runs: Path, context: dict[str, Any]) -> None:
    op = operator(runs, "sleep 300", timeout_minutes=1)
    trigger, _ = deferred_trigger(op, context)
    handle = trigger.job_handle

    with pytest.raises(AirflowException, match=r"did not finish within timeout_minutes=1 and was stopped"):
        op.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, context)

    assert LocalBackend(root=str(runs)).status(handle).state.value == "stopped"
    assert job_pids(f"{handle.job_id}:") == set()


def test_a_bad_spec_fails_without_retry_before_anything_is_launched(
    runs: Path, context: dict[str, Any]
) -> None:
    op = operator(runs, "true", nodes=0, env={"WORLD_SIZE": "8"})

    with pytest.raises(AirflowFailException) as failure:
        op.execute(context)

    message = str(failure.value)
    assert "nodes: Input should be greater than or equal to 1 (fix: use between 1 and 128 nodes)" in message
    assert "['WORLD_SIZE'] are injected by the platform" in message
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow
def test_a_succeeded_job_returns_its_result_with_wall_time_and_node_hours(
    runs: Path, context: dict[str, Any]
) -> None:
    op = operator(runs, "sleep 1", gpus_per_node=0)
    trigger, _ = deferred_trigger(op, context)
    event = asyncio.run(fire(trigger))

    result = op.execute_complete(context, event)

    assert result["status"] == "Succeeded" and result["backend"] == "local"
    assert result["job_id"] == trigger.handle["job_id"]
    assert result["wall_seconds"] >= 1.0
    assert result["node_hours"] == pytest.approx(2 * result["wall_seconds"] / 3600, rel=1e-3)
    assert result["output_uri"].endswith(f"/outputs/{trigger.handle['name']}")


def test_blocking_mode_waits_in_the_worker_and_returns_the_result(
    runs: Path, context: dict[str, Any]
) -> None:
    op = operator(runs, "echo hi from $RANK")
    op.deferrable = False

    result = op.execute(context)

    assert result["status"] == "Succeeded"
    assert result["display_name"] == FIRST_ROUND_NAME
