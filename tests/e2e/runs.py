"""What the end-to-end scenarios do with a deployment: trigger the DAG, wait for its runs, read results.

Each test module drives a deployment of its own (the ``airflow`` fixture is module-scoped), so the
modules can run side by side; runs of the DAG within one deployment go one at a time
(max_active_runs=1), so each test's run is the only one running there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakes.account import SECRETS, Account, dlc_lifetime
from fakes.deployment import Deployment, wait_until
from tests.e2e.conftest import DAG_ID

if TYPE_CHECKING:
    from fakes.dlc import JobScript

#: A whole cloud run on two cores: about a dozen task starts plus three deferrals.
RUN_TIMEOUT = 420.0
#: The train task's poll interval in the DAG.
TRAIN_POLL_SECONDS = 5.0


def dlc_conf(**fields: object) -> dict[str, object]:
    """A DLC run's form; the environment (``Account.write_environments``) configures the rest."""
    return {"backend": "dlc", "nodes": 2, "gpus_per_node": 8, **fields}


def from_train(account: Account) -> dict[str, object]:
    """Form fields for a run whose checks start at train: a pinned image (no build, no image or
    fabric check) and no preflight. A scenario about the train task's job then waits for fewer
    task starts (the failures module alone: 256 s instead of 286 s); whole runs are checked by the
    scenarios of whole runs."""
    return {"image": f"{account.registry.host}/ml/train:latest", "skip_preflight": True}


def arena_conf() -> dict[str, object]:
    """An ACK run's form; the environment configures the rest."""
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


def long_train(running: float = 60.0) -> JobScript:
    return dlc_lifetime(running=running)


def wait_for_try(airflow: Deployment, run_id: str, task_id: str, try_number: int, state: str) -> None:
    seen: dict[str, dict] = {}

    def reached() -> bool:
        seen["ti"] = airflow.task_instance(DAG_ID, run_id, task_id)
        return seen["ti"]["try_number"] == try_number and seen["ti"]["state"] == state

    wait_until(reached, RUN_TIMEOUT, f"{task_id} try {try_number} in {state}", lambda: seen)


def assert_no_secret_in_logs(airflow: Deployment) -> None:
    """Every log the deployment wrote so far, service and task logs alike, is free of the secrets."""
    logs = [p for base in (airflow.logs, airflow.root / "task-logs") for p in base.rglob("*") if p.is_file()]
    assert len(logs) > 10
    leaks = [(p.name, s) for p in logs for s in SECRETS if s in p.read_text(errors="replace")]
    assert leaks == []
