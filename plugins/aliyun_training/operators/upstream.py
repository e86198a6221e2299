"""Records of upstream tasks that sit on alternative branches, read only from the branch that ran.

A run takes its backend's branches (a local runtime probe or a verified image; a staged version or
none), so some records a task takes come from tasks that were skipped. Passed as XComArgs, each of
those is an XCom request the API answers with 404, and Airflow's client logs every 404 as an
"XCom not found" error in a run that succeeded. ``Returned("task")`` names the record instead; a
task that takes it (``ReturnedRecordsMixin``) asks the run which of those tasks succeeded and pulls
only theirs, the others read as None, as a skipped branch's XComArg did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


@dataclass(frozen=True)
class Returned:
    """The return value of ``task_id`` in this run, or None when that task did not succeed.

    The task that takes it must run after ``task_id`` (an explicit dependency: unlike an XComArg,
    a name sets none).
    """

    task_id: str


class ReturnedRecordsMixin(BaseOperator):
    """Resolves the ``Returned`` values of its template fields, alone or in a list, before each start
    (the first and every resumption after a deferral)."""

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        super().render_template_fields(context, jinja_env)
        wanted = {
            marker.task_id for name in self.template_fields for marker in _markers(getattr(self, name, None))
        }
        if not wanted:
            return
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=sorted(wanted), run_ids=[ti.run_id])
        succeeded = {task for task, state in states.get(ti.run_id, {}).items() if state == "success"}
        values = {task: ti.xcom_pull(task_ids=task) for task in sorted(wanted & succeeded)}
        for name in self.template_fields:
            setattr(self, name, _resolved(getattr(self, name, None), values))


def _markers(value: Any) -> list[Returned]:
    if isinstance(value, Returned):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, Returned)]
    return []


def _resolved(value: Any, values: dict[str, Any]) -> Any:
    if isinstance(value, Returned):
        return values.get(value.task_id)
    if isinstance(value, list | tuple):
        return [values.get(item.task_id) if isinstance(item, Returned) else item for item in value]
    return value
