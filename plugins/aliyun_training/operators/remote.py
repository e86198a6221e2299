"""What an operator needs to wait, deferred, for work off the worker (a ``RemoteRun``)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context


class RemoteRunMixin:
    """Defer on a ``RemoteRunTrigger``, rebuild the run for its result, stop it when the wait times out.

    The run's kind, mode, settings and handle are saved in ``task_state_store`` before deferring, so
    a deferral timeout can stop exactly the run that was started, with the settings it started with.
    """

    #: ``staging`` or ``image``: which runs ``remote.remote_run`` builds.
    remote_kind: str
    #: The ``task_state_store`` key of the saved run.
    remote_key: str

    def defer_to_remote(
        self,
        context: Context,
        mode: str,
        config: dict[str, Any],
        handle: dict[str, Any],
        poll_interval: float,
        timeout: timedelta,
    ) -> None:
        from aliyun_training.triggers.remote_run import RemoteRunTrigger

        context["task_state_store"].set(self.remote_key, {"mode": mode, "config": config, "handle": handle})
        self.defer(  # type: ignore[attr-defined]
            trigger=RemoteRunTrigger(self.remote_kind, mode, config, handle, poll_interval),
            method_name="execute_complete",
            timeout=timeout,
        )

    def remote_result(self, mode: str, event: dict[str, Any]) -> Any:
        """What the finished run produced, from the settings and handle its trigger event carries."""
        from aliyun_training.remote import remote_run

        return remote_run(self.remote_kind, mode, event["config"]).result(event["handle"])

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """A run that outlives its wait is stopped before the task fails: a bound on waiting is also a
        bound on what the run costs."""
        from airflow.sdk.exceptions import TaskDeferralTimeout

        from aliyun_training.remote import remote_run

        try:
            return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]
        except TaskDeferralTimeout:
            saved = context["task_state_store"].get(self.remote_key)
            if saved:
                self.log.error("The %s %s run ran too long: stopping it", saved["mode"], self.remote_kind)  # type: ignore[attr-defined]
                remote_run(self.remote_kind, saved["mode"], saved["config"]).stop(saved["handle"])
            raise
