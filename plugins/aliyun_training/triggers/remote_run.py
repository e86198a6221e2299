"""Waits for work outside the worker (a staging pod, a CPFS import, an image build)."""

from __future__ import annotations

import asyncio
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aliyun_training.remote_runs import remote_run
from aliyun_training.stage_records import OutcomeStatus, TriggerOutcome
from aliyun_training.triggers.base import PollingTrigger

if TYPE_CHECKING:
    from aliyun_training.remote import RemoteRun


class RemoteRunOutcome(TriggerOutcome[dict[str, Any]]):
    """How a remote run ended, with the settings ``execute_complete`` rebuilds the run from."""

    config: dict[str, Any]


class RemoteRunTrigger(PollingTrigger):
    """Polls a remote run until it succeeds or fails, logging each new progress line; ``on_kill``
    stops the run so it does no more work."""

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
        self._last_progress = ""

    @property
    def subject(self) -> str:
        return f"the {self.mode} {self.kind} run"

    @cached_property
    def _run(self) -> RemoteRun:
        return remote_run(self.kind, self.mode, self.config)

    async def poll(self) -> RemoteRunOutcome | None:
        status = await self._run.apoll(self.handle)
        if status.progress and status.progress != self._last_progress:
            self.log.info("%s", status.progress)
            self._last_progress = status.progress
        if status.state == "running":
            return None
        return self.outcome(OutcomeStatus(status.state), status.message)

    def outcome(self, status: OutcomeStatus, message: str = "") -> RemoteRunOutcome:
        return RemoteRunOutcome(status=status, handle=self.handle, config=self.config, message=message)

    async def stop(self) -> None:
        await asyncio.to_thread(self._run.stop, self.handle)
