"""One deployment and one emulated cloud for each end-to-end module; both stopped however it ends.

Each module gets its own (module scope), so modules run side by side on separate pytest-xdist
workers (each module is one xdist_group) without sharing a DAG, a cloud or a service to kill.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fakes.account import Account, emulated_account
from fakes.deployment import PROJECT_DIR, Deployment, deployment
from fakes.environment_files import pipelines_folder
from tests.dags.scores_pipeline import DECLARATION, EVALUATE, TRAIN, land_version

if TYPE_CHECKING:
    from collections.abc import Iterator

DAG_ID = "cifar10_retrain"
#: The pipeline beside it whose promotions wait for a person (tests/dags/scores_pipeline.py's): its
#: job and evaluation take a second, so a run reaches its approval quickly.
APPROVED_DAG_ID = "scores_approved"
#: A declaration file one team broke (a misspelled key), in every deployment's folder: the other
#: pipelines must stay listed, scheduled and runnable beside it.
BROKEN_FILE = "team-b-broken.yaml"
#: Shorter than production so failure detection fits a test: a dead worker's task is noticed after
#: 20 s, a dead triggerer's triggers move after 10 s, and a retry starts 5 s after its failure
#: (the DAG's retry_delay, 1 min with exponential backoff, caps at this global maximum). The DAG
#: file does not change during a module: parsed once, not every 30 s on the CPUs the runs need.
TUNING = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
    "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
    "AIRFLOW__CORE__MAX_TASK_RETRY_DELAY": "5",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
}


def latest_weekly_date(now: datetime) -> str:
    """The logical date of the newest @weekly run (Sunday 00:00 UTC at or before ``now``)."""
    sunday = now - timedelta(days=(now.weekday() + 1) % 7)
    return sunday.strftime("%Y-%m-%d")


@pytest.fixture(scope="module")
def account(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Account]:
    with emulated_account(tmp_path_factory.mktemp("account")) as emulated:
        emulated.write_environments()
        yield emulated


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the browser's screenshots go: ``ALIYUN_TRAINING_E2E_SCREENSHOTS`` (docs/screenshots/ was
    made so), else the test's temporary folder."""
    chosen = os.environ.get("ALIYUN_TRAINING_E2E_SCREENSHOTS")
    return Path(chosen).resolve() if chosen else tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def scheduled_runs() -> bool:
    """Whether the scheduler starts the DAG's weekly run (on the latest week's local dataset) once
    the DAG is turned on; a module that checks that run overrides this with True. Elsewhere it
    would only train on this host's CPUs and hold the module's runs back (max_active_runs=1)."""
    return False


@pytest.fixture(scope="module")
def airflow(
    account: Account,
    scheduled_runs: bool,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Deployment]:
    with _started(account, tmp_path_factory.mktemp("deployment"), scheduled_runs, request) as airflow:
        yield airflow


@pytest.fixture
def second_airflow(
    account: Account, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Deployment]:
    """Another deployment of the same DAGs against the same account (workspace, namespace, buckets),
    as staging beside production: its own API server, so its own derived installation id. It runs no
    triggerer: its runs' deferred tasks wait untouched, as if the triggerer had died."""
    root = tmp_path_factory.mktemp("second-deployment")
    with _started(account, root, False, request, triggerer=False) as airflow:
        yield airflow


@contextlib.contextmanager
def _started(
    account: Account, root: Path, scheduled_runs: bool, request: pytest.FixtureRequest, triggerer: bool = True
) -> Iterator[Deployment]:
    local_root = root / "local"
    tuning = dict(TUNING)
    if scheduled_runs:
        scheduled = latest_weekly_date(datetime.now(UTC))
        _synthetic_dataset(local_root / "object-store" / "cifar10" / scheduled)
    else:
        tuning["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"
    # Every task process parses the DAG file: the runs here are CIFAR-10's, with the account's MLflow
    # store, which every deployment against the account shares; beside it, a small pipeline with an
    # approval and a broken declaration.
    folder = pipelines_folder(root / "pipelines", "cifar10", tracking_uri=shared_registry(account))
    _declare_beside(folder, local_root)
    env = {
        **account.connections(),
        "ALIYUN_TRAINING_LOCAL_ROOT": str(local_root),
        "ALIYUN_TRAINING_ENVIRONMENT_DIR": str(account.environment_dir),
        "ALIYUN_TRAINING_PIPELINES_DIR": str(folder),
    }
    with deployment(root, env, tuning, triggerer=triggerer) as airflow:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"\nend-to-end deployment: {airflow.backing.description}; logs in {airflow.logs}"
            )
        airflow.wait_for_dag(DAG_ID)
        airflow.unpause(DAG_ID)
        yield airflow


def _declare_beside(folder: Path, local_root: Path) -> None:
    """The approval pipeline (with a landed version to train on) and the broken file, in ``folder``."""
    approval = "approval: {timeout_hours: 1}"
    (folder / "scores.yaml").write_text(
        DECLARATION.format(dag_id=APPROVED_DAG_ID, model="approved", approval=approval)
    )
    (folder / "code").mkdir(exist_ok=True)
    (folder / "code" / "train.py").write_text(textwrap.dedent(TRAIN))
    (folder / "code" / "evaluate.py").write_text(textwrap.dedent(EVALUATE))
    land_version(local_root, "v1", difficulty=0.0)
    broken = (folder / "scores.yaml").read_text().replace(APPROVED_DAG_ID, "team_b_retrain")
    (folder / BROKEN_FILE).write_text(broken.replace("model: approved", "modle: team-b"))


def shared_registry(account: Account) -> str:
    """The MLflow store of the account's deployments (a team's registry both staging and production use)."""
    return f"sqlite:///{account.root / 'mlflow' / 'mlflow.db'}"


def _synthetic_dataset(out: Path) -> None:
    generator = PROJECT_DIR / "include" / "training" / "make_synthetic_cifar10.py"
    command = [sys.executable, str(generator), "--out", str(out), "--train", "128", "--test", "32"]
    subprocess.run(command, check=True, capture_output=True)
