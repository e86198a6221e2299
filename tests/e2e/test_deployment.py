"""The retraining DAG in a real deployment, driven only through the REST API and the CLI: its runs.

The form's validation, the scheduled weekly run, a DLC run, a backfill, and a second deployment
sharing the account. Each test
asserts what the user sees (run and task states, the Asset event, the manifest) and what the cloud
saw (jobs created, images built). Runs under faults are in test_failures.py, against a deployment
of its own beside this module's.
Logical dates are on or after the DAG's start_date: Airflow creates no task instances before it.
"""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from aliyun_training.installation import derived_installation_id
from aliyun_training.kubernetes.names import INSTALLATION_LABEL
from aliyun_training.model_registry.mlflow import champion_alias
from aliyun_training.pages.urls import pipeline_page
from aliyun_training.pipelines.folder import BROKEN_DECLARATION_PREFIX
from aliyun_training.pipelines.reconciler import RECONCILER_DAG_ID
from fakes.account import TRAIN_PREFIX, Account, dlc_lifetime, kube_lifetime
from fakes.deployment import ADMIN, PROJECT_DIR, Deployment, wait_until
from tests.e2e.browser import browser
from tests.e2e.conftest import APPROVED_DAG_ID, BROKEN_FILE, DAG_ID, latest_weekly_date, shared_registry
from tests.e2e.runs import (
    RUN_TIMEOUT,
    arena_conf,
    assert_no_secret_in_logs,
    assert_succeeded,
    dlc_conf,
    from_train,
    logical,
    manifest_of,
    run_dlc,
)

if TYPE_CHECKING:
    from fakes.dlc import EmulatedJob

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e-runs")]


@pytest.fixture(scope="module")
def scheduled_runs() -> bool:
    """This module checks that the scheduler, running, starts no run for the week under way when the
    DAG is turned on, although that week's version is there to train on."""
    return True


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


def test_a_new_user_turns_the_pipeline_on_from_the_form_and_its_run_trains_alone_with_its_pages(
    airflow: Deployment, shots: Path
) -> None:
    """In a browser, as the README's first hour goes: sign in, trigger cifar10_retrain with the
    form's defaults (which also turns the DAG on), and follow the run's links. Turning a weekly
    pipeline on schedules its next week, so the run does not queue behind a scheduled one waiting
    for data, nor trains the same version twice."""
    airflow.pause(DAG_ID)  # as deployed: paused at creation, for the form to turn on
    with browser(airflow.url, shots) as user:
        user.sign_in(ADMIN, airflow.password, f"/dags/{DAG_ID}")
        user.trigger_with_the_forms_defaults(DAG_ID)
        [run] = _wait_for_manual_runs(airflow, 1)
        states = assert_succeeded(airflow, run["dag_run_id"])
        report_link = user.extra_link(DAG_ID, run["dag_run_id"], "publish_artifacts", "Run report")
        report = user.open(report_link, "run-report")

        dry_run = airflow.trigger(DAG_ID, {"dry_run": True}, logical("2026-11-29"))
        assert airflow.wait_for_run(DAG_ID, dry_run, RUN_TIMEOUT) == "success"
        plan_link = user.extra_link(DAG_ID, dry_run, "show_plan", "Run plan")
        plan = user.open(plan_link, "run-plan")
        pipeline = user.open(airflow.url + pipeline_page(DAG_ID), "pipeline-runs")
        user.open(f"{airflow.url}/plugin/aliyun-training", "browse-training-pipelines")

    assert states["train"] == states["publish_artifacts"] == "success"
    assert airflow.ok("GET", f"/dags/{DAG_ID}")["is_paused"] is False, "the form turned the DAG on"
    assert [r["run_type"] for r in airflow.runs(DAG_ID)] == ["manual", "manual"], "no scheduled run"
    next_run = datetime.fromisoformat(airflow.ok("GET", f"/dags/{DAG_ID}")["next_dagrun_run_after"])
    assert next_run > datetime.now(UTC), "the first scheduled run is the next week's"
    version = latest_weekly_date(datetime.now(UTC))
    artifacts = airflow.xcom(DAG_ID, run["dag_run_id"], "publish_artifacts")
    manifest = json.loads(Path(artifacts["manifest_uri"]).read_text())
    assert manifest["dataset"]["version"] == version and manifest["job"]["backend"] == "local"
    # The pipeline's first model became its champion, announced once.
    assert manifest["promotion"]["promoted"] is True
    champions = [e["extra"]["run_id"] for e in airflow.asset_events("cifar10_champion")]
    assert champions == [run["dag_run_id"]]
    # The links are http pages of the deployment, behind its login, showing this run's files.
    assert report_link.startswith(f"{airflow.url}/aliyun-training/runs/{DAG_ID}/")
    assert manifest["job"]["job_id"] in report and "Open this run in Airflow" in report
    assert plan_link.startswith(f"{airflow.url}/aliyun-training/runs/{DAG_ID}/")
    assert "Dry run on local" in plan and "COST CEILING" in plan.upper()
    assert run["dag_run_id"] in pipeline and dry_run in pipeline and version in pipeline
    # The API server reads the champion from its Asset's state: the first one, nothing before it.
    assert re.search(rf"\nChampion\n(v\d+ · )?dataset {version}\nNo champion before it\.\n", pipeline)


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


