"""Waits for a training job in the triggerer, so monitoring holds no worker slot.

The trigger may be run more than once and moved between triggerers, so it never stops the job in
``cleanup()``; it stops the job only in ``on_kill()``, which Airflow calls when a user marks the
deferred task failed/success or clears it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from aliyun_training.backends import get_backend
from aliyun_training.backends.base import JobHandle
from aliyun_training.monitor import JobMonitor


class TrainingJobTrigger(BaseTrigger):
    """Polls a job through its backend until it finishes, streaming status and logs to the task log."""

    def __init__(
        self,
        backend: str,
        handle: dict[str, Any],
        backend_config: dict[str, Any] | None = None,
        poll_interval: float = 10.0,
        log_cursor: dict[str, Any] | None = None,
        last_raw_status: str | None = None,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.handle = handle
        self.backend_config = backend_config or {}
        self.poll_interval = poll_interval
        self.log_cursor = log_cursor
        self.last_raw_status = last_raw_status

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "backend": self.backend,
                "handle": self.handle,
                "backend_config": self.backend_config,
                "poll_interval": self.poll_interval,
                "log_cursor": self.log_cursor,
                "last_raw_status": self.last_raw_status,
            },
        )

    def _job_handle(self) -> JobHandle:
        return JobHandle.model_validate(self.handle)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        handle = self._job_handle()
        try:
            monitor = JobMonitor(
                get_backend(self.backend, self.backend_config),
                handle,
                self.log,
                cursor=self.log_cursor,
                last_raw_status=self.last_raw_status,
            )
            while True:
                status = await monitor.apoll()
                if status.state.is_terminal:
                    yield TriggerEvent(await monitor.aoutcome(status))
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            self.log.exception("Monitoring job %s failed", handle.job_id)
            yield TriggerEvent(
                {"status": "error", "handle": handle.model_dump(), "message": f"{type(exc).__name__}: {exc}"}
            )

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the job and every process or pod it started."""
        handle = self._job_handle()
        self.log.info("Task was killed while deferred: stopping job %s", handle.job_id)
        await get_backend(self.backend, self.backend_config).astop(handle)
