"""Stop the jobs nobody waits for any more: the reconciler DAG's task and a failed run's callback.

Every job this package launches carries its owner, the installation (the Airflow deployment) and
the task instance that launched it (DLC tags, Kubernetes annotations and labels, the local
job.json). Only this installation's jobs are listed: another deployment sharing the workspace or
namespace has its runs in another database, so its jobs are never judged, let alone stopped, here.
A task that ends stops its own job, in the trigger's ``on_kill`` or its ``on_failure_callback``;
what neither sees is handled here: a task marked failed or success before the triggerer picked its
trigger up, a run deleted while its job ran, a worker that died for good. The reconciler asks
Airflow for the state of each owner and stops a job whose task no longer waits for it, once the job
is older than a grace period (a task that just launched its job may not have deferred yet).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from aliyun_training.backends import get_backend
from aliyun_training.installation import installation_id
from aliyun_training.plan.backends import WatchedBackend, backend_config, distinct
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import Context

    from aliyun_training.backends.base import LaunchedJob, TrainingBackend
    from aliyun_training.spec import JobOwner

log = logging.getLogger(__name__)

#: Task states in which a task still waits for its job, or will reattach to it on its next try.
WAITING_STATES = frozenset(
    {"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting"}
)


def set_up_backends(
    watched: Sequence[WatchedBackend | dict[str, Any]],
) -> list[tuple[WatchedBackend, TrainingBackend]]:
    """The backends of ``watched`` that are set up, each once; the others are named in the log."""
    backends = []
    for item in distinct([validate_record(WatchedBackend, w) if isinstance(w, dict) else w for w in watched]):
        try:
            backends.append((item, get_backend(item.backend.value, backend_config(item))))
        except SpecError as exc:
            log.info("Not watching %s jobs: %s", item.backend.value, str(exc).splitlines()[-1].strip())
    return backends


def owner_key(owner: JobOwner) -> str:
    """How ``get_task_states`` names a task instance within its run: the task id, ``_<index>`` if mapped."""
    return owner.task_id if owner.map_index < 0 else f"{owner.task_id}_{owner.map_index}"


def run_task_states(context: Context, dag_id: str, run_id: str) -> dict[str, str]:
    """The states of a run's task instances, keyed as ``owner_key`` names them ({} once deleted).

    A DAG callback's context may have no task instance (its run's last one unknown); the DAG
    processor answers the same ``GetTaskStates`` request for the callback as a worker does.
    """
    ti: Any = context.get("ti")
    if ti is None:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        ti = RuntimeTaskInstance
    return ti.get_task_states(dag_id=dag_id, run_ids=[run_id]).get(run_id) or {}


def verdict(job: LaunchedJob, task_state: str | None, now: datetime, grace: timedelta) -> tuple[bool, str]:
    """Whether to stop ``job``, and why, given its owner's task state (None: no such task instance)."""
    created = datetime.fromisoformat(job.created) if job.created else None
    if created is not None and now - created < grace:
        return False, f"launched {int((now - created).total_seconds())} s ago, within the grace period"
    if task_state in WAITING_STATES:
        return False, f"its task is {task_state}"
    if task_state is None:
        return True, "its task instance no longer exists (the run was deleted or cleared away)"
    return True, f"its task is {task_state} and no longer waits for it"


class OrphanedJobsOperator(BaseOperator):
    """List the jobs of every watched backend and stop those no task waits for; return the report.

    :param watched: the backends and environment files to look in (``WatchedBackend`` or its dict).
    :param report_only: only report what would be stopped (templated: the DAG's ``dry_run``).
    :param grace_minutes: how old a job must be before its owner's state counts (templated).
    """

    template_fields: Sequence[str] = ("report_only", "grace_minutes")
    ui_color = "#b0bec5"

    def __init__(
        self,
        *,
        watched: Sequence[WatchedBackend | dict[str, Any]],
        report_only: bool | str = False,
        grace_minutes: float | str = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.watched = [w.model_dump(mode="json") if isinstance(w, WatchedBackend) else w for w in watched]
        self.report_only = report_only
        self.grace_minutes = grace_minutes

    def execute(self, context: Context) -> list[dict[str, Any]]:
        dry_run = str(self.report_only).lower() in ("true", "1")
        grace = timedelta(minutes=float(self.grace_minutes))
        now = datetime.now(UTC)
        report = []
        runs: dict[tuple[str, str], dict[str, str]] = {}
        installation = installation_id()
        self.log.info("Looking for jobs of installation %s", installation)
        for item, backend in set_up_backends(self.watched):
            for job in backend.launched(installation):
                owner = job.owner
                run = (owner.dag_id, owner.run_id)
                if run not in runs:
                    runs[run] = run_task_states(context, *run)
                task_state = runs[run].get(owner_key(owner))
                stop, why = verdict(job, task_state, now, grace)
                action = ("would stop" if dry_run else "stopped") if stop else "kept"
                if stop and not dry_run:
                    backend.stop(job.handle)
                self.log.info(
                    "%s job %s on %s (%s/%s/%s try %d): %s",
                    action.capitalize(),
                    job.handle.job_id,
                    item.backend.value,
                    owner.dag_id,
                    owner.run_id,
                    owner_key(owner),
                    owner.try_number,
                    why,
                )
                report.append(
                    {
                        "backend": item.backend.value,
                        "job_id": job.handle.job_id,
                        "name": job.handle.name,
                        "state": job.state.value,
                        "owner": owner.model_dump(),
                        "task_state": task_state,
                        "action": action,
                        "reason": why,
                    }
                )
        stopped = sum(entry["action"] != "kept" for entry in report)
        self.log.info(
            "%d job(s) of ours running; %d %s",
            len(report),
            stopped,
            "would be stopped" if dry_run else "stopped",
        )
        return report


class StopRunJobs:
    """A DAG's ``on_failure_callback``: stop every job the failed run still has, on every backend.

    Runs when the run fails, its ``dagrun_timeout`` included, whichever task was waiting. The DAG
    processor may run it after the run was cleared and its task launched again: a job whose task
    waits for it again is kept (a cleared task stops its earlier round's job itself).
    """

    def __init__(self, watched: Sequence[WatchedBackend]) -> None:
        self.watched = list(watched)

    def __call__(self, context: Context) -> None:
        # The DAG processor runs DAG callbacks with "dag" and "run_id" in every context ("dag_run"
        # only when the run's last task instance is known).
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        installation = installation_id()
        jobs = [
            (backend, job)
            for _item, backend in set_up_backends(self.watched)
            for job in backend.launched(installation)
            if (job.owner.dag_id, job.owner.run_id) == (dag_id, run_id)
        ]
        if not jobs:
            return
        states = run_task_states(context, dag_id, run_id)
        now = datetime.now(UTC)
        for backend, job in jobs:
            # No grace period: the run has failed, so only a task cleared since waits again.
            stop, why = verdict(job, states.get(owner_key(job.owner)), now, timedelta(0))
            if not stop:
                log.info("Keeping job %s: %s", job.handle.job_id, why)
                continue
            log.warning(
                "Run %s failed with job %s (%s) still %s, %s: stopping it",
                run_id,
                job.handle.job_id,
                owner_key(job.owner),
                job.state.value,
                why,
            )
            backend.stop(job.handle)
