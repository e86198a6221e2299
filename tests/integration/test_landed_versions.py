"""Every run takes only a version that has landed, however it chose it (issue 35, N8).

A scheduled run waits for its version (tests/integration/test_version_landing.py); here the runs that
do not wait: a manual run with no version (the newest), a manual run naming one, and a pipeline
declared ``from: newest``. Each looks with the completion check ``wait_for_version`` uses
(``staging.versions.look_at_version``), against the local object store and against the OSS
emulator through oss2 over HTTP.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.declaration import declare
from aliyun_training.form import parse_form
from aliyun_training.plan.inputs import RunContext
from aliyun_training.plan.resolve import choose_version, resolve_run
from aliyun_training.settings import LocalPaths
from aliyun_training.validation import SpecError
from tests.integration import test_new_version_trigger

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.declaration import PipelineDeclaration
    from aliyun_training.plan.inputs import DatasetChoice
    from tests.integration.test_new_version_trigger import Source

CONNECTION = "alibaba_cloud_default"
NEWER, OLDER = "2026-11-22", "2026-11-15"
#: The versions' source, once the local object store and once the OSS emulator: the fixture the
#: watcher's tests land their versions in.
source = test_new_version_trigger.source


def _declared(base: Path, **version: Any) -> PipelineDeclaration:
    return declare(
        {
            "pipeline": {"dag_id": "cifar10_landed"},
            "dataset": {"name": "cifar10", "version": version},
            "training": {"code_dir": ".", "command": "python train.py"},
        },
        base,
    )


def _choose(
    source: Source, declaration: PipelineDeclaration, version: str | None = None, scheduled: bool = False
) -> DatasetChoice:
    form = parse_form({"backend": "local", "dataset_version": version}, declaration)
    run = RunContext(datetime(2026, 11, 29, tzinfo=UTC), installation="tests", scheduled=scheduled)
    return choose_version(form, run, declaration, source.template, CONNECTION)


def _uri(source: Source, version: str) -> str:
    return source.template.format(dataset="cifar10", version=version)


@pytest.mark.parametrize(
    ("choose", "scheduled"),
    [("logical_date", False), ("newest", False), ("newest", True)],
    ids=["manual-run-no-version", "from-newest-manual", "from-newest-scheduled"],
)
def test_the_newest_version_is_the_newest_that_has_landed_and_the_log_names_those_skipped(
    source: Source, tmp_path: Path, caplog: pytest.LogCaptureFixture, choose: str, scheduled: bool
) -> None:
    """The newest folder holds only an upload in progress and no marker: it was taken before."""
    source.land(OLDER)
    source.put(f"cifar10/{NEWER}/train.npz.uploading", b"half a shard")

    with caplog.at_level(logging.WARNING, logger="aliyun_training.plan.resolve"):
        chosen = _choose(source, _declared(tmp_path, **{"from": choose}), scheduled=scheduled)

    assert (chosen.version, chosen.wait_minutes) == (OLDER, None), "landed: nothing left to wait for"
    assert [r.getMessage() for r in caplog.records if r.name == "aliyun_training.plan.resolve"] == [
        f"The newest version of cifar10 that has landed is {OLDER}; skipped, not landed: {NEWER} (its "
        "completion marker _SUCCESS is not there (the upload writes it last))"
    ]


def test_a_named_version_that_has_not_landed_is_refused_naming_the_marker_and_the_fix(
    source: Source, tmp_path: Path
) -> None:
    source.land(OLDER)
    source.put(f"cifar10/{NEWER}/train.npz", b"a whole shard, but the upload goes on")

    with pytest.raises(SpecError) as refused:
        _choose(source, _declared(tmp_path), NEWER)

    assert str(refused.value) == (
        f"dataset_version: version {NEWER} of cifar10 has not landed in {_uri(source, NEWER)}: its "
        "completion marker _SUCCESS is not there (the upload writes it last); nothing was staged (fix: "
        "wait until its upload has finished, which writes _SUCCESS last, then trigger the run again; or "
        "let a run wait for it: a scheduled run, or a backfill of the version's date, waits up to 360 "
        "minutes (dataset.version.wait_minutes))"
    )
    assert _choose(source, _declared(tmp_path), OLDER).version == OLDER


def test_with_no_landed_version_the_run_fails_naming_each_and_what_it_lacks(
    source: Source, tmp_path: Path
) -> None:
    source.put(f"cifar10/{OLDER}/train.npz.tmp", b"")
    source.put(f"cifar10/{NEWER}/train.npz", b"")

    with pytest.raises(SpecError) as refused:
        _choose(source, _declared(tmp_path, marker="DONE", **{"from": "newest"}))

    folder = _uri(source, "").removesuffix("/")
    assert str(refused.value) == (
        f"dataset_version: none of the 2 versions of cifar10 in {folder} has landed: {NEWER} (its completion "
        f"marker DONE is not there (the upload writes it last)); {OLDER} (its completion marker DONE is not "
        "there (the upload writes it last)) (fix: wait until its upload has finished, which writes DONE "
        "last, then trigger the run again)"
    ), "a pipeline that takes the newest has no run that waits"


@pytest.mark.slow
def test_without_a_marker_one_look_refuses_an_upload_in_progress_and_a_settled_version_waits_for_the_second(
    source: Source, tmp_path: Path
) -> None:
    """One listing shows whether an upload is in progress; that it holds still takes a second look a
    poll later, which the run's wait_for_version takes before anything is staged."""
    declaration = _declared(tmp_path, marker=None)
    source.land(OLDER, marker=False)
    source.land(NEWER, marker=False)
    source.put(f"cifar10/{NEWER}/labels.npz._COPYING_", b"hadoop fs -put in progress")

    newest = _choose(source, declaration)
    with pytest.raises(SpecError) as refused:
        _choose(source, declaration, NEWER)

    assert (newest.version, newest.wait_minutes) == (OLDER, 360), "wait_for_version looks again"
    uri = _uri(source, NEWER)
    assert f"has not landed in {uri}: upload in progress: {uri}labels.npz._COPYING_" in str(refused.value)


