"""Runs of a deployed pipeline in the session's metadata DB, with what their tasks wrote: the live
record the trigger keeps (sealed as it seals it), and the report ``publish_artifacts`` returns.

A run is created as the API server creates a triggered one (from the DAG as stored), so its task
instances exist and its XComs are written where Airflow's own code writes them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aliyun_training.gpu_use import GpuUse
from aliyun_training.live import LIVE_KEY, LiveCost, LiveDeadline, LiveRecord, StateChange, seal_live
from aliyun_training.progress import ProgressEstimate, ProgressPoint
from aliyun_training.task_ids import CONFIGURE, PUBLISH_ARTIFACTS, TRAIN

if TYPE_CHECKING:
    from pathlib import Path

DAG_ID = "cifar10_retrain"
#: Every run made here starts so, and goes when the module's tests are done.
RUN_PREFIX = "manual__live-page-"
#: A line of a job's log with markup, which the page must show as text.
SCRIPT_LINE = "epoch 2 <script>alert('owned')</script> done"
TOTAL_STEPS = 1000


def new_run(name: str) -> str:
    """A running run of the pipeline (its tasks not started); its run id."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    run_id, moment = RUN_PREFIX + name, datetime.now(UTC)
    with create_session() as session:
        dag = SerializedDagModel.get_dag(DAG_ID, session=session)
        assert dag is not None, f"{DAG_ID} is not deployed"
        dag.create_dagrun(
            run_id=run_id,
            logical_date=moment,
            data_interval=(moment, moment),
            run_after=moment,
            run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.TEST,
            state=DagRunState.RUNNING,
            session=session,
        )
    return run_id


def end_run(run_id: str, state: str = "success") -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id).values(state=state)
        )


def forget_runs() -> None:
    """Delete the runs made here, so the pipeline's other pages list only their own."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id.startswith(RUN_PREFIX)))


def record(step: int, now: datetime, state: str = "running", **fields: Any) -> LiveRecord:
    """A DLC job ``step`` steps into ``TOTAL_STEPS`` at 3.1 steps/s, its record written 10 s before
    ``now``: its progress, loss and accuracy so far, its GPUs busy, its cost, and its last lines."""
    updated = now - timedelta(seconds=10)
    started = updated - timedelta(seconds=step / 3.1)
    remaining = (TOTAL_STEPS - step) / 3.1
    points = [
        ProgressPoint(
            at=started + timedelta(seconds=s / 3.1),
            fraction=s / TOTAL_STEPS,
            step=s,
            epoch=s / 200,
            metrics={"loss": 2.0 / (1 + s / 100), "accuracy": 0.1 + 0.8 * s / TOTAL_STEPS},
        )
        for s in [*range(0, step, max(step // 8, 1)), step]
    ]
    values: dict[str, Any] = {
        "job_id": "dlc1a2b3c4d5e",
        "backend": "dlc",
        "console_url": "https://pai.console.aliyun.com/?regionId=cn-hangzhou#/dlc/jobs/dlc1a2b3c4d5e",
        "state": state,
        "raw_status": {"running": "Running", "succeeded": "Succeeded"}.get(state, state),
        "updated": updated,
        "started": started,
        "history": [
            StateChange(at=started - timedelta(minutes=2), raw="Queuing", reason="waiting for <b>quota</b>"),
            StateChange(at=started, raw="Running"),
        ],
        "progress": ProgressEstimate(
            at=updated,
            fraction=step / TOTAL_STEPS,
            step=step,
            total_steps=TOTAL_STEPS,
            epoch=step / 200,
            total_epochs=5,
            steps_per_second=3.1,
            remaining_seconds=remaining,
            eta=updated + timedelta(seconds=remaining),
            metrics=points[-1].metrics,
        ),
        "points": points,
        "gpu": GpuUse(
            source="cloudmonitor",
            samples=24,
            mean_utilization=87.4,
            p10_utilization=61.0,
            idle_minutes=0.0,
            mean_memory_used_mib=30500.0,
        ),
        "cost": LiveCost(gpu_hours=1.25, money=9.5, currency="CNY"),
        "deadline": LiveDeadline(
            expected_seconds=240.0,
            source="median of the last 5 successful runs",
            deadline=started + timedelta(seconds=288),
            at_risk=True,
        ),
        "tails": {"0": [f"step {step}/{TOTAL_STEPS} loss 0.41", SCRIPT_LINE], "1": ["worker 1 ready"]},
    }
    return LiveRecord.model_validate({**values, **fields})


def write_live(run_id: str, stored: LiveRecord | Any) -> None:
    """The train task's live XCom, as the trigger writes it (a record, sealed) or as someone wrote
    it through the REST API (anything else, stored as given)."""
    from airflow.models.xcom import XComModel

    value = seal_live(stored, DAG_ID, run_id, TRAIN) if isinstance(stored, LiveRecord) else stored
    XComModel.set(LIVE_KEY, value, dag_id=DAG_ID, task_id=TRAIN, run_id=run_id)


def publish_report(run_id: str, folder: Path) -> Path:
    """What publish_artifacts returns once it published the run's artifact set, with the set's
    report in ``folder`` (and the plan's record of where sets go, which the report page reads);
    the report's path."""
    report = folder / "report.html"
    report.write_text(
        "<!doctype html><title>Run report</title><h1>Run report: cifar10</h1>", encoding="utf-8"
    )
    _returned(run_id, CONFIGURE, "artifacts", {"alibaba_cloud_conn_id": None})
    _returned(run_id, PUBLISH_ARTIFACTS, "return_value", {"uri": str(folder), "report_uri": str(report)})
    return report


def _returned(run_id: str, task_id: str, key: str, value: Any) -> None:
    """``value`` as the task's XCom ``key``, with the seal the task pushes beside it."""
    from airflow.models.xcom import XComModel

    from aliyun_training.seals import SEAL_KEY, seal

    sealed = {key: seal(value, DAG_ID, run_id, task_id, key)}
    for name, stored in ((key, value), (SEAL_KEY, sealed)):
        XComModel.set(name, stored, dag_id=DAG_ID, task_id=task_id, run_id=run_id)
