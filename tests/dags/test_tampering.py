"""What a user who is not an administrator can write through Airflow's REST API is never believed.

Airflow's simple auth manager gives its ``user`` role (the one that triggers runs) the right to write
a DAG's XComs, its task state store and its task instances' states. Each test runs the small scores
pipeline with ``dag.test`` and, as that user, changes something through Airflow's own API app (the
routes a browser or a script calls) between the task that wrote it and the task that reads it: a
callback of the writing task, so the change lands exactly there. Without the checks, each change
was acted on (issue N1, N2, N3, N4 of docs/security.md's probe); here each is refused or ignored.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import pendulum
import pytest

from aliyun_training.backends.base import JobState
from aliyun_training.backends.local import LocalBackend
from aliyun_training.installation import installation_id
from aliyun_training.model_registry.mlflow import champion_alias
from aliyun_training.operators.training import HANDLE_KEY
from aliyun_training.spec import JobOwner, TrainingJobSpec
from tests.dags.approvals import api_client, mark_success_when_asked
from tests.dags.asset_events import asset_event_extras
from tests.dags.scores_pipeline import approval_pipeline, land_version, registry_client, scores_pipeline

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

#: The role that may trigger runs and edit task instances, XComs and task state: not an administrator.
USER_ROLE = "user"


def _run(dag: Any, skill: float, day: int = 1) -> Any:
    moment = pendulum.datetime(2026, 11, day, tz="UTC")
    return dag.test(
        logical_date=moment,
        run_after=moment,
        run_conf={"nodes": 1, "gpus_per_node": 0, "skill": skill, "loss": 1.0, "dataset_version": "v1"},
    )


def _after(dag: Any, task_id: str, change: Any) -> dict[str, Any]:
    """Run ``change(client, ti)`` as the user once ``task_id`` succeeded; the answers it got are kept."""
    seen: dict[str, Any] = {}

    def callback(context: Any) -> None:
        try:
            seen["status"] = change(api_client("mallory", USER_ROLE), context["ti"])
        except Exception as exc:  # a callback's error is only logged: the test reports it
            seen["error"] = repr(exc)

    dag.get_task(task_id).on_success_callback = [callback]
    return seen


def _ti_path(ti: Any, task_id: str) -> str:
    return f"/api/v2/dags/{ti.dag_id}/dagRuns/{ti.run_id}/taskInstances/{task_id}"


def test_a_job_rewritten_in_configures_xcom_fails_train_and_runs_nothing(
    airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    dag = scores_pipeline(tmp_path, local_root, monkeypatch)
    land_version(local_root, "v1", difficulty=0.0)
    planted = tmp_path / "planted"

    def rewrite(client: Any, ti: Any) -> int:
        job = ti.xcom_pull(task_ids="configure", key="job")
        job["spec"]["command"] = f"touch {shlex.quote(str(planted))}"
        path = f"{_ti_path(ti, 'configure')}/xcomEntries/job"
        return int(client.patch(path, json={"value": job, "map_index": -1}).status_code)

    seen = _after(dag, "configure", rewrite)
    run = _run(dag, skill=0.5)

    assert seen == {"status": 200}, "the user may write the XCom"
    assert run.state == "failed"
    # The first tasks to read the job (the preflight checks) refuse it; train never starts.
    assert run.get_task_instance("preflight.check_machine").state == "failed"
    assert run.get_task_instance("train").state == "upstream_failed"
    assert not planted.exists(), "the rewritten command never ran"
    assert not (local_root / "outputs").exists() or not any((local_root / "outputs").iterdir())
    assert "configure's XCom 'job' of run" in capfd.readouterr().out, "the error names what changed"


def test_another_installations_job_written_as_the_saved_handle_is_neither_adopted_nor_stopped(
    airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag = scores_pipeline(tmp_path, local_root, monkeypatch)
    land_version(local_root, "v1", difficulty=0.0)
    runs = LocalBackend(root=str(local_root / "runs"), stop_grace_seconds=2)
    theirs = JobOwner(installation="other-team", dag_id=dag.dag_id, run_id="manual__x", task_id="train")
    spec = TrainingJobSpec(backend="local", framework="pytorch", command="sleep 120", owner=theirs)
    foreign = runs.submit(spec, "other-team-train")

    def plant(client: Any, ti: Any) -> int:
        path = f"{_ti_path(ti, 'train')}/state-store/{HANDLE_KEY}"
        return int(client.put(path, json={"value": foreign.model_dump()}).status_code)

    seen = _after(dag, "configure", plant)
    try:
        run = _run(dag, skill=0.5)

        assert seen == {"status": 204}, "the user may write the task state store"
        assert run.state == "success"
        job = run.get_task_instance("train").xcom_pull(task_ids="train")
        assert job["job_id"] != foreign.job_id, "train ran its own job"
        assert runs.status(foreign).state is JobState.RUNNING, "the other team's job was not stopped"
    finally:
        runs.stop(foreign)


def test_marking_the_approval_successful_moves_no_champion(
    airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag = approval_pipeline(tmp_path, local_root, monkeypatch)
    before = len(asset_event_extras("approved_champion"))

    marked = mark_success_when_asked("scores_approved", "approve_promotion", "mallory")
    run = _run(dag, skill=0.6)

    assert marked == {"response": 200}, "the user may mark the task successful"
    promoted = run.get_task_instance("promote").xcom_pull(task_ids="promote")
    assert promoted["promoted"] is False and "left no answer" in promoted["reason"]
    assert len(asset_event_extras("approved_champion")) == before, "no champion was announced"


def test_two_installations_sharing_one_mlflow_store_each_move_only_their_own_champion(
    airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Production promotes a 0.9 model; staging, sharing the store and the declarations, then
    promotes a 0.1 model: production's champion alias still names its 0.9 model."""
    land_version(local_root, "v1", difficulty=0.0)
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID", "ml-prod")
    production = scores_pipeline(tmp_path / "prod", local_root, monkeypatch)
    assert _run(production, skill=0.9).state == "success"
    # Staging's own metadata DB has no champion yet: scores_pipeline starts the pipeline without one.
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID", "ml-staging")
    staging = scores_pipeline(tmp_path / "staging", local_root, monkeypatch)
    assert _run(staging, skill=0.1, day=2).state == "success"

    registry = registry_client(local_root)
    prod = registry.get_model_version_by_alias("scores", champion_alias("ml-prod"))
    stage = registry.get_model_version_by_alias("scores", champion_alias("ml-staging"))
    assert prod.tags["metric.test_accuracy"] == "0.9" and prod.tags["lineage.installation"] == "ml-prod"
    assert stage.tags["metric.test_accuracy"] == "0.1" and stage.tags["lineage.installation"] == "ml-staging"
    assert installation_id() == "ml-staging"
