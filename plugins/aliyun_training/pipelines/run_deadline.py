"""The run's own deadline, as Airflow's Deadline Alerts keep it.

A pipeline may declare how long a whole run may take from the moment it was queued
(``deadline.run_minutes``): staging, image, queueing for GPUs, training and publishing together.
That is a fixed interval from a DAG-run reference, exactly what an Airflow ``DeadlineAlert`` is: the
scheduler records the run's deadline when it is queued, notices once that it passed with the run
unfinished, and has the triggerer await :func:`tell_run_deadline_missed` with the run in its
context. The job's own deadline, which moves with the job's start and is predicted by its ETA, is
the training trigger's (``live.py``): no Deadline Alert can take a time known only while it runs.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from aliyun_training.notifications import Notice, NotifierSpec, NotifyEvent, asend_notice
from aliyun_training.pages.urls import run_page

if TYPE_CHECKING:
    from airflow.sdk.definitions.deadline import DeadlineAlert

    from aliyun_training.declaration import PipelineDeclaration

log = logging.getLogger(__name__)


def run_deadline_alert(declaration: PipelineDeclaration) -> DeadlineAlert | None:
    """The DAG's Deadline Alert: ``deadline.run_minutes`` after the run was queued, telling the
    pipeline's notifiers; None where the pipeline declares no run deadline or no notifier."""
    minutes = declaration.deadline.run_minutes
    if minutes is None or not declaration.notifications:
        return None
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    notifications = [spec.model_dump(mode="json") for spec in declaration.notifications]
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(minutes=minutes),
        callback=AsyncCallback(
            tell_run_deadline_missed, kwargs={"notifications": notifications, "minutes": minutes}
        ),
        name="run_minutes",
    )


async def tell_run_deadline_missed(
    notifications: list[dict[str, Any]], minutes: float, context: dict[str, Any]
) -> None:
    """The Deadline Alert's callback, in the triggerer: the run (Airflow's ``dag_run`` in
    ``context``, as its API answers it) was not done ``minutes`` after it was queued."""
    run = context.get("dag_run") or {}
    dag_id, run_id = str(run.get("dag_id", "")), str(run.get("dag_run_id", ""))
    text = f"run {run_id} is not done {minutes:g} minutes after it was queued (its deadline.run_minutes)"
    notice = Notice.of_run(NotifyEvent.DEADLINE_MISSED, dag_id, run_id, text, run_page(dag_id, run_id))
    await asend_notice(notice, [NotifierSpec.model_validate(n) for n in notifications], log)