def test_a_backfill_over_three_weeks_stages_trains_and_publishes_each_with_one_image_build(
    airflow: Deployment, account: Account
) -> None:
    weeks = ["2026-10-04", "2026-10-11", "2026-10-18"]
    for week in weeks:
        account.put_dataset(week)
    creates = len(account.creates())

    champions = len(airflow.asset_events("cifar10_champion"))

    account.write_environments(repository="train-weekly")
    # What is checked is staging, training, publishing and the one build: the preflight that the
    # DLC and throttled runs check is skipped, three runs' worth of task starts.
    try:
        airflow.cli(
            "backfill", "create", "--dag-id", DAG_ID, "--from-date", weeks[0], "--to-date", weeks[-1],
            "--dag-run-conf", json.dumps(dlc_conf(skip_preflight=True)),
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
    # Three candidates, none promoted: a backfill retrains the past, it does not replace the champion.
    decisions = [m["promotion"] for m in account.artifact_manifests() if m["dataset"]["version"] in weeks]
    assert len(decisions) == 3 and not any(d["promoted"] for d in decisions)
    assert all("backfill" in d["reason"] for d in decisions)
    assert len(airflow.asset_events("cifar10_champion")) == champions
    # Each is a version in the (embedded) MLflow registry, with its week, and none is the champion.
    from mlflow.tracking import MlflowClient

    registered = MlflowClient(tracking_uri=shared_registry(account)).search_model_versions("name = 'cifar10'")
    backfilled = [v for v in registered if v.tags["lineage.dataset_version"] in weeks]
    assert sorted(v.tags["lineage.dataset_version"] for v in backfilled) == weeks
    assert not any(alias.startswith(("champion", "challenger")) for v in backfilled for alias in v.aliases)
    assert account.builds("train-weekly") == 1, "the image was built once"


# Two deployments' runs one after the other (DLC, then ACK, then two reconciler runs): about 240 s
# on the 2-core machine with the suite beside it, once over 600 s when it was loaded most.
@pytest.mark.timeout(1200)
def test_two_deployments_sharing_a_workspace_and_a_namespace_each_stop_only_their_own_orphans(
    airflow: Deployment, second_airflow: Deployment, account: Account
) -> None:
    """Production (``airflow``) and staging (``second_airflow``) run the same DAG against one DLC
    workspace and one ACK namespace, with the same run ids, and no installation_id set: each
    derives its own from its API server's address. With no triggerer running, no on_kill stops a job; a task
    marked failed fails its run, whose on_failure_callback stops that deployment's job only, and a
    run marked failed and deleted is left to that deployment's reconciler, which stops its own job
    and never the other deployment's of the same run. Both register candidates in one MLflow store
    under one model name, and each promotes only its own champion."""
    production, staging = airflow, second_airflow
    ids = {
        name: installation_of(deployment) for name, deployment in (("prod", production), ("staging", staging))
    }
    assert ids["prod"] != ids["staging"], "two API servers, two installation ids"
    account.dlc.script_for(TRAIN_PREFIX, dlc_lifetime(3600.0))
    account.kube.script_for(TRAIN_PREFIX, kube_lifetime(3600.0))
    short = from_train(account)
    try:
        # The same run on DLC in both: production's callback stops production's job only.
        account.put_dataset("2026-11-01")
        runs = {
            name: d.trigger(DAG_ID, dlc_conf(**short), logical("2026-11-01"), run_id="retrain-2026-11-01")
            for name, d in (("prod", production), ("staging", staging))
        }
        dlc = {
            name: dlc_train_job(d, account, runs[name], ids[name])
            for name, d in (("prod", production), ("staging", staging))
        }
        production.mark_failed(DAG_ID, runs["prod"], "train")
        assert production.wait_for_run(DAG_ID, runs["prod"], RUN_TIMEOUT) == "failed"
        wait_until(lambda: dlc["prod"].stop_requested_at is not None, RUN_TIMEOUT, "production's callback")
        assert dlc["staging"].stop_requested_at is None, "the callback left staging's job of the same run"
        staging.mark_failed(DAG_ID, runs["staging"], "train")
        wait_until(lambda: dlc["staging"].stop_requested_at is not None, RUN_TIMEOUT, "staging's callback")

        # The same run on ACK in both, then deleted in both: each reconciler stops its own job only.
        production.start_service("triggerer")
        arena = {
            name: d.trigger(
                DAG_ID, {**arena_conf(), **short}, logical("2026-11-08"), run_id="retrain-2026-11-08"
            )
            for name, d in (("prod", production), ("staging", staging))
        }
        names = {
            name: ack_train_job(d, account, arena[name], ids[name])
            for name, d in (("prod", production), ("staging", staging))
        }
        for name, deployment in (("prod", production), ("staging", staging)):
            deployment.mark_run_failed(DAG_ID, arena[name])
            deployment.delete_run(DAG_ID, arena[name])
        assert deleted_crs(account) == set()
        stopped_by_production = reconcile(production, {"grace_minutes": 0}, "2026-12-01")
        after_production = deleted_crs(account)
        stopped_by_staging = reconcile(staging, {"grace_minutes": 0}, "2026-12-01")
    finally:
        for deployment in (production, staging):
            deployment.pause(RECONCILER_DAG_ID)
        production.start_service("triggerer")
        account.scripts()

    stopped = [(e["name"], e["action"], e["task_state"]) for e in stopped_by_production]
    assert stopped == [(names["prod"], "stopped", None)], "its task instance no longer exists"
    assert after_production == {names["prod"]}, "production's reconciler deleted production's CR only"
    assert [(e["name"], e["action"]) for e in stopped_by_staging] == [(names["staging"], "stopped")]
    assert deleted_crs(account) == {names["prod"], names["staging"]}
    # Each listed only its own jobs: not the other's, not the DLC jobs its callback had stopped.
    assert {e["owner"]["installation"] for e in stopped_by_production} == {ids["prod"]}
    assert {e["owner"]["installation"] for e in stopped_by_staging} == {ids["staging"]}

    # Both register into one MLflow store, one model name: each run's promotion moves only its own
    # deployment's champion alias (production's first model, or the one an earlier test promoted).
    staging.start_service("triggerer")
    account.put_dataset("2026-09-06")  # a date no other run of the module's deployment has
    shared = {
        name: d.trigger(DAG_ID, dlc_conf(**short), logical("2026-09-06"), run_id="retrain-2026-09-06")
        for name, d in (("prod", production), ("staging", staging))
    }
    for name, deployment in (("prod", production), ("staging", staging)):
        assert deployment.wait_for_run(DAG_ID, shared[name], RUN_TIMEOUT) == "success", name
    from mlflow.tracking import MlflowClient

    registry = MlflowClient(tracking_uri=shared_registry(account), registry_uri=shared_registry(account))
    for name in ("prod", "staging"):
        champion = registry.get_model_version_by_alias("cifar10", champion_alias(ids[name]))
        assert champion.tags["lineage.installation"] == ids[name], f"{name}'s alias names its own model"
    staging_run = registry.get_model_version_by_alias("cifar10", champion_alias(ids["staging"]))
    assert staging_run.tags["lineage.run_id"] == "retrain-2026-09-06", "staging's first model is its champion"


def installation_of(deployment: Deployment) -> str:
    """The id a deployment with no installation_id set derives from its API server's address."""
    return derived_installation_id(deployment.env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])


