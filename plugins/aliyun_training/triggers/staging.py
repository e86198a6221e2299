"""Waits for a staging run outside the worker (a staging pod, a CPFS data flow import).

Like the training trigger it may run more than once and move between triggerers, so it never
stops the run in ``cleanup()``; ``on_kill()`` (the user marked the deferred task failed or cleared
it) stops it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from aliyun_training.staging.remote import RemoteStager


class StagingTrigger(BaseTrigger):
    """Polls a remote staging run until it succeeds or fails, logging its progress line."""

    def __init__(
        self, mode: str, config: dict[str, Any], handle: dict[str, Any], poll_interval: float = 15.0
    ) -> None:
        super().__init__()
        self.mode = mode
        self.config = config
        self.handle = handle
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "mode": self.mode,
                "config": self.config,
                "handle": self.handle,
                "poll_interval": self.poll_interval,
            },
        )

    def _stager(self) -> RemoteStager:
        from aliyun_training.staging.stagers import remote_stager

        return remote_stager(self.mode, self.config)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last_progress = ""
        try:
            stager = self._stager()
            while True:
                status = await stager.apoll(self.handle)
                if status.progress and status.progress != last_progress:
                    self.log.info("%s", status.progress)
                    last_progress = status.progress
                if status.state != "running":
                    yield TriggerEvent(
                        {"status": status.state, "handle": self.handle, "message": status.message}
                    )
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            self.log.exception("Watching the %s staging run failed", self.mode)
            yield TriggerEvent(
                {"status": "error", "handle": self.handle, "message": f"{type(exc).__name__}: {exc}"}
            )

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the staging run so it copies nothing more."""
        self.log.info("Task was killed while deferred: stopping the %s staging run", self.mode)
        await asyncio.to_thread(self._stager().stop, self.handle)
