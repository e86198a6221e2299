"""Waits for a training job in the triggerer, so monitoring holds no worker slot."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from aliyun_training.backends import get_backend
from aliyun_training.backends.base import JobHandle, StatusListing, TrainingBackend
from aliyun_training.installation import batched_status, steady_log_seconds
from aliyun_training.monitor import GpuBudget, JobMonitor, JobOutcome
from aliyun_training.triggers.base import PollingTrigger
from aliyun_training.triggers.fleet import watch_job

if TYPE_CHECKING:
    from aliyun_training.stage_records import OutcomeStatus
    from aliyun_training.triggers.fleet import Watch


class TrainingJobTrigger(PollingTrigger):
    """Polls a job through its backend until it finishes, streaming status and logs to the task log.

    ``log_cursor`` and ``last_raw_status`` are where the deferring task's own first poll left off,
    so the trigger logs only what is new. ``budget`` (a ``GpuBudget``) is what the run's
    ``max_gpu_hours`` leaves this job: the trigger stops the job once it used that much. ``on_kill``
    stops the job and every process or pod it started.

    A job whose backend lists many jobs at once (``StatusListing``: DLC, ACK) is watched through the
    triggerer's shared poller (``triggers/fleet.py``), which reads it with the other jobs of its
    account and workspace or namespace. Among others, its logs are read at the pace
    ``JobMonitor.apoll_sighted`` sets with ``steady_log_seconds``; alone, every poll. A local job, or
    any with ``batched_status`` off, is polled on its own.
    """

    def __init__(
        self,
        backend: str,
        handle: dict[str, Any],
        backend_config: dict[str, Any] | None = None,
        poll_interval: float = 10.0,
        log_cursor: dict[str, Any] | None = None,
        last_raw_status: str | None = None,
        budget: dict[str, Any] | None = None,
        waited_because: str = "",
    ) -> None:
        super().__init__()
        self.backend = backend
        self.handle = handle
        self.backend_config = backend_config or {}
        self.poll_interval = poll_interval
        self.log_cursor = log_cursor
        self.last_raw_status = last_raw_status
        self.budget = budget
        self.waited_because = waited_because

    @property
    def job_handle(self) -> JobHandle:
        return JobHandle.model_validate(self.handle)

    @property
    def subject(self) -> str:
        return f"job {self.job_handle.job_id}"

    @cached_property
    def _backend(self) -> TrainingBackend:
        return get_backend(self.backend, self.backend_config)

    @cached_property
    def _watch(self) -> Watch | None:
        """This job's place in the shared poller, joined on the first poll (in the triggerer's loop)."""
        backend = self._backend
        if not isinstance(backend, StatusListing) or not batched_status():
            return None
        return watch_job(backend, backend, self.job_handle, self.poll_interval)

    @cached_property
    def _steady_log_seconds(self) -> float:
        return steady_log_seconds()

    @cached_property
    def _monitor(self) -> JobMonitor:
        watch = self._watch
        return JobMonitor(
            watch.poller.backend if watch else self._backend,
            self.job_handle,
            self.log,
            cursor=self.log_cursor,
            last_raw_status=self.last_raw_status,
            budget=GpuBudget.model_validate(self.budget) if self.budget else None,
            waited_because=self.waited_because,
        )

    async def poll(self) -> JobOutcome | None:
        watch = self._watch
        monitor = self._monitor
        if watch is None:
            status = await monitor.apoll()
        else:
            sighting = await watch.next()
            # Alone, the job's logs stream every poll as they always did; among others, at a pace.
            status = await monitor.apoll_sighted(sighting, None if watch.alone else self._steady_log_seconds)
        given_up = monitor.give_up(status)
        if given_up is not None:
            await self.stop()
            return given_up
        return await monitor.aoutcome(status) if status.state.is_terminal else None

    async def pause(self) -> None:
        """A watched job's next poll waits for the poller's next listing instead of a sleep."""
        if self._watch is None:
            await super().pause()

    def release(self) -> None:
        watch = self.__dict__.get("_watch")  # joined on the first poll, if any came
        if watch is not None:
            watch.leave()

    def outcome(self, status: OutcomeStatus, message: str = "") -> JobOutcome:
        return JobOutcome(status=status, handle=self.job_handle, message=message)

    async def stop(self) -> None:
        await self._backend.astop(self.job_handle)