def dlc_train_job(deployment: Deployment, account: Account, run_id: str, installation: str) -> EmulatedJob:
    """Once the run's train task deferred, kill the triggerer: the DLC job the deployment launched."""
    deployment.wait_for_task(DAG_ID, run_id, "train", {"deferred"}, RUN_TIMEOUT)
    deployment.kill_service("triggerer", signal.SIGKILL)  # no on_kill: only the callback may stop it
    tags = [body["Settings"]["Tags"] for body in account.creates()]
    owned = [
        t for t in tags if (t.get("airflow-installation"), t.get("airflow-run-id")) == (installation, run_id)
    ]
    assert len(owned) == 1, f"one train job of {installation} in run {run_id}: {tags}"
    return account.dlc_job(owned[0]["airflow-job-name"])


def ack_train_job(deployment: Deployment, account: Account, run_id: str, installation: str) -> str:
    """Once the run's train task deferred, kill the triggerer: the name of the CR it created."""
    deployment.wait_for_task(DAG_ID, run_id, "train", {"deferred"}, RUN_TIMEOUT)
    deployment.kill_service("triggerer", signal.SIGKILL)
    metadata = [body["metadata"] for body in account.kube_creates()]
    owned = [
        m["name"]
        for m in metadata
        if (m["labels"].get(INSTALLATION_LABEL), m["annotations"].get("aliyun-training/airflow-run-id"))
        == (installation, run_id)
    ]
    assert len(owned) == 1, f"one train job of {installation} in run {run_id}: {metadata}"
    return owned[0]


