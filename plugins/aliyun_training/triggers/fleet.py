"""One status listing per poll for every job a triggerer watches in one account, region and workspace.

A triggerer holding a thousand deferred training tasks would otherwise ask the platform about each
job on every poll: 100 GetJob a second at a 10 s poll, which a cloud API throttles long before,
slowing every job's monitoring, submission and stop together. Instead the triggers whose backends
share a ``batch_key`` (``backends.base.StatusListing``) join one :class:`StatusPoller` of their event
loop, which lists all their jobs every poll interval (DLC: ListJobs by JobIds, 100 a request; ACK:
the CRs and pods by label selector) and hands each trigger its job's status. A trigger alone makes
one listing request a poll, as it made one GetJob, and streams its job's logs every poll as before.

The poller lives as long as it has watchers: the last to leave ends it, and the next to join starts
a new one. A trigger leaves when its ``run`` ends, whatever ended it (its outcome, a cancellation when
the task was killed, the triggerer stopping); a page that arrives after a trigger left is handed to
those still watching. The shared backend instance reads each job's details and logs for its
trigger too, so what the listing read (DLC's pods and times) serves the log read that follows it.

Administrators turn batching off with ``[aliyun_training] batched_status = False`` (each trigger
then polls its own job, as before), and set how often a steadily running job's logs are read among
others with ``steady_log_seconds`` (``installation.py`` reads both).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aliyun_training.backends.base import JobHandle, JobStatus, StatusListing, TrainingBackend

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Watch:
    """One trigger's place in a poller: the latest sighting of its job, and a signal that it came."""

    poller: StatusPoller
    handle: JobHandle
    interval: float
    _sighting: JobStatus | None = None
    _error: BaseException | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def deliver(self, sighting: JobStatus | None, error: BaseException | None = None) -> None:
        """Hand over a poll's answer; a newer one replaces one the trigger has not taken yet."""
        self._sighting, self._error = sighting, error
        self._arrived.set()

    async def next(self) -> JobStatus | None:
        """The next poll's sighting of the job (None: the listing left it out); raises what the
        listing raised, so the trigger ends with that error as it would after its own GetJob."""
        await self._arrived.wait()
        self._arrived.clear()
        if self._error is not None:
            raise self._error
        return self._sighting

    @property
    def alone(self) -> bool:
        """Whether no other trigger shares this poller."""
        return self.poller.watchers == 1

    def leave(self) -> None:
        self.poller.leave(self)


class StatusPoller:
    """Lists the jobs of its watchers every poll interval (the shortest any watcher asked for)."""

    def __init__(
        self, backend: TrainingBackend, lister: StatusListing, pollers: dict[str, StatusPoller]
    ) -> None:
        #: The one instance that lists, and reads every watched job's details and logs.
        self.backend = backend
        self._lister = lister
        self._pollers = pollers
        self._watches: list[Watch] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def watchers(self) -> int:
        return len(self._watches)

    def join(self, handle: JobHandle, interval: float) -> Watch:
        watch = Watch(self, handle, interval)
        self._watches.append(watch)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="aliyun-training status poller"
            )
        return watch

    def leave(self, watch: Watch) -> None:
        """Stop listing ``watch``'s job; the last watcher to leave ends the poller at once, even in
        the middle of a listing, whose answer then goes to no one."""
        if watch in self._watches:
            self._watches.remove(watch)
        if not any(other.handle.job_id == watch.handle.job_id for other in self._watches):
            self._lister.forget(watch.handle)
        if not self._watches and self._task is not None:
            self._task.cancel()
            self._task = None
            if self._pollers.get(self._lister.batch_key) is self:
                del self._pollers[self._lister.batch_key]

    async def _run(self) -> None:
        """List every watched job each interval until the last watcher leaves (which cancels this)."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            watches = list(self._watches)
            handles = list({watch.handle.job_id: watch.handle for watch in watches}.values())
            try:
                statuses = await self._lister.alisted_statuses(handles)
            except Exception as exc:
                log.warning("Listing %d jobs failed: %s", len(handles), exc)
                for watch in watches:
                    watch.deliver(None, exc)
            else:
                for watch in watches:
                    watch.deliver(statuses.get(watch.handle.job_id))
            # The next listing starts one interval after this one started, not after it ended: a
            # job that ends is then seen within one interval and one listing, however long lists take.
            interval = min(watch.interval for watch in self._watches)
            await asyncio.sleep(max(0.0, started + interval - loop.time()))


#: Per event loop (the triggerer has one; tests start many), its pollers by batch key.
_pollers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, StatusPoller]] = (
    weakref.WeakKeyDictionary()
)


def watch_job(backend: TrainingBackend, lister: StatusListing, handle: JobHandle, interval: float) -> Watch:
    """Join the running loop's poller for ``lister``'s batch key, started with ``backend`` (the same
    object as ``lister``) when there is none."""
    pollers = _pollers.setdefault(asyncio.get_running_loop(), {})
    poller = pollers.get(lister.batch_key)
    if poller is None:
        poller = pollers[lister.batch_key] = StatusPoller(backend, lister, pollers)
    return poller.join(handle, interval)
