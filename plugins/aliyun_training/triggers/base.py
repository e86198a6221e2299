"""What every wait of this package in the triggerer shares: the poll loop, the error event, on_kill.

The event itself (``records.TriggerOutcome`` and its ``OutcomeStatus``) is a record below this
module, so the blocking path ends a wait with the same outcome without importing Airflow's triggers.

Airflow may run a trigger more than once and move it between triggerers, so a trigger rebuilds its
clients from its JSON keyword arguments and never stops the work in ``cleanup()``, which runs on
every exit, triggerer restarts included. It stops the work in ``on_kill()``, which Airflow calls
(bounded by ``[triggerer] on_kill_timeout``, what it raises only logged) when a user marks the
deferred task failed or success or clears it. A trigger timeout calls neither: Airflow resumes the
task, ``resume_execution`` raises ``TaskDeferralTimeout`` and the operator stops the work
(``operators/deferral.py``).
"""

from __future__ import annotations

import abc
import asyncio
import inspect
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from aliyun_training.stage_records import OutcomeStatus, TriggerOutcome

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class PollingTrigger(BaseTrigger):
    """Calls ``poll`` every ``poll_interval`` seconds until it returns the outcome, then fires it.

    A subclass takes its keyword arguments in ``__init__`` and keeps each as the attribute of the
    same name: ``serialize`` returns exactly those, so the triggerer rebuilds the same trigger. State
    that is not an argument (clients, what was logged) is built in the triggerer, on the first poll.
    An exception while polling ends the wait with an ``error`` outcome naming it, so the task fails
    with what went wrong rather than a bare trigger failure.
    """

    poll_interval: float
    #: The names of ``__init__``'s parameters, read once per class.
    _arguments: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
        variadic = [p.name for p in parameters if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if variadic:
            raise TypeError(f"{cls.__qualname__}.__init__ takes *{variadic[0]}: name each argument instead")
        cls._arguments = tuple(p.name for p in parameters)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {name: getattr(self, name) for name in self._arguments},
        )

    @property
    @abc.abstractmethod
    def subject(self) -> str:
        """What is waited for, in log lines: "job <id>", "the pod staging run"."""

    @abc.abstractmethod
    async def poll(self) -> TriggerOutcome[Any] | None:
        """The outcome once the work has ended, else None (logging its progress meanwhile)."""

    @abc.abstractmethod
    def outcome(self, status: OutcomeStatus, message: str = "") -> TriggerOutcome[Any]:
        """An outcome of this trigger's work that carries only a status and a message."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop the work and what it started; work already gone is not an error."""

    async def pause(self) -> None:
        """Wait between two polls: ``poll_interval`` seconds, unless ``poll`` itself waits for news."""
        await asyncio.sleep(self.poll_interval)

    def release(self) -> None:
        """Let go of what the polls shared with other triggers; called however ``run`` ends."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            while (outcome := await self.poll()) is None:
                await self.pause()
        except Exception as exc:
            self.log.exception("Watching %s failed", self.subject)
            outcome = self.outcome(OutcomeStatus.ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            self.release()
        yield TriggerEvent(outcome.model_dump(mode="json"))

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the work so it costs nothing more."""
        self.log.info("Task was killed while deferred: stopping %s", self.subject)
        await self.stop()
