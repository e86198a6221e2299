"""What an operator that waits in the triggerer shares: defer, resume, stop what a timed-out wait leaves.

Airflow ends a deferral that outlives ``defer(timeout=...)`` without calling the trigger's
``on_kill``: it schedules the task to resume with ``__fail__`` and ``BaseOperator.resume_execution``
raises ``TaskDeferralTimeout``. The work the task waited for still runs then, so it is stopped here
before the task fails: a bound on waiting is also a bound on what the work costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.sdk import BaseOperator, Context

    from aliyun_training.triggers.base import PollingTrigger

    # A mixin of operators: the type checker sees the BaseOperator it is always mixed into.
    _Operator = BaseOperator
else:
    _Operator = object


class DeferralMixin(_Operator):
    """Mixed in before ``BaseOperator``: ``execute_complete`` receives the trigger's outcome as its
    event, and ``stop_after_deferral_timeout`` stops the work when the wait timed out."""

    def defer_until_done(self, trigger: PollingTrigger, timeout: timedelta) -> NoReturn:
        """Give the worker slot back until ``trigger`` fires; then ``execute_complete`` resumes."""
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        from airflow.sdk.exceptions import TaskDeferralTimeout

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except TaskDeferralTimeout:
            self.stop_after_deferral_timeout(context)
            raise

    def stop_after_deferral_timeout(self, context: Context) -> None:
        """Stop the work the wait was for, as saved in ``task_state_store`` before deferring.

        It may raise an error that says more than the timeout (where the work was stuck); when it
        returns, the task fails with ``TaskDeferralTimeout``.
        """
        raise NotImplementedError
