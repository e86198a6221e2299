"""What the training task hands its trigger so the job has a live record, and takes back from it.

The trigger keeps the live record (``live.py``); the task decides what it is held to: the job's
expected duration (declared, or the median of the pipeline's recent successful jobs, read from their
sealed results), its price per GPU-hour, the pipeline's notifiers, and what earlier tries of the task
already announced (kept in ``task_state_store`` across tries, sealed, so a retry does not announce a
deadline twice and a value written through the REST API cannot silence one).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import TaskInstanceState

from aliyun_training.deadline import RECENT_RUNS, expected_duration
from aliyun_training.live import LIVE_KEY, LiveSettings, seal_live
from aliyun_training.pages.urls import run_page
from aliyun_training.seals import SEAL_KEY, SealError, check, opened_state, sealed_state
from aliyun_training.stage_records import JobResult

if TYPE_CHECKING:
    from airflow.sdk import Context

    from aliyun_training.backends.base import JobHandle, JobStatus, TrainingBackend
    from aliyun_training.notifications import NotifierSpec
    from aliyun_training.plan.models import GpuHourPrice
    from aliyun_training.spec import TrainingJobSpec

#: task_state_store key of what the task's tries announced (``LiveRecord.sent``).
SENT_KEY = "announced"


def live_settings(
    context: Context,
    spec: TrainingJobSpec,
    backend: TrainingBackend,
    handle: JobHandle,
    *,
    price: GpuHourPrice | None,
    expected_minutes: float | None,
    tolerance: float,
    notifications: list[NotifierSpec],
) -> LiveSettings:
    ti = context["ti"]
    recent = [] if expected_minutes else recent_job_seconds(context)
    return LiveSettings(
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=ti.map_index if ti.map_index is not None else -1,
        console_url=backend.console_url(handle),
        run_page=run_page(ti.dag_id, ti.run_id),
        gpus=spec.nodes * spec.gpus_per_node,
        per_gpu_hour=price.per_gpu_hour if price else None,
        currency=price.currency if price else None,
        expected=expected_duration(expected_minutes, recent, tolerance),
        notifications=notifications,
        sent=announced(context),
    )


def write_first_record(
    context: Context, settings: LiveSettings, handle: JobHandle, status: JobStatus
) -> None:
    """The job's live record as the task's first poll saw it, before the trigger takes over: the
    run page shows the job from its submission, and the trigger always finds a record to carry on
    from (a fresh one and a restarted one read it alike)."""
    view = settings.view(handle.job_id, handle.backend, None)
    now = datetime.now(UTC)
    view.see_status(status, now)
    value = seal_live(
        view.record(now), settings.dag_id, settings.run_id, settings.task_id, settings.map_index
    )
    context["ti"].xcom_push(LIVE_KEY, value)


def recent_job_seconds(context: Context) -> list[float]:
    """The running seconds of this task's jobs in the pipeline's last ``RECENT_RUNS`` successful
    runs before this one, newest first, each from that run's sealed result (a result written through
    the REST API, or a task marked successful by hand, returns nothing and counts for nothing)."""
    ti = context["ti"]
    seconds: list[float] = []
    before = None
    for _ in range(RECENT_RUNS):
        try:
            previous = ti.get_previous_ti(state=TaskInstanceState.SUCCESS, logical_date=before)
        except Exception:  # a run without a logical date, an API server that cannot say: no history
            break
        if previous is None or previous.logical_date is None:
            break
        before = previous.logical_date
        returned = ti.xcom_pull(task_ids=ti.task_id, run_id=previous.run_id)
        sealed = ti.xcom_pull(task_ids=ti.task_id, run_id=previous.run_id, key=SEAL_KEY)
        try:
            check(returned, sealed, ti.dag_id, previous.run_id, ti.task_id)
            seconds.append(JobResult.model_validate(returned).wall_seconds)
        except (SealError, ValueError):
            continue
    return seconds


def announced(context: Context) -> list[str]:
    """What the task's earlier tries announced, when the store holds this task instance's seal."""
    opened = opened_state(context["task_state_store"].get(SENT_KEY), context["ti"], SENT_KEY)
    return [str(item) for item in opened] if isinstance(opened, list) else []


def keep_announced(context: Context, sent: list[str]) -> None:
    """Keep what a try's job announced, for the tries after it."""
    merged = list(dict.fromkeys([*announced(context), *sent]))
    context["task_state_store"].set(SENT_KEY, sealed_state(merged, context["ti"], SENT_KEY))


def outcome_fields(result: JobResult, live: Any, price: GpuHourPrice | None) -> dict[str, Any]:
    """What a finished job's live record adds to its result: the last progress, the GPU use, and the
    money its GPU-hours cost where the environment prices one."""
    fields: dict[str, Any] = {}
    if live is not None:
        fields |= {"progress": live.progress, "gpu_use": live.gpu}
    if price is not None:
        fields |= {"money": round(result.gpu_hours * price.per_gpu_hour, 2), "currency": price.currency}
    return fields
