"""One polling step of a running job, shared by the trigger (deferred) and the operator (blocking).

Both paths must report the same things: every status transition once, every new log line once,
and on a failure the failing node's last lines. Keeping that here means the deferred and the
blocking mode cannot drift apart.
"""

from __future__ import annotations

import logging
from typing import Any

from aliyun_training.backends.base import JobHandle, JobState, JobStatus, TrainingBackend

#: How many log lines of the failing node a failed task shows in its error.
FAILURE_TAIL_LINES = 50


class JobMonitor:
    """Polls one job, logging transitions and new log lines as they happen."""

    def __init__(
        self,
        backend: TrainingBackend,
        handle: JobHandle,
        log: logging.Logger | Any,
        cursor: dict[str, Any] | None = None,
        last_raw_status: str | None = None,
    ) -> None:
        self.backend = backend
        self.handle = handle
        self.log = log
        self.cursor = cursor
        self.last_raw_status = last_raw_status

    def poll(self) -> JobStatus:
        """Read the status once, log what changed and the new log lines, and return the status."""
        status = self.backend.status(self.handle)
        if status.raw != self.last_raw_status:
            reason = f" ({status.reason})" if status.reason else ""
            self.log.info(
                "Job %s: %s -> %s%s",
                self.handle.job_id,
                self.last_raw_status or "submitted",
                status.raw,
                reason,
            )
            self.last_raw_status = status.raw
        self._forward_logs()
        return status

    def _forward_logs(self) -> None:
        while True:
            chunk = self.backend.logs(self.handle, self.cursor)
            self.cursor = chunk.cursor
            for line in chunk.lines:
                self.log.info("%s", line)
            if not chunk.lines:
                return

    def outcome(self, status: JobStatus) -> dict[str, Any]:
        """The JSON payload describing a finished job: what the operator turns into a result or error."""
        payload: dict[str, Any] = {
            "status": "success" if status.state is JobState.SUCCEEDED else status.state.value,
            "handle": self.handle.model_dump(),
            "job_status": status.model_dump(mode="json"),
        }
        if status.state is JobState.FAILED:
            node = status.failed_node if status.failed_node is not None else 0
            payload["failed_node"] = node
            payload["tail"] = self.backend.tail(self.handle, node, FAILURE_TAIL_LINES)
        return payload
