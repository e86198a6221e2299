"""Retrain when data lands: the AssetWatcher trigger that announces each new complete dataset version once.

A pipeline declared with ``pipeline.on_new_version`` schedules on an Asset of its own whose watcher
runs :class:`NewVersionTrigger` in the triggerer. Every ``poll_interval`` it lists the versions in
the dataset's source (``staging.versions.source_versions``, one delimited listing) and looks at
each version it has not seen yet the way ``wait_for_version`` does (``check_landing``: the
completion marker, or a listing that holds still a poll apart). Each version that has landed is
announced with one ``TriggerEvent`` naming it, oldest first, and the run Airflow starts for the
event trains on it (``pipelines.watch.take_landed_version``).

What the watcher has seen lives in its Asset's state store (Airflow 3.3's ``asset_state_store``,
which the triggerer hands an event trigger for the assets it watches), not in the trigger:

- ``WATERMARK_KEY``: the source folder watched, every version seen there and the last version
  announced. It is written before the event is handed to the triggerer, so a restarted triggerer,
  or a trigger rebuilt with other arguments, never announces a version twice. A triggerer killed in
  the instant between the two loses that announcement instead (a version trained twice costs more
  than one a user triggers by hand); the watcher then waits as described next.
- ``TAKEN_KEY``: the version the last asset-triggered run took, written by that run's ``configure``.
  Airflow folds every event that arrives while a run of the DAG is queued, or while the DAG is at
  ``max_active_runs``, into one run; so the next version is announced only once a run has taken the
  previous one, and each version gets a run of its own. A run that never takes its version (deleted
  before it started) holds the next announcement back for at most ``take_timeout`` seconds.

The versions in the source when the watcher first looks at a folder (the pipeline's first
deployment, or a new ``source_uri``) are the baseline: those that have landed are recorded and not
announced, those still uploading are announced once they land. Without a marker a version needs two
looks a poll apart, so that baseline is taken on the second look.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from aliyun_training.staging.versions import check_landing, source_versions, version_order, versions_folder

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

#: The asset state store key of the watcher's :class:`Watermark`.
WATERMARK_KEY = "new_versions"
#: The asset state store key a run writes the version it took to.
TAKEN_KEY = "taken_version"


@dataclass(frozen=True)
class Watermark:
    """What the watcher has seen in ``folder``: every version it recorded, and the last it announced."""

    folder: str
    versions: frozenset[str]
    announced: str | None = None

    @classmethod
    def read(cls, stored: Any, folder: str) -> Watermark | None:
        """The stored watermark of ``folder``; None when there is none (a first look, or the source moved)."""
        if not isinstance(stored, dict) or stored.get("folder") != folder:
            return None
        return cls(folder, frozenset(stored.get("versions") or ()), stored.get("announced"))

    def dump(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "versions": sorted(self.versions, key=version_order),
            "announced": self.announced,
        }

    def announce(self, version: str) -> Watermark:
        return Watermark(self.folder, self.versions | {version}, version)


@dataclass
class _Hold:
    """The announcement no run has taken yet, since when this trigger instance has been waiting on it,
    and whether it gave up waiting (``take_timeout``)."""

    version: str
    since: float = field(default_factory=time.monotonic)
    given_up: bool = False


class NewVersionTrigger(BaseEventTrigger):
    """Announces each new complete version of ``dataset`` in ``source_uri`` once, to the Asset ``asset``.

    :param asset: the name of the Asset it watches for (its state store keeps the watermark).
    :param source_uri: the versions' source template (``{dataset}``, ``{version}``): an ``oss://`` or
        the local object store's ``file://`` one.
    :param marker: the object that says a version is complete (``dataset.version.marker``); None: a
        listing unchanged a poll apart.
    :param take_timeout: how long an announcement no run took holds the next one back, in seconds.
    """

    def __init__(
        self,
        asset: str,
        dataset: str,
        source_uri: str,
        alibaba_cloud_conn_id: str,
        take_timeout: float,
        marker: str | None = "_SUCCESS",
        poll_interval: float = 300.0,
    ) -> None:
        super().__init__()
        self.asset = asset
        self.dataset = dataset
        self.source_uri = source_uri
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self.marker = marker
        self.poll_interval = poll_interval
        self.take_timeout = take_timeout
        # Kept between polls of this instance only: a rebuilt trigger starts them afresh, which at
        # most delays a marker-less version by one poll or makes a hold wait its whole timeout again.
        self._digests: dict[str, str | None] = {}
        self._looked = False
        self._hold: _Hold | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "asset": self.asset,
                "dataset": self.dataset,
                "source_uri": self.source_uri,
                "alibaba_cloud_conn_id": self.alibaba_cloud_conn_id,
                "marker": self.marker,
                "poll_interval": self.poll_interval,
                "take_timeout": self.take_timeout,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll forever; a failed poll (OSS unreachable, a setting to fix) is logged and tried again,
        since a watcher runs for months and must outlive a blip."""
        if self.asset_state_store is None:
            raise RuntimeError(
                f"{type(self).__name__} runs only as an asset watcher in a triggerer, which hands it "
                "its Asset's state store"
            )
        store = self.asset_state_store[Asset.ref(name=self.asset)]
        while True:
            try:
                version = await self._poll(store)
            except Exception:
                self.log.exception("Looking for new versions of %s failed; looking again", self.dataset)
                version = None
            if version is not None:
                yield TriggerEvent(
                    {
                        "dataset": self.dataset,
                        "version": version,
                        "source_uri": self.source_uri.format(dataset=self.dataset, version=version),
                    }
                )
            await asyncio.sleep(self.poll_interval)

    async def _poll(self, store: Any) -> str | None:
        """One look: the version to announce now, recorded as announced, or None."""
        folder = versions_folder(self.source_uri, self.dataset)
        watermark = Watermark.read(await store.aget(WATERMARK_KEY), folder)
        if watermark is None:
            await self._take_baseline(store, folder)
            return None
        if await self._holding(store, watermark):
            return None
        listed = await self._listed()
        landed = await asyncio.to_thread(self._landed, [v for v in listed if v not in watermark.versions])
        if not landed:
            return None
        version = landed[0]
        await store.aset(WATERMARK_KEY, watermark.announce(version).dump())
        self.log.info("Version %s of %s landed in %s: announcing it", version, self.dataset, folder)
        return version

    async def _take_baseline(self, store: Any, folder: str) -> None:
        """Record the versions that have landed in a folder seen for the first time, announcing none."""
        listed = await self._listed()
        landed = await asyncio.to_thread(self._landed, listed)
        if self.marker is None and not self._looked:
            self._looked = True
            self.log.info("%s: %d versions listed; the baseline is the next look's", folder, len(listed))
            return
        await store.aset(WATERMARK_KEY, Watermark(folder, frozenset(landed)).dump())
        self.log.info(
            "Watching %s: its %d complete versions are the baseline, not announced (newest: %s)",
            folder,
            len(landed),
            landed[-1] if landed else "none",
        )

    async def _holding(self, store: Any, watermark: Watermark) -> bool:
        """Whether the last announcement still waits for a run to take it (see the module's docstring)."""
        announced = watermark.announced
        if announced is None or await store.aget(TAKEN_KEY) == announced:
            self._hold = None
            return False
        if self._hold is None or self._hold.version != announced:
            self._hold = _Hold(announced)
            self.log.info("Version %s was announced; the next waits until a run has taken it", announced)
        if self._hold.given_up:
            return False
        waited = time.monotonic() - self._hold.since
        if waited < self.take_timeout:
            return True
        self._hold.given_up = True
        self.log.warning(
            "No run took version %s within %.0f s (deleted before it started?): announcing the next; "
            "trigger a run naming %s to train on it",
            announced,
            waited,
            announced,
        )
        return False

    async def _listed(self) -> list[str]:
        """The versions in the source, oldest first (one delimited listing, in a thread)."""
        return await asyncio.to_thread(
            source_versions, self.source_uri, self.dataset, self.alibaba_cloud_conn_id
        )

    def _landed(self, versions: list[str]) -> list[str]:
        """The ``versions`` that have landed, in the given order; one request each (in a thread)."""
        landed = []
        for version in versions:
            uri = self.source_uri.format(dataset=self.dataset, version=version)
            check = check_landing(uri, self.marker, self.alibaba_cloud_conn_id, self._digests.get(version))
            self._digests[version] = check.digest
            if check.landed:
                landed.append(version)
        return landed
