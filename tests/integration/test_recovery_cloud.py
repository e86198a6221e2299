"""Failure classes lead to their action on DLC and ACK, through the training operator and the emulators.

A ``config`` failure runs one job and the retry policy fails the task; a ``preemption`` runs two,
and the second is launched with ``RESUME_FROM`` set to the first's ``CHECKPOINT_DIR``. Each try
goes the way a deployment runs it: ``execute`` submits and defers, the trigger watches the job to its
end, ``execute_complete`` turns the event into the result or the classified error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.definitions.retry_policy import RetryAction
from airflow.sdk.exceptions import TaskDeferred

from aliyun_training.backends.ack.request import GROUP
from aliyun_training.backends.base import JobHandle, JobState, JobStatus
from aliyun_training.failures import FailureClass
from aliyun_training.monitor import JobMonitor
from aliyun_training.operators.recovery import TrainingJobFailed
from aliyun_training.operators.training import ATTEMPTS_KEY, TrainingJobOperator
from fakes.cloud import DLC_JOB_SETTINGS
from fakes.dlc import DlcEmulator, JobScript
from fakes.kube import replay_recorded
from fakes.kubernetes_fake import RECORDED, KubernetesFake, TrainingScript
from tests.integration import test_ack_recovery, test_dlc_backend, test_dlc_recovery
from tests.operator_harness import MemoryTaskStateStore, TaskInstanceIds, fire

if TYPE_CHECKING:
    from collections.abc import Callable

    from fakes.base import ManualClock

dlc = test_dlc_backend.dlc
studio = test_dlc_backend.studio
connected = test_dlc_backend.connected
clock = test_ack_recovery.clock
fake = test_ack_recovery.fake

FAST = [("Creating", 0.05), ("Queuing", 0.05), ("Running", 0.2)]


def run_try(
    op: TrainingJobOperator, try_number: int, store: MemoryTaskStateStore, settle: Callable[[], None]
) -> Any:
    """One try of the task: execute, and when it defers, the trigger's event into execute_complete."""
    context = {
        "ti": TaskInstanceIds(try_number=try_number, max_tries=2),
        "task_state_store": store,
        "task": op,
    }
    try:
        return op.execute(context)
    except TaskDeferred as deferred:
        settle()
        return op.execute_complete(context, asyncio.run(fire(deferred.trigger)))


def fail_try(
    op: TrainingJobOperator, try_number: int, store: MemoryTaskStateStore, settle: Callable[[], None]
) -> TrainingJobFailed:
    with pytest.raises(TrainingJobFailed) as failed:
        run_try(op, try_number, store, settle)
    return failed.value


def dlc_operator() -> TrainingJobOperator:
    return TrainingJobOperator(
        task_id="train",
        job={
            "spec": test_dlc_backend.spec(datasets=[]),
            "backend_config": {"workspace_id": "ws-1", "job_settings": DLC_JOB_SETTINGS},
            "output_root": "/mnt/output",
        },
        poll_interval=0.05,
        retries=2,
    )


def dlc_envs(dlc: DlcEmulator) -> list[dict[str, str]]:
    return [request.body.get("Envs") or {} for request in dlc.requests_for("CreateJob") if not request.fault]


@pytest.mark.slow
def test_a_config_failure_on_dlc_runs_one_job_and_fails_the_task(connected: DlcEmulator) -> None:
    connected.script_for(
        "retrain-train",
        JobScript(
            phases=FAST,
            final="Failed",
            reason_code="ErrImagePull",
            reason_message="Failed to pull image: not found",
            log_lines=[],
        ),
    )
    op, store = dlc_operator(), MemoryTaskStateStore()

    failed = fail_try(op, 1, store, lambda: time.sleep(0.5))

    assert failed.failure.failure_class is FailureClass.CONFIG
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.FAIL
    assert len(dlc_envs(connected)) == 1
    assert store[ATTEMPTS_KEY][0]["failure_class"] == "config"


@pytest.mark.slow
def test_a_preemption_on_dlc_runs_a_second_job_that_resumes(connected: DlcEmulator) -> None:
    connected.script_for(
        "retrain-train",
        JobScript(
            phases=FAST, final="Failed", reason_code="JobFailed", pod_sub_status={"worker-0": "Evicted"}
        ),
    )
    op, store = dlc_operator(), MemoryTaskStateStore()

    failed = fail_try(op, 1, store, lambda: time.sleep(0.5))
    decision = op.retry_policy.evaluate(failed, 1, 3)
    connected.script_for("retrain-train", JobScript(phases=FAST))
    result = run_try(op, 2, store, lambda: time.sleep(0.5))

    assert failed.failure.failure_class is FailureClass.PREEMPTION and decision.action is RetryAction.RETRY
    first, second = dlc_envs(connected)
    assert "RESUME_FROM" not in first and second["RESUME_FROM"] == first["CHECKPOINT_DIR"]
    assert (first["TRAINING_ATTEMPT"], second["TRAINING_ATTEMPT"]) == ("1", "2")
    assert [a["failure_class"] for a in result["attempts"]] == ["preemption", None]
    assert result["attempts"][1]["resume_from"] == first["CHECKPOINT_DIR"]