def deleted_crs(account: Account) -> set[str]:
    """The training CRs a DELETE request reached."""
    return {
        r.path.rsplit("/", 1)[-1]
        for r in account.kube.requests
        if r.method == "DELETE"
        and "/pytorchjobs/" in r.path
        and r.path.rsplit("/", 1)[-1].startswith(TRAIN_PREFIX)
    }


def reconcile(deployment: Deployment, conf: dict[str, object], day: str) -> list[dict]:
    """Run the deployment's reconciler DAG once; its report."""
    deployment.unpause(RECONCILER_DAG_ID)
    run_id = deployment.trigger(RECONCILER_DAG_ID, conf, logical(day))
    assert deployment.wait_for_run(RECONCILER_DAG_ID, run_id, RUN_TIMEOUT) == "success"
    return deployment.xcom(RECONCILER_DAG_ID, run_id, "stop_orphaned_jobs")


#: A pipeline that retrains when a version lands: CIFAR-10's dataset and code, on DLC (its form's
#: default backend, so its runs list the emulated OSS), a watcher polling every 5 s.
LANDING_DAG_ID = "cifar10_on_landing"
LANDING_POLL_SECONDS = 5
LANDING_DECLARATION = {
    "pipeline": {"dag_id": LANDING_DAG_ID, "on_new_version": {"poll_seconds": LANDING_POLL_SECONDS}},
    "dataset": {"name": "cifar10"},
    # A model of its own: a deployment refuses two declarations of one model (they would share a
    # champion), and cifar10_retrain declares cifar10.
    "artifacts": {"model": "cifar10_landing"},
    "training": {
        "code_dir": str(PROJECT_DIR / "include" / "training"),
        "command": "{torchrun} cifar10_ddp.py",
    },
    "resources": {"nodes": 2, "gpus_per_node": 8},
    "image": {"context_dir": str(PROJECT_DIR / "include" / "docker")},
    "backends": {"dlc": {"environment": "dlc.json"}},
}


