"""Retrain when data lands, as the DAG is built: the versions Asset and its watcher, the schedule
with and without a cron, the source watched, and the version an asset-triggered run takes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.declaration import DeclarationError, PipelineDeclaration, declare
from aliyun_training.pipelines.factory import training_pipeline
from aliyun_training.pipelines.watch import pipeline_schedule, take_landed_version, version_inlets
from aliyun_training.triggers.new_version import TAKEN_KEY, NewVersionTrigger
from fakes.environment_files import CIFAR10, write_environment

if TYPE_CHECKING:
    from pathlib import Path

SOURCE = "oss://ml-data/datasets/{dataset}/{version}/"
STAGING = {"staging": {"mode": "direct", "source_uri": SOURCE, "target_root": "/mnt/cpfs/datasets"}}


def cifar10(**pipeline: Any) -> PipelineDeclaration:
    """The CIFAR-10 example with ``pipeline`` laid over its pipeline block."""
    data = yaml.safe_load(CIFAR10.read_text())
    data["pipeline"] = {**data["pipeline"], "on_new_version": {"poll_seconds": 5}, **pipeline}
    data["pipeline"] = {key: value for key, value in data["pipeline"].items() if value is not None}
    return declare(data, CIFAR10.parent)


def dlc_only(tmp_path: Path, environment: dict[str, Any], **dataset: Any) -> PipelineDeclaration:
    """A pipeline that runs on DLC only (its form's default backend), with ``environment`` in dlc.json."""
    write_environment(tmp_path, "dlc", environment)
    data = yaml.safe_load(CIFAR10.read_text())
    data["pipeline"]["on_new_version"] = {"poll_seconds": 60}
    data["backends"] = {"dlc": {"environment": "dlc.json"}}
    data["dataset"] = {**data["dataset"], **dataset}
    return declare(data, CIFAR10.parent)


def watcher_of(schedule: Any) -> tuple[Asset, NewVersionTrigger]:
    asset = schedule if isinstance(schedule, Asset) else next(iter(schedule.asset_condition.objects))
    [watcher] = asset.watchers
    assert watcher.name == "cifar10_retrain_new_versions"
    return asset, watcher.trigger


def test_without_on_new_version_the_schedule_is_the_declared_one_and_configure_has_no_inlet(
    tmp_path: Path,
) -> None:
    declaration = cifar10(on_new_version=None)
    timetable = CronTriggerTimetable("@weekly", timezone="UTC")

    assert pipeline_schedule(declaration, timetable, tmp_path) is timetable
    assert version_inlets(declaration) == []


def test_without_a_schedule_the_pipeline_runs_on_its_versions_asset_alone(
    tmp_path: Path, local_root: Path
) -> None:
    schedule = pipeline_schedule(cifar10(schedule=None), None, tmp_path)

    asset, trigger = watcher_of(schedule)
    assert isinstance(schedule, Asset)
    assert (asset.name, asset.uri) == ("cifar10_retrain_versions", "dataset://cifar10_retrain/versions")
    # The form's default backend is local: the local object store of this process's local root.
    assert trigger.serialize()[1] == {
        "asset": "cifar10_retrain_versions",
        "dataset": "cifar10",
        "source_uri": f"file://{local_root}/object-store/{{dataset}}/{{version}}/",
        "alibaba_cloud_conn_id": "alibaba_cloud_default",
        "marker": "_SUCCESS",
        "poll_interval": 5.0,
        "take_timeout": 12 * 3600.0 + 600,
    }


def test_with_a_cron_schedule_runs_start_on_its_ticks_or_when_a_version_lands(tmp_path: Path) -> None:
    timetable = CronTriggerTimetable("@weekly", timezone="UTC")

    schedule = pipeline_schedule(cifar10(), timetable, tmp_path)

    assert isinstance(schedule, AssetOrTimeSchedule) and schedule.timetable is timetable
    assert watcher_of(schedule)[0].name == "cifar10_retrain_versions"


def test_a_cron_schedule_with_catchup_becomes_the_timetable_a_dag_would_make_of_it(tmp_path: Path) -> None:
    schedule = pipeline_schedule(cifar10(catchup=True), "@weekly", tmp_path)

    assert isinstance(schedule, AssetOrTimeSchedule)
    assert schedule.timetable == CronTriggerTimetable("@weekly", timezone="UTC")


@pytest.mark.parametrize("preset", ["@once", "@continuous"])
def test_a_preset_that_is_not_a_period_cannot_be_combined_with_new_versions(
    tmp_path: Path, preset: str
) -> None:
    with pytest.raises(DeclarationError, match=rf"pipeline.on_new_version: a {preset} schedule cannot"):
        pipeline_schedule(cifar10(schedule=preset), preset, tmp_path)


def test_a_cloud_pipeline_watches_its_environments_staging_source_or_its_own(tmp_path: Path) -> None:
    from_environment = pipeline_schedule(dlc_only(tmp_path, STAGING), None, tmp_path)
    own = "oss://raw/{dataset}/{version}/"
    declared = pipeline_schedule(dlc_only(tmp_path, STAGING, source_uri=own), None, tmp_path)

    assert watcher_of(from_environment)[1].source_uri == SOURCE
    assert watcher_of(declared)[1].source_uri == own


def test_a_cloud_environment_that_mounts_a_fixed_dataset_has_nothing_to_watch(tmp_path: Path) -> None:
    declaration = dlc_only(tmp_path, {})

    with pytest.raises(DeclarationError) as refused:
        pipeline_schedule(declaration, None, tmp_path)

    assert "pipeline.on_new_version: dlc.json mounts a fixed dataset" in str(refused.value)


def test_the_dag_schedules_on_the_asset_and_configure_reads_its_state(local_root: Path) -> None:
    dag = training_pipeline(cifar10(schedule=None), environment_dir=CIFAR10.parent.parent / "include/config")

    assert watcher_of(dag.timetable.asset_condition)[0].uri == "dataset://cifar10_retrain/versions"
    assert [ref.name for ref in dag.task_dict["configure"].inlets] == ["cifar10_retrain_versions"]


# -- the run's side ---------------------------------------------------------------------------------


class Store:
    """The run's asset_state_store accessors, recording what was set."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def __getitem__(self, ref: Any) -> Store:
        assert ref.name == "cifar10_retrain_versions"
        return self

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


def events(*payloads: Any) -> dict[Asset, list[SimpleNamespace]]:
    asset = Asset(name="cifar10_retrain_versions", uri="dataset://cifar10_retrain/versions")
    return {asset: [SimpleNamespace(extra={"from_trigger": True, "payload": p}) for p in payloads]}


def test_an_asset_triggered_run_takes_the_announced_version_and_records_it_as_taken() -> None:
    store = Store()
    params = {"backend": "local", "dataset_version": None}

    taken = take_landed_version(params, cifar10(), events({"version": "2026-11-29"}), store)

    assert taken == {"backend": "local", "dataset_version": "2026-11-29"}
    assert store.values == {TAKEN_KEY: "2026-11-29"}


def test_a_run_given_several_announcements_trains_on_the_last() -> None:
    store = Store()

    taken = take_landed_version({}, cifar10(), events({"version": "v1"}, {"version": "v2"}), store)

    assert taken["dataset_version"] == "v2" and store.values == {TAKEN_KEY: "v2"}


def test_a_run_without_an_announced_version_keeps_its_declared_choice() -> None:
    store = Store()
    params = {"dataset_version": None}

    assert take_landed_version(params, cifar10(), events("not a watcher's"), store) is params
    assert take_landed_version(params, cifar10(), {}, store) is params
    assert store.values == {}


@pytest.mark.parametrize("version", ["../2026-11-29", "v1/../../etc", "", 7])
def test_an_event_naming_something_that_is_not_a_version_fails_the_run(version: Any) -> None:
    store = Store()

    with pytest.raises(AirflowFailException, match="dataset_version: the triggering asset event names"):
        take_landed_version({}, cifar10(), events({"version": version}), store)

    assert store.values == {}, "nothing taken"