def ack_operator() -> TrainingJobOperator:
    spec = test_ack_recovery.spec(owner=None).model_dump(mode="json")
    return TrainingJobOperator(
        task_id="train",
        job={
            "spec": spec,
            "backend_config": {
                "kubernetes_conn_id": test_ack_recovery.CONN_ID,
                "namespace": test_ack_recovery.NS,
            },
            "output_root": "/mnt/output",
        },
        poll_interval=0.05,
        retries=2,
    )


def ack_env(op: TrainingJobOperator) -> dict[str, str]:
    """The master's environment in the PyTorchJob the cluster holds now."""
    hook = op._backend("arena")._hook()
    jobs = hook.custom_object_client.list_namespaced_custom_object(
        GROUP, "v1", test_ack_recovery.NS, "pytorchjobs"
    )
    [job] = jobs["items"]
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


def test_a_config_failure_on_ack_runs_one_job_and_fails_the_task(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    fake.default_script = TrainingScript(
        outcome="ExitCode", exit_code=127, failing_replica="master", log_lines=["python: not found"]
    )
    op, store = ack_operator(), MemoryTaskStateStore()

    failed = fail_try(op, 1, store, lambda: test_ack_recovery.advance(fake, clock, 30))

    assert failed.failure.failure_class is FailureClass.CONFIG, failed.failure.evidence
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.FAIL
    assert len(store[ATTEMPTS_KEY]) == 1


@pytest.mark.slow
def test_a_preemption_on_ack_runs_a_second_job_that_resumes(fake: KubernetesFake, clock: ManualClock) -> None:
    fake.default_script = TrainingScript(outcome="Evicted", failing_replica="master")
    op, store = ack_operator(), MemoryTaskStateStore()

    def settle() -> None:
        test_ack_recovery.advance(fake, clock, 30)

    failed = fail_try(op, 1, store, settle)
    first = ack_env(op)
    fake.default_script = TrainingScript()
    result = run_try(op, 2, store, settle)
    second = ack_env(op)

    assert failed.failure.failure_class is FailureClass.PREEMPTION, failed.failure.evidence
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.RETRY
    assert "RESUME_FROM" not in first and second["RESUME_FROM"] == first["CHECKPOINT_DIR"]
    assert [a["failure_class"] for a in result["attempts"]] == ["preemption", None]
    assert result["attempts"][0]["job_id"] != result["attempts"][1]["job_id"], "two jobs ran"


@pytest.mark.slow
def test_a_training_job_whose_image_cannot_be_pulled_fails_as_config_within_a_few_polls_and_frees_its_nodes(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    """The kubelet backs off pulling for ever; the task does not wait out its timeout_minutes (60)
    holding the GPU nodes: after BLOCKED_POLLS polls in a row it deletes the job and fails, config."""
    fake.default_script = TrainingScript(outcome="ImagePullBackOff")
    op, store = ack_operator(), MemoryTaskStateStore()
    started = time.monotonic()

    failed = fail_try(op, 1, store, lambda: test_ack_recovery.advance(fake, clock, 30))

    assert failed.failure.failure_class is FailureClass.CONFIG, failed.failure.evidence
    assert "ImagePullBackOff for 3 polls in a row" in failed.failure.evidence[0]
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.FAIL
    assert time.monotonic() - started < 30, "a few poll intervals (0.05 s), not the 60-minute timeout"
    deleted = [r for r in fake.requests if r.method == "DELETE" and "/pytorchjobs/" in r.path]
    assert len(deleted) == 1, "the job (and with it its pods) was deleted"


def test_a_job_with_a_bad_image_name_is_stopped_at_the_first_sight() -> None:
    """InvalidImageName is not retried by the kubelet: no poll later can see it pulled."""
    monitor = JobMonitor(
        _NoBackend(), JobHandle(backend="arena", job_id="j", name="j"), logging.getLogger("t")
    )
    pulling = JobStatus(
        state=JobState.PENDING, raw="Created", reason_code="ImagePullBackOff", reason="pod w-0"
    )
    invalid = pulling.model_copy(update={"reason_code": "InvalidImageName"})
    running = JobStatus(state=JobState.RUNNING, raw="Running")

    assert [monitor.give_up(s) is None for s in (pulling, pulling, running, pulling)] == [True] * 4, (
        "a back-off that clears in between starts the count again"
    )
    outcome = monitor.give_up(invalid)
    assert outcome is not None and outcome.failure is not None
    assert outcome.failure.failure_class is FailureClass.CONFIG


class _NoBackend:
    """give_up decides from the status alone; it calls nothing of the backend."""


RECORDED_KUBERNETES = {
    case["name"]: case
    for case in json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "kubernetes" / "recorded_failures.json").read_text()
    )["cases"]
}


