"""What an operator needs to wait, deferred, for work off the worker (a ``RemoteRun``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ConfigDict

from aliyun_training.operators.deferral import DeferralMixin

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.sdk import Context

    from aliyun_training.triggers.remote_run import RemoteRunOutcome


class SavedRun(BaseModel):
    """A started run as ``task_state_store`` keeps it: enough to rebuild the run and stop it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: str
    config: dict[str, Any]
    handle: dict[str, Any]


class RemoteRunMixin(DeferralMixin):
    """Defer on a ``RemoteRunTrigger``, rebuild the run for its result, stop it when the wait times out.

    The run's mode, settings and handle are saved in ``task_state_store`` before deferring, so a
    deferral timeout stops exactly the run that was started, with the settings it started with.
    They are saved sealed (``seals.sealed_state``): a run written there through the REST API (another
    team's pod, other settings) has no valid seal and is never stopped.
    """

    #: ``staging`` or ``image``: which runs ``remote_runs.remote_run`` builds.
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
    ) -> NoReturn:
        from aliyun_training.seals import sealed_state
        from aliyun_training.triggers.remote_run import RemoteRunTrigger

        saved = SavedRun(mode=mode, config=config, handle=handle).model_dump(mode="json")
        context["task_state_store"].set(self.remote_key, sealed_state(saved, context["ti"], self.remote_key))
        trigger = RemoteRunTrigger(self.remote_kind, mode, config, handle, poll_interval)
        self.defer_until_done(trigger, timeout)

    def remote_outcome(self, event: dict[str, Any]) -> RemoteRunOutcome:
        """The trigger's event, read back into its model."""
        from aliyun_training.triggers.remote_run import RemoteRunOutcome

        return RemoteRunOutcome.model_validate(event)

    def remote_result(self, mode: str, outcome: RemoteRunOutcome) -> Any:
        """What the finished run produced, from the settings and handle its outcome carries."""
        from aliyun_training.remote_runs import remote_run

        return remote_run(self.remote_kind, mode, outcome.config).result(outcome.handle)

    def stop_after_deferral_timeout(self, context: Context) -> None:
        from aliyun_training.remote_runs import remote_run
        from aliyun_training.seals import opened_state

        stored = context["task_state_store"].get(self.remote_key)
        opened = opened_state(stored, context["ti"], self.remote_key)
        if stored and opened is None:
            self.log.warning(
                "The saved %s run is not one this task saved: it is left alone", self.remote_kind
            )
        if opened is not None:
            saved = SavedRun.model_validate(opened)
            self.log.error("The %s %s run ran too long: stopping it", saved.mode, self.remote_kind)
            remote_run(self.remote_kind, saved.mode, saved.config).stop(saved.handle)
