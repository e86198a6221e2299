"""What Airflow hands a TrainingJobOperator when it runs a task, for driving it outside a task runner.

The task runner provides the task instance and ``task_state_store`` through a supervisor; these
stand-ins keep the same interface (ids, ``xcom_push``, get/set) so operator tests exercise the real
execute / defer / execute_complete path. ``dag.test()`` tests cover the real ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from aliyun_training.artifacts.collect import RunInfo
from aliyun_training.kubernetes.names import job_name
from aliyun_training.operators.ownership import task_owner
from aliyun_training.triggers.training import TrainingJobTrigger
from fakes.environment_files import INSTALLATION

if TYPE_CHECKING:
    from datetime import timedelta

    from aliyun_training.operators.training import TrainingJobOperator
    from aliyun_training.spec import JobOwner

#: A manual run of the CIFAR-10 pipeline as the publish task names it.
MANUAL_RUN = RunInfo(
    dag_id="cifar10_retrain",
    run_id="manual__2026-11-22T10:00:00+00:00",
    logical_date=None,
    run_type="manual",
    params={},
    url="/dags/cifar10_retrain/runs/manual__2026-11-22T10%3A00%3A00%2B00%3A00",
)


@dataclass
class TaskInstanceIds:
    dag_id: str = "retrain"
    run_id: str = "manual__2026-11-30T00:00:00+00:00"
    task_id: str = "train"
    map_index: int = -1
    max_tries: int = 0
    try_number: int = 1
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    @property
    def job_name(self) -> str:
        return job_name(self.dag_id, self.run_id, self.task_id, self.map_index, installation=INSTALLATION)

    @property
    def owner(self) -> JobOwner:
        """The owner the operator tags this task instance's job with."""
        return task_owner(self, INSTALLATION)


class MemoryTaskStateStore(dict):
    def set(self, key: str, value: Any, *, retention: timedelta | None = None) -> None:
        self[key] = value


def task_context() -> dict[str, Any]:
    return {"ti": TaskInstanceIds(), "task_state_store": MemoryTaskStateStore()}


def defer(op: TrainingJobOperator, context: dict[str, Any]) -> TrainingJobTrigger:
    """Run ``execute`` and return the trigger it deferred to (failing the test if it did not defer)."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert isinstance(deferred.value.trigger, TrainingJobTrigger)
    return deferred.value.trigger


async def fire(trigger: TrainingJobTrigger) -> dict[str, Any]:
    """The trigger's first event, as the triggerer would hand it to ``execute_complete``."""
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger finished without an event")