RECORDED_DLC = {
    case["name"]: case
    for case in json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "dlc" / "recorded_failures.json").read_text()
    )["cases"]
}


@pytest.mark.slow
def test_a_worker_oom_killed_and_restarted_in_place_on_ack_fails_as_user_code_naming_its_node(
    fake: KubernetesFake, clock: ManualClock, capfd: pytest.CaptureFixture[str]
) -> None:
    """restartPolicy OnFailure: the kubelet restarted the worker's container in place three times
    (its OOMKilled end is only in lastState, the container now in CrashLoopBackOff) until the
    training-operator failed the job. Recorded statuses and events, replayed through the API."""
    crash_loop = RECORDED_KUBERNETES["worker OOMKilled repeatedly, CrashLoopBackOff (OnFailure)"]
    failed_job = RECORDED_KUBERNETES["master OOMKilled, pod Failed (restartPolicy Never)"]["job_conditions"]
    fake.default_script = TrainingScript(outcome=RECORDED)
    op, store = ack_operator(), MemoryTaskStateStore()

    def settle() -> None:
        test_ack_recovery.advance(fake, clock, 30)
        [job] = (
            op._backend("arena")
            ._hook()
            .custom_object_client.list_namespaced_custom_object(
                GROUP, "v1", test_ack_recovery.NS, "pytorchjobs"
            )["items"]
        )
        case = {**crash_loop, "job_conditions": failed_job}
        replay_recorded(case, job["metadata"]["name"], conn_id=test_ack_recovery.CONN_ID)

    failed = fail_try(op, 1, store, settle)
    log = capfd.readouterr().out

    assert failed.failure.failure_class is FailureClass.USER_CODE, failed.failure.evidence
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.FAIL
    assert any("worker-0" in line and "OOMKilled" in line for line in failed.failure.evidence)
    assert "Last log lines of node 1" in str(failed), "the worker is node 1, the failing one"
    assert "failed: user_code (pod" in log and "-worker-0: container pytorch OOMKilled" in log


@pytest.mark.slow
def test_a_dlc_job_whose_torchrun_was_stopped_from_outside_resumes_though_it_printed_a_traceback(
    connected: DlcEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    """DLC named no reason; the failed pod's log is torchrun's own, recorded when its process group
    got SIGTERM: a "death signal" warning, then a SignalException traceback. Not the script's bug."""
    connected.script_for(
        "retrain-train", JobScript(phases=FAST, final="Failed", log_lines=test_dlc_recovery.AGENT_STOPPED)
    )
    op, store = dlc_operator(), MemoryTaskStateStore()

    failed = fail_try(op, 1, store, lambda: time.sleep(0.5))
    log = capfd.readouterr().out

    assert failed.failure.failure_class is FailureClass.PREEMPTION, failed.failure.evidence
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.RETRY
    assert op.retry_policy.resumes(FailureClass.PREEMPTION)
    assert "failed: preemption (torchrun was stopped from outside" in log
    assert "Last log lines of node 0" in str(failed)


@pytest.mark.slow
def test_a_dlc_job_whose_image_cannot_be_pulled_fails_as_config_within_a_few_polls_and_is_stopped(
    connected: DlcEmulator,
) -> None:
    """The kubelet's pull back-off, read from the first pending pod's GetPodEvents while DLC prepares
    the job (EnvPreparing would last the hour): the task stops it after BLOCKED_POLLS polls."""
    pulls = RECORDED_DLC["image pull fails with manifest unknown while EnvPreparing"]["pod_events"]
    master = next(events for pod, events in pulls.items() if pod.endswith("-master-0"))
    connected.script_for(
        "retrain-train",
        JobScript(
            phases=[("Creating", 0.05), ("Queuing", 0.05), ("EnvPreparing", 3600.0)],
            pod_events={"master-0": master},
        ),
    )
    op, store = dlc_operator(), MemoryTaskStateStore()
    started = time.monotonic()

    failed = fail_try(op, 1, store, lambda: time.sleep(0.3))

    assert failed.failure.failure_class is FailureClass.CONFIG, failed.failure.evidence
    assert "ImagePullBackOff for 3 polls in a row" in failed.failure.evidence[0]
    assert op.retry_policy.evaluate(failed, 1, 3).action is RetryAction.FAIL
    assert time.monotonic() - started < 30, "a few poll intervals (0.05 s), not the hour"
    assert connected.count("StopJob") == 1, "the job, and with it its nodes, was stopped"
