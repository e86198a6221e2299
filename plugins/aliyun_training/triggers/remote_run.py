"""Waits for work outside the worker (a staging pod, a CPFS import, an image build).

Like the training trigger it may run more than once and move between triggerers, so it never
stops the run in ``cleanup()``; ``on_kill()`` (the user marked the deferred task failed or cleared
it) stops it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from aliyun_training.remote import RemoteRun, remote_run


class RemoteRunTrigger(BaseTrigger):
    """Polls a remote run until it succeeds or fails, logging each new progress line."""

    def __init__(
        self,
        kind: str,
        mode: str,
        config: dict[str, Any],
        handle: dict[str, Any],
        poll_interval: float = 15.0,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.mode = mode
        self.config = config
        self.handle = handle
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kind": self.kind,
                "mode": self.mode,
                "config": self.config,
                "handle": self.handle,
                "poll_interval": self.poll_interval,
            },
        )

    def _run(self) -> RemoteRun:
        return remote_run(self.kind, self.mode, self.config)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last_progress = ""
        try:
            run = self._run()
            while True:
                status = await run.apoll(self.handle)
                if status.progress and status.progress != last_progress:
                    self.log.info("%s", status.progress)
                    last_progress = status.progress
                if status.state != "running":
                    yield self._event(status.state, status.message)
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            self.log.exception("Watching the %s %s run failed", self.mode, self.kind)
            yield self._event("error", f"{type(exc).__name__}: {exc}")

    def _event(self, status: str, message: str) -> TriggerEvent:
        """The run's end, with the settings ``execute_complete`` rebuilds the run from."""
        return TriggerEvent(
            {"status": status, "handle": self.handle, "config": self.config, "message": message}
        )

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the run so it does no more work."""
        self.log.info("Task was killed while deferred: stopping the %s %s run", self.mode, self.kind)
        await asyncio.to_thread(self._run().stop, self.handle)
