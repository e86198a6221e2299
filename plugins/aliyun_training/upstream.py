"""Records of upstream tasks, read only from a task that ran and only when their seal matches.

A run takes its backend's branches (a local runtime probe or a verified image; a staged version or
none), so some records a task takes come from tasks that were skipped. Passed as XComArgs, each of
those is an XCom request the API answers with 404, and Airflow's client logs every 404 as an
"XCom not found" error in a run that succeeded. ``Returned("task")`` names the record instead; a
task that takes it (``ReturnedRecordsMixin``) asks the run which of those tasks succeeded and pulls
only theirs, the others read as None, as a skipped branch's XComArg did.

A record is also something a user who may edit the DAG's task instances can rewrite through the
REST API (docs/security.md). Every task of a declared pipeline seals what it returns
(:func:`seal_returned`, its ``post_execute``), and a ``Returned`` record is used only when its seal
matches (:mod:`aliyun_training.seals`): a changed record fails the task that would have used it,
naming the task and key, before anything runs. A ``required`` record (a part of the run's plan) that
is missing fails it too: its task was marked successful without running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.seals import SEAL_KEY, SealError, check, seal, seals

if TYPE_CHECKING:
    from airflow.sdk import Context

RETURN_VALUE = "return_value"


@dataclass(frozen=True)
class Returned:
    """What ``task_id`` of this run returned (its XCom ``key``), or None when that task did not succeed.

    The task that takes it must run after ``task_id`` (an explicit dependency: unlike an XComArg,
    a name sets none).
    """

    task_id: str
    key: str = RETURN_VALUE
    #: The task cannot go on without it (a part of the run's plan): missing, it fails the task.
    required: bool = False


def seal_returned(context: Context, result: Any) -> None:
    """``post_execute``: push the seals of what the task returned, for the tasks that read it."""
    if result is None:
        return
    ti, task = context["ti"], context["task"]
    multiple = bool(getattr(task, "multiple_outputs", False))
    ti.xcom_push(SEAL_KEY, seals(result, ti.dag_id, ti.run_id, ti.task_id, _map_index(ti), multiple))


def push_sealed(context: Context, key: str, value: Any) -> None:
    """Push ``value`` as the XCom ``key`` with its seal: a record a task leaves besides what it
    returns (a skipped task returns nothing), checked like one by whoever reads it."""
    ti = context["ti"]
    ti.xcom_push(key, value)
    ti.xcom_push(SEAL_KEY, {key: seal(value, ti.dag_id, ti.run_id, ti.task_id, key, _map_index(ti))})


def _map_index(ti: Any) -> int:
    """The task instance's map index as its seals name it (-1: not mapped)."""
    return -1 if ti.map_index is None else int(ti.map_index)


class ReturnedRecordsMixin(BaseOperator):
    """Resolves the ``Returned`` values of its template fields, alone or in a list, before each start
    (the first and every resumption after a deferral), checking each one's seal."""

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        super().render_template_fields(context, jinja_env)
        wanted = {marker for name in self.template_fields for marker in _markers(getattr(self, name, None))}
        if not wanted:
            return
        ti = context["ti"]
        task_ids = sorted({marker.task_id for marker in wanted})
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=task_ids, run_ids=[ti.run_id])
        succeeded = {task for task, state in states.get(ti.run_id, {}).items() if state == "success"}
        values = {marker: read_returned(ti, marker, ran=marker.task_id in succeeded) for marker in wanted}
        for name in self.template_fields:
            setattr(self, name, _resolved(getattr(self, name, None), values))


def read_returned(ti: Any, marker: Returned, ran: bool = True) -> Any:
    """The record ``marker`` names, once its seal is checked; None when its task returned nothing
    or did not succeed (``ran`` False). A changed record, or a required one that is missing, fails
    the task at once: a retry would read the same."""
    value = ti.xcom_pull(task_ids=marker.task_id, key=marker.key) if ran else None
    if value is None:
        if marker.required:
            raise AirflowFailException(
                f"{marker.task_id} of run {ti.run_id} left no {marker.key!r} record (marked successful "
                f"without running?), so nothing was run. Fix: clear {marker.task_id}"
            )
        return None
    sealed = ti.xcom_pull(task_ids=marker.task_id, key=SEAL_KEY)
    try:
        check(value, sealed, ti.dag_id, ti.run_id, marker.task_id, marker.key)
    except SealError as exc:
        raise AirflowFailException(str(exc)) from None
    return value


def _markers(value: Any) -> list[Returned]:
    if isinstance(value, Returned):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, Returned)]
    return []


def _resolved(value: Any, values: dict[Returned, Any]) -> Any:
    if isinstance(value, Returned):
        return values.get(value)
    if isinstance(value, list | tuple):
        return [values.get(item) if isinstance(item, Returned) else item for item in value]
    return value