def test_a_version_landing_in_oss_starts_one_run_that_takes_it_and_no_second_one(
    airflow: Deployment, account: Account
) -> None:
    """The pipeline is declared and turned on; a watcher takes the versions already in OSS as its
    baseline; a version lands with its marker: one run starts within a poll and configures that
    version, and no other run follows. The run is stopped once configured, before it trains."""
    declaration = Path(airflow.env["ALIYUN_TRAINING_PIPELINES_DIR"]) / f"{LANDING_DAG_ID}.yaml"
    account.put_dataset("2026-12-06")
    jobs, builds = len(account.creates(prefix="")), len(account.acr.builds)
    declaration.write_text(yaml.safe_dump(LANDING_DECLARATION))
    try:
        _reparse(airflow, DAG_ID)  # the declarations folder is read when the DAG file is parsed
        airflow.wait_for_dag(LANDING_DAG_ID)
        airflow.unpause(LANDING_DAG_ID)
        _reparse(airflow, LANDING_DAG_ID)  # Airflow starts the watchers of DAGs on when it parses them
        watermark = _wait_for_state(airflow, f"{LANDING_DAG_ID}_versions", "new_versions")
        account.put_dataset("2026-12-13")
        landed = time.monotonic()
        [run] = _wait_for_asset_runs(airflow, 1, LANDING_POLL_SECONDS + 25)
        started_after = time.monotonic() - landed
        airflow.wait_for_task(LANDING_DAG_ID, run["dag_run_id"], "configure", {"success"}, RUN_TIMEOUT)
        airflow.mark_run_failed(LANDING_DAG_ID, run["dag_run_id"])
        dataset = airflow.xcom(LANDING_DAG_ID, run["dag_run_id"], "configure", key="dataset")
        taken = _wait_for_state(airflow, f"{LANDING_DAG_ID}_versions", "taken_version")
        time.sleep(3 * LANDING_POLL_SECONDS)
        runs = [r for r in airflow.runs(LANDING_DAG_ID) if r["run_type"] == "asset_triggered"]
        events = airflow.asset_events(f"{LANDING_DAG_ID}_versions")
    finally:
        airflow.pause(LANDING_DAG_ID)
        declaration.unlink()
        _reparse(airflow, DAG_ID)  # its DAG and its watcher go

    assert "2026-12-06" in watermark["versions"] and "2026-12-13" not in watermark["versions"], "the baseline"
    assert started_after < LANDING_POLL_SECONDS + 25
    assert (dataset["version"], taken) == ("2026-12-13", "2026-12-13"), "the run trains on the version"
    assert dataset["source_uri"].endswith("/datasets/cifar10/2026-12-13/")
    assert [r["dag_run_id"] for r in runs] == [run["dag_run_id"]], "one run, none after a few more polls"
    assert [e["extra"]["payload"]["version"] for e in events] == ["2026-12-13"], "announced once"
    assert (len(account.creates(prefix="")), len(account.acr.builds)) == (jobs, builds), "nothing trained"


def _reparse(airflow: Deployment, dag_id: str) -> None:
    """Have the DAG processor parse ``dag_id``'s file now (the module parses it once an hour)."""
    token = airflow.ok("GET", f"/dags/{dag_id}/details")["file_token"]
    airflow.ok("PUT", f"/parseDagFile/{token}")


def _wait_for_state(airflow: Deployment, asset_name: str, key: str) -> Any:
    """The value under ``key`` in the Asset's state store, once there is one."""
    found: dict[str, Any] = {}

    def stored() -> bool:
        [asset] = airflow.ok("GET", "/assets", params={"name_pattern": asset_name})["assets"]
        answer = airflow.api("GET", f"/assets/{asset['id']}/state-store/{key}")
        found["value"] = answer.json()["value"] if answer.status_code == 200 else None
        return answer.status_code == 200

    wait_until(stored, 120, f"{key} in the state store of {asset_name}")
    return found["value"]


