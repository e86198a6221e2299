"""Retrain when data lands: what a pipeline declared with ``pipeline.on_new_version`` adds to its DAG.

The DAG schedules on an Asset of its own (:func:`versions_asset`), one per pipeline so that two
pipelines of one dataset each get their run, whose watcher (``triggers.new_version``) announces each
new complete version of the dataset once. The run Airflow starts for an announcement takes the
version it names (:func:`take_landed_version`) as if its trigger form had named it.

The watcher lists the source of the backend the trigger form defaults to, which is the backend an
asset-triggered run (it has no form) runs on. That source is resolved when the DAG is parsed, as
the trigger's arguments must be known then: the catalog's ``dataset_sources`` of that backend,
which reads the backend's environment file (a cloud source) or the local root of the parsing
process (the local object store), and makes no request.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetOrTimeSchedule, AssetWatcher, CronTriggerTimetable
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.backend_catalog import Backend, backend_record
from aliyun_training.declaration import DeclarationError
from aliyun_training.form import form_schema
from aliyun_training.settings import local_paths
from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.staging.versions import versions_folder
from aliyun_training.triggers.new_version import TAKEN_KEY, NewVersionTrigger
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from airflow.sdk.definitions.asset import AssetNameRef

    from aliyun_training.declaration import PipelineDeclaration
    from aliyun_training.plan.inputs import DatasetSources

log = logging.getLogger(__name__)

#: How long after a pipeline's ``dagrun_timeout`` an announced version may still wait for its run:
#: the run is created once a running one ends, then queued and configured within minutes.
TAKE_SLACK = timedelta(minutes=10)


def versions_asset(declaration: PipelineDeclaration, environment_dir: Path) -> Asset | None:
    """The Asset whose watcher announces the pipeline's new versions; None without ``on_new_version``."""
    watch = declaration.pipeline.on_new_version
    if watch is None:
        return None
    sources = _watched_sources(declaration, environment_dir)
    assert sources.template is not None, "_watched_sources refuses a source it cannot list"
    timeout = timedelta(hours=declaration.pipeline.dagrun_timeout_hours) + TAKE_SLACK
    trigger = NewVersionTrigger(
        asset=_asset(declaration).name,
        dataset=declaration.dataset.name,
        source_uri=sources.template,
        alibaba_cloud_conn_id=sources.connection,
        take_timeout=timeout.total_seconds(),
        marker=declaration.dataset.version.marker,
        poll_interval=float(watch.poll_seconds),
    )
    asset = _asset(declaration)
    return Asset(
        name=asset.name,
        uri=asset.uri,
        watchers=[AssetWatcher(name=f"{declaration.dag_id}_new_versions", trigger=trigger)],
    )


def pipeline_schedule(
    declaration: PipelineDeclaration,
    timetable: CronTriggerTimetable | str | None,
    environment_dir: Path,
) -> CronTriggerTimetable | AssetOrTimeSchedule | Asset | str | None:
    """The DAG's schedule: ``timetable`` (the declared ``schedule``), and with ``on_new_version`` the
    versions Asset too, alone when nothing is declared to run on a time schedule."""
    asset = versions_asset(declaration, environment_dir)
    if asset is None:
        return timetable
    if timetable is None:
        return asset
    if timetable in ("@once", "@continuous"):
        raise _error(
            declaration,
            f"a {timetable} schedule cannot be combined with runs started as versions land "
            "(fix: give pipeline.schedule a cron expression, or remove it)",
        )
    if isinstance(timetable, str):
        # A cron schedule with catchup, which a DAG would turn into this timetable itself.
        timetable = CronTriggerTimetable(timetable, timezone="UTC")
    return AssetOrTimeSchedule(timetable=timetable, assets=[asset])


def version_inlets(declaration: PipelineDeclaration) -> list[AssetNameRef]:
    """``configure``'s inlets: the versions Asset, whose state store the run writes the version it
    took to. A reference by name, so the inlet does not replace the watched Asset when Airflow
    collects the DAG's assets."""
    if declaration.pipeline.on_new_version is None:
        return []
    return [Asset.ref(name=_asset(declaration).name)]


def take_landed_version(
    params: dict[str, Any],
    declaration: PipelineDeclaration,
    triggering_asset_events: Mapping[Any, Any] | None,
    asset_state_store: Any,
) -> dict[str, Any]:
    """An asset-triggered run's form: ``params`` naming the version its watcher's event announced.

    The version is recorded as taken in the Asset's state store, which lets the watcher announce the
    next one. A run with no such event (an Asset event created by hand) keeps the declared choice;
    if Airflow folded several announcements into the run, it trains on the last one.
    """
    events = (triggering_asset_events or {}).get(_asset(declaration), ())
    announced = [
        payload["version"]
        for event in events
        if isinstance(payload := event.extra.get("payload"), dict) and "version" in payload
    ]
    if not announced:
        log.info("No event of %s names a version: the run takes its declared one", _asset(declaration).name)
        return params
    version = announced[-1]
    if not isinstance(version, str) or not re.fullmatch(DATASET_VERSION_PATTERN, version):
        raise AirflowFailException(
            f"dataset_version: the triggering asset event names {version!r}, which is not a version name "
            "(fix: trigger a run naming the version in the form)"
        )
    if len(announced) > 1:
        log.warning(
            "This run trains on %s; the versions %s announced to it too get no run of their own "
            "(fix: trigger a run naming each)",
            version,
            announced[:-1],
        )
    asset_state_store[Asset.ref(name=_asset(declaration).name)].set(TAKEN_KEY, version)
    log.info("Version %s of %s landed: this run trains on it", version, declaration.dataset.name)
    return {**params, "dataset_version": version}


def _asset(declaration: PipelineDeclaration) -> Asset:
    """The versions Asset's name and URI (without its watcher), the pipeline's own."""
    return Asset(name=f"{declaration.dag_id}_versions", uri=f"dataset://{declaration.dag_id}/versions")


def _watched_sources(declaration: PipelineDeclaration, environment_dir: Path) -> DatasetSources:
    """Where the default backend's runs read their versions; DeclarationError when that cannot be listed."""
    backend = Backend(form_schema(declaration)["backend"]["enum"][0])
    environment = environment_dir / declaration.backends[backend].environment
    try:
        sources: DatasetSources = backend_record(backend).part("dataset_sources")(
            backend, environment, declaration, local_paths()
        )
        if sources.template is not None:
            versions_folder(sources.template, declaration.dataset.name)
    except SpecError as exc:
        raise _error(declaration, f"cannot list the versions {backend.value} runs read: {exc}") from None
    if sources.template is None:
        raise _error(
            declaration,
            f"{environment.name} mounts a fixed dataset, whose versions cannot be listed (fix: give it a "
            "staging block with a source_uri, or remove pipeline.on_new_version)",
        )
    return sources


def _error(declaration: PipelineDeclaration, message: str) -> DeclarationError:
    where = f"pipeline declaration {declaration.source}" if declaration.source else "pipeline declaration"
    return DeclarationError(f"{where}: pipeline.on_new_version: {message}")
