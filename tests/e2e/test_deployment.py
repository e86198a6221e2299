"""The retraining DAG in a real deployment, driven only through the REST API and the CLI, under faults.

The pattern of apache/airflow issues #36090, #41231, #67227 and #15588: a triggerer or worker dies,
a user marks a deferred task failed, the cloud throttles. Each test asserts what the user sees (run
and task states, the Asset event, the manifest) and what the cloud saw (jobs created and stopped).
Runs of the DAG go one at a time (max_active_runs=1), so each test's run is the only one running.
Logical dates are on or after the DAG's start_date: Airflow creates no task instances before it.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.e2e.account import SECRETS, TRAIN_PREFIX, Account, Hold, dlc_lifetime
from tests.e2e.conftest import DAG_ID, latest_weekly_date
from tests.e2e.deployment import Deployment, wait_until
from tests.emulators.dlc import JobScript

pytestmark = pytest.mark.e2e
#: A whole cloud run on two cores: about a dozen task starts plus three deferrals.
RUN_TIMEOUT = 420.0
TRAIN_POLL_SECONDS = 5.0


def dlc_conf(**fields: object) -> dict[str, object]:
    """A DLC run's form; the environment (``Account.write_environments``) configures the rest."""
    return {"backend": "dlc", "nodes": 2, "gpus_per_node": 8, **fields}


def arena_conf() -> dict[str, object]:
    return {"backend": "arena", "nodes": 2, "gpus_per_node": 8}


def logical(version: str) -> str:
    return f"{version}T00:00:00Z"


def run_dlc(airflow: Deployment, account: Account, version: str, **fields: object) -> str:
    account.put_dataset(version)
    return airflow.trigger(DAG_ID, dlc_conf(**fields), logical(version))


def assert_succeeded(airflow: Deployment, run_id: str) -> dict[str, str | None]:
    state = airflow.wait_for_run(DAG_ID, run_id, RUN_TIMEOUT)
    states = airflow.task_states(DAG_ID, run_id)
    assert state == "success", f"run {run_id} {state}: {states}; logs in {airflow.logs}"
    return states


def manifest_of(account: Account, job_id: str) -> dict:
    manifests = [m for m in account.artifact_manifests() if m["job"]["job_id"] == job_id]
    assert len(manifests) == 1, f"one artifact set names job {job_id}"
    return manifests[0]


def test_a_bad_trigger_form_value_is_rejected_by_the_api_before_a_run_exists(airflow: Deployment) -> None:
    before = _manual_runs(airflow)

    answer = airflow.api(
        "POST", f"/dags/{DAG_ID}/dagRuns", json={"conf": {"nodes": 0}, "logical_date": logical("2026-11-24")}
    )

    assert answer.status_code == 400
    assert "nodes" in answer.json()["detail"] and "minimum of 1" in answer.json()["detail"]
    # The form may override only the allow-listed settings, never e.g. the cluster's namespace.
    conf = {"backend": "arena", "backend_overrides": {"namespace": "kube-system"}}
    answer = airflow.api(
        "POST", f"/dags/{DAG_ID}/dagRuns", json={"conf": conf, "logical_date": logical("2026-11-24")}
    )
    assert answer.status_code == 400
    assert "backend_overrides" in answer.json()["detail"] and "namespace" in answer.json()["detail"]
    assert _manual_runs(airflow) == before


def test_the_scheduled_run_of_the_latest_week_trains_on_the_local_backend(airflow: Deployment) -> None:
    version = latest_weekly_date(datetime.now(UTC))
    scheduled = _scheduled_runs(airflow)
    assert [run["logical_date"][:10] for run in scheduled] == [version], "no catch-up of older weeks"

    states = assert_succeeded(airflow, scheduled[0]["dag_run_id"])

    assert states["train"] == states["publish_artifacts"] == "success"
    artifacts = airflow.xcom(DAG_ID, scheduled[0]["dag_run_id"], "publish_artifacts")
    manifest = json.loads(Path(artifacts["manifest_uri"]).read_text())
    assert manifest["dataset"]["version"] == version and manifest["job"]["backend"] == "local"


def test_a_dlc_run_succeeds_with_an_asset_event_and_a_manifest_naming_the_job(
    airflow: Deployment, account: Account
) -> None:
    run_id = run_dlc(airflow, account, "2026-11-15")

    states = assert_succeeded(airflow, run_id)

    assert states["stage_dataset"] == states["build_image"] == states["check_rdma"] == "success"
    job = airflow.xcom(DAG_ID, run_id, "train")
    [create] = account.creates()
    assert job["job_id"] and job["display_name"] == create["DisplayName"]
    manifest = manifest_of(account, job["job_id"])
    assert manifest["dataset"]["version"] == "2026-11-15"
    assert manifest["runtime"]["digest"].startswith("sha256:")
    events = [e for e in airflow.asset_events("cifar10_model") if e["extra"].get("job_id") == job["job_id"]]
    assert len(events) == 1 and events[0]["extra"]["manifest_uri"].endswith("/manifest.json")


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


