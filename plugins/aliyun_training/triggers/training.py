"""Waits for a training job in the triggerer, so monitoring holds no worker slot."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aliyun_training.backends import get_backend
from aliyun_training.backends.base import JobHandle, StatusListing, TrainingBackend
from aliyun_training.gpu_use import GpuReading
from aliyun_training.installation import batched_status, steady_log_seconds
from aliyun_training.live import (
    GPU_READ_TIMEOUT,
    LIVE_KEY,
    LIVE_SECONDS,
    LiveRecord,
    LiveSettings,
    LiveView,
    open_live,
    seal_live,
)
from aliyun_training.monitor import GpuBudget, JobMonitor, JobOutcome
from aliyun_training.notifications import Notice, NotifyEvent, asend_notice
from aliyun_training.triggers.base import PollingTrigger
from aliyun_training.triggers.fleet import watch_job

if TYPE_CHECKING:
    from aliyun_training.backends.base import JobStatus
    from aliyun_training.stage_records import OutcomeStatus
    from aliyun_training.triggers.fleet import Watch


class LiveStore:
    """The job's live record where the run page reads it: the task instance's XCom ``LIVE_KEY``,
    sealed (``live.seal_live``), written through the triggerer's connection to the API server."""

    def __init__(self, settings: LiveSettings) -> None:
        self.settings = settings

    def _where(self) -> dict[str, Any]:
        s = self.settings
        return {"dag_id": s.dag_id, "run_id": s.run_id, "task_id": s.task_id, "map_index": s.map_index}

    async def read(self) -> LiveRecord | None:
        """The record an earlier trigger of this task instance wrote, when its seal is good."""
        from airflow.sdk.execution_time.xcom import XCom

        stored = await asyncio.to_thread(XCom.get_one, key=LIVE_KEY, **self._where())
        return open_live(stored, **self._where())

    async def write(self, record: LiveRecord) -> None:
        from airflow.sdk.execution_time.xcom import XCom

        value = seal_live(record, **self._where())
        await asyncio.to_thread(XCom.set, LIVE_KEY, value, **self._where())


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

    ``live`` (a ``LiveSettings``) makes it keep the job's live record for the run page (``live.py``):
    the progress the job prints (logged at least once a minute), its GPU use (read once a minute
    while it runs; a sustained idle is warned of once), GPU-hours and money so far, and the
    deadline, whose risk and miss are announced once to the pipeline's notifiers. What was
    announced is kept in the record, so a triggerer restart does not announce it again.
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
        live: dict[str, Any] | None = None,
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
        self.live = live
        self._live_written: LiveRecord | None = None
        self._live_written_at: datetime | None = None

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

    @cached_property
    def _live_settings(self) -> LiveSettings | None:
        return LiveSettings.model_validate(self.live) if self.live else None

    @cached_property
    def live_store(self) -> LiveStore | None:
        settings = self._live_settings
        return LiveStore(settings) if settings else None

    async def _start_view(self) -> None:
        """Give the monitor its live view, carrying on from the record an earlier trigger wrote."""
        settings, store = self._live_settings, self.live_store
        if settings is None or store is None or self._monitor.view is not None:
            return
        try:
            previous = await store.read()
        except Exception as exc:  # the record is for the page: monitoring goes on without it
            self.log.warning("Could not read job %s's live record: %s", self.job_handle.job_id, exc)
            previous = None
        self._monitor.view = settings.view(self.job_handle.job_id, self.backend, previous)

    async def poll(self) -> JobOutcome | None:
        await self._start_view()
        watch = self._watch
        monitor = self._monitor
        if watch is None:
            status = await monitor.apoll()
        else:
            sighting = await watch.next()
            # Alone, the job's logs stream every poll as they always did; among others, at a pace.
            status = await monitor.apoll_sighted(sighting, None if watch.alone else self._steady_log_seconds)
        if monitor.view is not None:
            await self._observe(monitor.view, status)
        given_up = monitor.give_up(status)
        if given_up is not None:
            await self.stop()
            return given_up
        return await monitor.aoutcome(status) if status.state.is_terminal else None

    async def _observe(self, view: LiveView, status: JobStatus) -> None:
        """Read GPU use when due, announce what is due once, and keep the live record current.

        The record (with what was announced) is written before the notices are sent: a triggerer
        that dies in between leaves a notice unsent rather than sending it twice after its restart.
        """
        now = datetime.now(UTC)
        if view.gpu_read_due(now):
            view.see_gpu(await self._gpu_reading(view), now)
        announced = view.announcements(now)
        for announcement in announced:
            self.log.warning("%s", announcement.text)
        record = view.record(now)
        await self._write_live(record, now, force=bool(announced) or status.state.is_terminal)
        settings = self._live_settings
        assert settings is not None
        for announcement in (a for a in announced if a.notify):
            event = NotifyEvent(announcement.key)
            notice = Notice.of_run(
                event, settings.dag_id, settings.run_id, announcement.text, settings.run_page
            )
            await asend_notice(notice, settings.notifications, self.log)

    async def _gpu_reading(self, view: LiveView) -> GpuReading:
        """The job's GPU use since the last sample, read for at most ``GPU_READ_TIMEOUT``: a metric
        service that does not answer (or retries its throttling) never holds the job's monitoring
        up; what fails to read says why instead, and the next read asks again."""
        try:
            return await asyncio.wait_for(
                self._backend.agpu_reading(self.job_handle, view.gpu_since()), GPU_READ_TIMEOUT
            )
        except TimeoutError:
            return GpuReading(source=self.backend, unavailable=f"no answer within {GPU_READ_TIMEOUT:g} s")
        except Exception as exc:
            return GpuReading(
                source=self.backend, unavailable=f"reading GPU use failed: {type(exc).__name__}: {exc}"
            )

    async def _write_live(self, record: LiveRecord, now: datetime, force: bool) -> None:
        """Write the record on the job's first poll, when its status changed or its first progress
        or ETA came, when ``force``d (an announcement, the end) and else every ``LIVE_SECONDS``: a
        thousand jobs' progress is not written to the API server on every poll."""
        store = self.live_store
        if store is None:
            return
        written = self._live_written
        moved = written is None or _headline(written) != _headline(record)
        recent = (
            self._live_written_at is not None and (now - self._live_written_at).total_seconds() < LIVE_SECONDS
        )
        if recent and not (force or moved):
            return
        try:
            await store.write(_redacted(record))
        except Exception as exc:  # the page misses an update; the job's monitoring goes on
            self.log.warning("Could not write job %s's live record: %s", self.job_handle.job_id, exc)
            return
        self._live_written, self._live_written_at = record, now

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


def _headline(record: LiveRecord) -> tuple[str, bool, bool]:
    """What a page must show as soon as it changes: the status, whether progress and an ETA are known."""
    progress = record.progress
    return record.raw_status, progress is not None, progress is not None and progress.eta is not None


def _redacted(record: LiveRecord) -> LiveRecord:
    """The record with the secrets Airflow masks in logs masked in its lines and reasons too."""
    # Where Airflow itself asks providers to import it from (its old home warns it is deprecated).
    from airflow.sdk._shared.secrets_masker import redact

    tails = {node: [str(redact(line)) for line in lines] for node, lines in record.tails.items()}
    history = [change.model_copy(update={"reason": str(redact(change.reason))}) for change in record.history]
    return record.model_copy(update={"tails": tails, "history": history})