def _wait_for_asset_runs(airflow: Deployment, count: int, timeout: float) -> list[dict]:
    found: dict[str, list[dict]] = {}

    def started() -> bool:
        runs = airflow.runs(LANDING_DAG_ID)
        found["runs"] = [r for r in runs if r["run_type"] == "asset_triggered"]
        return len(found["runs"]) >= count

    wait_until(started, timeout, f"{count} asset-triggered run(s) of {LANDING_DAG_ID}", lambda: found)
    return found["runs"]


def test_a_broken_declaration_shows_its_error_and_hides_no_pipeline_whose_approval_run_completes(
    airflow: Deployment, shots: Path
) -> None:
    """One team's misspelled key, in the folder since the deployment started: what the dag-processor
    recorded keeps every pipeline active, the broken file is a failing DAG of its own, and a run of
    another pipeline that waits for a person completes once answered (the file does not strand it)."""
    broken = f"{BROKEN_DECLARATION_PREFIX}{BROKEN_FILE}"
    dags = {dag["dag_id"]: dag for dag in airflow.ok("GET", "/dags", params={"limit": 100})["dags"]}
    assert {DAG_ID, APPROVED_DAG_ID, broken} <= set(dags)
    assert not any(dag["is_stale"] for dag in dags.values())
    assert f"{BROKEN_FILE}: - artifacts.modle: Extra inputs are not permitted" in dags[broken]["description"]
    assert airflow.ok("GET", "/importErrors")["total_entries"] == 0, "the DAG file itself loads"

    airflow.unpause(APPROVED_DAG_ID)
    run_id = airflow.trigger(APPROVED_DAG_ID, {}, logical("2026-11-26"))
    airflow.wait_for_task(APPROVED_DAG_ID, run_id, "approve_promotion", {"awaiting_input"}, RUN_TIMEOUT)
    with browser(airflow.url, shots) as user:
        user.sign_in(ADMIN, airflow.password, f"/dags/{DAG_ID}")
        listed = user.open(f"{airflow.url}/dags", "dags-beside-a-broken-declaration", showing=broken)
        index = user.open(f"{airflow.url}/aliyun-training/", "pipelines-index-with-a-broken-declaration")
        docs = user.dag_docs(broken, showing="artifacts.modle")
    task = f"/dags/{APPROVED_DAG_ID}/dagRuns/{run_id}/taskInstances/approve_promotion/-1/hitlDetails"
    airflow.ok("PATCH", task, json={"chosen_options": ["Approve"], "params_input": {}})

    assert airflow.wait_for_run(APPROVED_DAG_ID, run_id, RUN_TIMEOUT) == "success"
    assert airflow.task_states(APPROVED_DAG_ID, run_id)["promote"] == "success"
    assert airflow.xcom(APPROVED_DAG_ID, run_id, "promote")["promoted"] is True
    assert DAG_ID in listed and APPROVED_DAG_ID in listed and broken in listed
    assert broken in index and "artifacts.modle" in index, "the pipelines index lists the broken file"
    assert "artifacts.modle: Extra inputs are not permitted" in docs, "the DAG's docs show the error"
    assert f"Pipeline declaration {BROKEN_FILE} did not load" in docs


def test_no_secret_reaches_any_service_or_task_log(airflow: Deployment) -> None:
    assert_no_secret_in_logs(airflow)


def _manual_runs(airflow: Deployment) -> set[str]:
    """Run ids of runs triggered by hand (the scheduler may add its own run at any moment)."""
    return {run["dag_run_id"] for run in airflow.runs(DAG_ID) if run["run_type"] == "manual"}


def _wait_for_manual_runs(airflow: Deployment, count: int) -> list[dict]:
    """The manual runs, once the form's submission has created ``count`` of them."""
    found: dict[str, list[dict]] = {}

    def created() -> bool:
        found["runs"] = [run for run in airflow.runs(DAG_ID) if run["run_type"] == "manual"]
        return len(found["runs"]) >= count

    wait_until(created, 60, "the run the trigger form submitted")
    return found["runs"]


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