def test_a_manual_local_run_plans_the_second_look_and_a_landed_version_plans_no_wait(tmp_path: Path) -> None:
    """The whole plan, as configure makes it: wait_for_version waits only where a look is left."""
    store = tmp_path / "object-store" / "cifar10"
    for version, files in ((OLDER, ("train.npz", "_SUCCESS")), (NEWER, ("train.npz",))):
        (store / version).mkdir(parents=True)
        for name in files:
            (store / version / name).write_bytes(b"x")
    run = RunContext(datetime(2026, 11, 29, tzinfo=UTC), installation="tests")

    def plan(**version: Any) -> Any:
        return resolve_run(
            {"backend": "local"}, run, _declared(tmp_path, **version), LocalPaths(tmp_path), tmp_path
        )

    marked, unmarked = plan().dataset, plan(marker=None).dataset

    assert (marked.version, marked.wait_uri) == (OLDER, None)
    assert (unmarked.version, unmarked.wait_uri, unmarked.wait_marker) == (
        NEWER,
        f"file://{store}/{NEWER}/",
        None,
    )
    assert unmarked.wait_minutes == 360


def test_a_scheduled_run_that_may_not_wait_still_takes_only_a_landed_version(tmp_path: Path) -> None:
    """``wait_minutes: 0`` used to plan no look at all; now wait_for_version's first look decides."""
    from airflow.sdk.exceptions import AirflowSkipException

    from aliyun_training.sensors.dataset_version import DatasetVersionSensor

    folder = tmp_path / "object-store" / "cifar10" / "2026-11-29"
    folder.mkdir(parents=True)
    (folder / "train.npz").write_bytes(b"a shard, the upload going on")
    run = RunContext(datetime(2026, 11, 29, tzinfo=UTC), installation="tests", scheduled=True)
    declaration = _declared(tmp_path, wait_minutes=0)
    planned = resolve_run({"backend": "local"}, run, declaration, LocalPaths(tmp_path), tmp_path).dataset
    sensor = DatasetVersionSensor(task_id="wait_for_version", dataset=planned)

    with pytest.raises(AirflowSkipException) as skipped:
        sensor.execute({})  # no deferral: a TaskDeferred would fail this test
    (folder / "_SUCCESS").touch()
    sensor.execute({})

    assert (planned.wait_uri, planned.wait_minutes) == (f"file://{folder}/", 0)
    assert str(skipped.value).startswith(
        f"version 2026-11-29 of cifar10 did not land in file://{folder}/ within 0 minutes: its completion "
        f"marker file://{folder}/_SUCCESS never appeared; this run is skipped"
    )