def test_a_killed_and_restarted_triggerer_loses_no_job_and_submits_none_twice(
    airflow: Deployment, account: Account
) -> None:
    account.dlc.script_for(TRAIN_PREFIX, _long_train())
    creates, stops = len(account.creates()), account.stops()
    run_id = run_dlc(airflow, account, "2026-10-25")
    try:
        airflow.wait_for_task(DAG_ID, run_id, "train", {"deferred"}, RUN_TIMEOUT)
        airflow.kill_service("triggerer", signal.SIGKILL)
        time.sleep(2 * TRAIN_POLL_SECONDS)
        airflow.start_service("triggerer")
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
    account.dlc.script_for(TRAIN_PREFIX, _long_train(600.0))
    creates, stops = len(account.creates()), account.stops()
    account.hold = Hold(TRAIN_PREFIX)
    run_id = run_dlc(airflow, account, "2026-11-01")
    try:
        assert account.hold.arrived.wait(RUN_TIMEOUT), "train submitted its job"
        worker = "worker" if "worker" in airflow.services() else "scheduler"
        airflow.kill_service(worker, signal.SIGKILL)
        account.hold.release.set()
        airflow.start_service(worker)
        _wait_for_try(airflow, run_id, "train", try_number=2, state="deferred")
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
    account.dlc.script_for(TRAIN_PREFIX, _long_train())
    run_id = run_dlc(airflow, account, "2026-11-08")
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


def test_a_backfill_over_three_weeks_stages_trains_and_publishes_each_with_one_image_build(
    airflow: Deployment, account: Account
) -> None:
    weeks = ["2026-10-04", "2026-10-11", "2026-10-18"]
    for week in weeks:
        account.put_dataset(week)
    creates = len(account.creates())

    account.write_environments(repository="train-weekly")
    try:
        airflow.cli(
            "backfill", "create", "--dag-id", DAG_ID, "--from-date", weeks[0], "--to-date", weeks[-1],
            "--dag-run-conf", json.dumps(dlc_conf()),
        )  # fmt: skip
        runs = _wait_for_backfill(airflow, weeks)
    finally:
        account.write_environments()

    assert sorted(runs) == weeks and set(runs.values()) == {"success"}
    staged = sorted(p.name for p in (account.cpfs / "datasets" / "cifar10").iterdir() if p.name in weeks)
    assert staged == weeks, "three dataset versions staged"
    assert len(account.creates()) == creates + 3, "three training jobs"
    versions = {m["dataset"]["version"] for m in account.artifact_manifests()}
    assert set(weeks) <= versions, "three artifact sets"
    assert account.builds("train-weekly") == 1, "the image was built once"


def test_no_secret_reaches_any_service_or_task_log(airflow: Deployment) -> None:
    logs = [p for base in (airflow.logs, airflow.root / "task-logs") for p in base.rglob("*") if p.is_file()]
    assert len(logs) > 10
    leaks = [(p.name, s) for p in logs for s in SECRETS if s in p.read_text(errors="replace")]
    assert leaks == []


def _long_train(running: float = 60.0) -> JobScript:
    return dlc_lifetime(running=running)


def _manual_runs(airflow: Deployment) -> set[str]:
    """Run ids of runs triggered by hand (the scheduler may add its own run at any moment)."""
    return {run["dag_run_id"] for run in airflow.runs(DAG_ID) if run["run_type"] == "manual"}


def _scheduled_runs(airflow: Deployment) -> list[dict]:
    """The scheduled runs, once the scheduler has created the first after the DAG was turned on."""
    found: dict[str, list[dict]] = {}

    def created() -> bool:
        found["runs"] = [run for run in airflow.runs(DAG_ID) if run["run_type"] == "scheduled"]
        return bool(found["runs"])

    wait_until(created, 120, "the scheduler's first run after the DAG was turned on")
    return found["runs"]


def _wait_for_try(airflow: Deployment, run_id: str, task_id: str, try_number: int, state: str) -> None:
    seen: dict[str, dict] = {}

    def reached() -> bool:
        seen["ti"] = airflow.task_instance(DAG_ID, run_id, task_id)
        return seen["ti"]["try_number"] == try_number and seen["ti"]["state"] == state

    wait_until(reached, RUN_TIMEOUT, f"{task_id} try {try_number} in {state}", lambda: seen)


def _wait_for_backfill(airflow: Deployment, weeks: list[str]) -> dict[str, str]:
    runs: dict[str, str] = {}

    def finished() -> bool:
        runs.clear()
        runs.update(
            (run["logical_date"][:10], run["state"])
            for run in airflow.runs(DAG_ID)
            if run["run_type"] == "backfill"
        )
        return len(runs) == len(weeks) and all(state in ("success", "failed") for state in runs.values())

    wait_until(finished, len(weeks) * RUN_TIMEOUT, "the backfill to finish", lambda: runs, interval=2.0)
    return runs
