"""What a retry does after a job failed: Airflow's retry policy, driven by the failure's class.

A job's failure is classified by its backend (``failures.FailureClass``) and raised as
:class:`TrainingJobFailed`. Airflow evaluates a task's ``retry_policy`` in the worker with that very
exception (``airflow.sdk.definitions.retry_policy``), so :class:`FailureClassRetryPolicy` reads the
class and answers from the pipeline's recovery table: fail at once, retry after the class's delay,
or retry and resume (the operator sets ``RESUME_FROM`` on the next try). The decision's reason is
what Airflow stores as the task instance's retry reason. Every other exception takes the task's
ordinary retries.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy
from airflow.sdk.exceptions import AirflowException

from aliyun_training.failures import DEFAULT_RECOVERY, Failure, FailureClass, RecoveryAction, RecoveryRule

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.sdk import Context


class TrainingJobFailed(AirflowException):
    """A job ended without success; ``failure`` says why, in the words the retry policy reads."""

    def __init__(self, message: str, failure: Failure) -> None:
        super().__init__(message)
        self.failure = failure

    def __reduce__(self) -> tuple[type[TrainingJobFailed], tuple[str, Failure]]:
        return type(self), (str(self), self.failure)


class FailureClassRetryPolicy(RetryPolicy):
    """Retry or fail by the class of the job's failure, as the recovery table says.

    :param table: rules per class over :data:`failures.DEFAULT_RECOVERY` (a pipeline's
        ``recovery.classes``).
    """

    def __init__(self, table: Mapping[FailureClass, RecoveryRule] | None = None) -> None:
        self.table = {**DEFAULT_RECOVERY, **(table or {})}

    def rule(self, failure_class: FailureClass) -> RecoveryRule:
        return self.table[failure_class]

    def resumes(self, failure_class: FailureClass) -> bool:
        """Whether the try after a failure of this class resumes from the newest checkpoint."""
        return self.rule(failure_class).action is RecoveryAction.RESUME

    def evaluate(
        self,
        exception: BaseException,
        try_number: int,
        max_tries: int,
        context: Context | None = None,
    ) -> RetryDecision:
        if not isinstance(exception, TrainingJobFailed):
            return RetryDecision.default()
        failure = exception.failure
        rule = self.rule(failure.failure_class)
        reason = f"{failure.describe()}: {rule.describe()}"
        if rule.action is RecoveryAction.FAIL:
            return RetryDecision.fail(reason)
        if try_number > max_tries:
            # No try left: a RETRY decision here would fail the task without its failure callbacks
            # (the task runner then calls on_retry_callback, Airflow 3.3), so neither the job's
            # stop (``stop_saved_job``) nor the failure notice would run.
            return RetryDecision.fail(f"{reason} (no try left)")
        minutes = rule.delay(try_number)
        delay = timedelta(minutes=minutes) if minutes is not None else None
        return RetryDecision.retry(delay=delay, reason=reason)

    def serialize(self) -> dict[str, Any]:
        return {
            "__type": type(self).__name__,
            "table": {cls.value: rule.model_dump(mode="json") for cls, rule in self.table.items()},
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> FailureClassRetryPolicy:
        return cls(
            {FailureClass(name): RecoveryRule.model_validate(rule) for name, rule in data["table"].items()}
        )
