"""operators.deferral: an operator waiting in the triggerer resumes with the trigger's event, and a wait
that times out stops the work it waited for before the task fails."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout, TaskDeferred

from aliyun_training.operators.deferral import DeferralMixin
from aliyun_training.triggers.remote_run import RemoteRunTrigger
from tests.operator_harness import task_context

if TYPE_CHECKING:
    from airflow.sdk import Context

TIMEOUT = timedelta(minutes=45)


class StuckWork(RuntimeError):
    """What a stop raises when it finds where the work was stuck."""


class WaitingOperator(DeferralMixin, BaseOperator):
    """Waits for a staging run; records each stop, or raises ``stop_error`` from it."""

    def __init__(self, stop_error: Exception | None = None, **kwargs: Any) -> None:
        super().__init__(task_id="stage_dataset", **kwargs)
        self.stop_error = stop_error
        self.stopped: list[str] = []

    def execute(self, context: Context) -> None:
        trigger = RemoteRunTrigger("staging", "pod", {}, {"pod": "stage-cifar10-v1"}, poll_interval=5)
        self.defer_until_done(trigger, TIMEOUT)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        return f"resumed with {event['status']}"

    def stop_after_deferral_timeout(self, context: Context) -> None:
        self.stopped.append(context["ti"].run_id)
        if self.stop_error:
            raise self.stop_error


def timed_out(operator: WaitingOperator, context: dict[str, Any]) -> Any:
    """Resume ``operator`` as Airflow does when its deferral outlived its timeout."""
    return operator.resume_execution(
        TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, context
    )


def test_the_operator_gives_its_slot_back_until_the_trigger_fires_then_execute_complete_resumes() -> None:
    operator, context = WaitingOperator(), task_context()

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)

    assert isinstance(deferred.value.trigger, RemoteRunTrigger)
    assert (deferred.value.method_name, deferred.value.timeout) == ("execute_complete", TIMEOUT)
    resumed = operator.resume_execution("execute_complete", {"event": {"status": "succeeded"}}, context)
    assert resumed == "resumed with succeeded"
    assert operator.stopped == [], "a wait that ended in time stops nothing"


def test_a_wait_that_timed_out_stops_the_work_then_fails_the_task_with_the_timeout() -> None:
    operator, context = WaitingOperator(), task_context()

    with pytest.raises(TaskDeferralTimeout):
        timed_out(operator, context)

    assert operator.stopped == [context["ti"].run_id]


def test_a_stop_that_finds_more_than_the_timeout_fails_the_task_with_what_it_found() -> None:
    operator = WaitingOperator(stop_error=StuckWork("the pod never left Pending: no node has 8 GPUs"))

    with pytest.raises(StuckWork, match="no node has 8 GPUs"):
        timed_out(operator, task_context())


def test_a_trigger_that_failed_otherwise_stops_nothing() -> None:
    operator = WaitingOperator()

    with pytest.raises(TaskDeferralError):
        operator.resume_execution(
            TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_FAILURE}, task_context()
        )

    assert operator.stopped == []
