"""The reconciler DAG: every few minutes, stop the jobs of ours that no task waits for any more."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pendulum
from airflow.sdk import DAG, Param

from aliyun_training.operators.reconcile import OrphanedJobsOperator
from aliyun_training.plan.backends import WatchedBackend, distinct
from aliyun_training.task_ids import STOP_ORPHANED_JOBS

if TYPE_CHECKING:
    from collections.abc import Sequence

RECONCILER_DAG_ID = "aliyun_training_reconciler"


def reconciler_dag(watched: Sequence[WatchedBackend], schedule: str | None = "*/5 * * * *") -> DAG:
    """The DAG that looks for orphaned jobs on every backend the pipelines use (``watched``)."""
    backends = distinct(list(watched))
    with DAG(
        dag_id=RECONCILER_DAG_ID,
        description="Stop training jobs whose task no longer waits for them.",
        doc_md=f"""### Orphaned training jobs

Lists the jobs this package launched on {", ".join(sorted({w.backend.value for w in backends}))}
(each names the task instance that launched it) and stops those whose task is no longer running,
deferred or about to retry, once they are older than the grace period: a task marked failed or
success before the triggerer picked its trigger up, a deleted run, a worker that died for good.
Trigger it with **dry_run** to see what it would stop; the task's return value lists every job.
""",
        schedule=schedule,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        tags=["aliyun", "maintenance"],
        default_args={"owner": "ml-platform", "retries": 1, "retry_delay": timedelta(minutes=1)},
        params={
            "dry_run": Param(False, type="boolean", title="Dry run", description="Report, stop nothing."),
            "grace_minutes": Param(
                10,
                type="number",
                minimum=0,
                maximum=24 * 60,
                title="Grace period (minutes)",
                description="Jobs younger than this are left alone whatever their task's state.",
            ),
        },
    ) as dag:
        OrphanedJobsOperator(
            task_id=STOP_ORPHANED_JOBS,
            watched=backends,
            report_only="{{ params.dry_run }}",
            grace_minutes="{{ params.grace_minutes }}",
        )
    return dag
