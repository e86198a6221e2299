"""Publications that race each other, or a disk that fills up: what the user sees and what is left.

Real files, real threads and the real lock files (``publish.publication_lock``); only a full disk
is simulated, by making ``os.pwrite`` fail with ENOSPC for one file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import random
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from aliyun_training.artifacts.collect import publish_artifacts
from aliyun_training.artifacts.manifest import ArtifactError
from aliyun_training.stage_records import ArtifactSet, BuiltImage, JobResult, StagedDataset
from aliyun_training.staging import engine
from aliyun_training.staging.engine import JOURNAL_NAME, MANIFEST_NAME, StagingError, stage_dataset
from aliyun_training.staging.publish import partial_of
from aliyun_training.staging.sources import LocalObjectSource, SourceObject
from aliyun_training.validation import SpecError
from fakes.cloud import publisher_outputs

if TYPE_CHECKING:
    from collections.abc import Callable

TRIALS = 20
PUBLISHERS = 3
JOB_NAME = "train-cifar10-run-1a2b3c"
DATASET = StagedDataset(
    uri="/mnt/cpfs/cifar10/v1", version="v1", files=1, bytes=1, manifest_uri="", checksum="0" * 64
)
RUNTIME = BuiltImage(uri="local", digest="python:3.11.7", python="3.11.7")


def _bytes(seed: str, size: int) -> bytes:
    """``size`` bytes that differ for every ``seed``: each publisher's files are its own."""
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- artifact sets: one writer per target ------------------------------------------------------


def _publish(artifact_root: Path, output: Path) -> ArtifactSet:
    job = JobResult(
        backend="local",
        job_id=f"local-{output.name}",
        display_name=JOB_NAME,
        status="Succeeded",
        output_uri=str(output),
    )
    return publish_artifacts(
        model="cifar10", artifact_root=str(artifact_root), job=job, dataset=DATASET, runtime=RUNTIME
    )


def _published_files(target: Path) -> dict[str, bytes]:
    return {
        p.relative_to(target).as_posix(): p.read_bytes()
        for p in target.rglob("*")
        if p.is_file() and p.name not in ("manifest.json", "report.html")
    }


def _race(count: int, action: Callable[[int], object]) -> list[object]:
    """Run ``action(i)`` for ``count`` threads released at once; each result or raised exception."""
    barrier = threading.Barrier(count)
    outcomes: list[object] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = action(index)
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


@pytest.mark.parametrize("trial", range(TRIALS))
def test_concurrent_publishers_of_one_set_leave_one_complete_set_and_a_clear_error(tmp_path, trial):
    outputs = {}
    for publisher in range(PUBLISHERS):
        outputs[publisher] = publisher_outputs(
            tmp_path / f"output-{publisher}", f"trial-{trial}/publisher-{publisher}", (1, 2), 256 * 1024
        )
    artifact_root = tmp_path / "artifacts"
    target = artifact_root / "cifar10" / "v1" / JOB_NAME

    outcomes = _race(PUBLISHERS, lambda i: _publish(artifact_root, tmp_path / f"output-{i}"))

    published = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, ArtifactSet)]
    refused = [outcome for outcome in outcomes if not isinstance(outcome, ArtifactSet)]
    assert published, f"nobody published: {outcomes}"
    for error in refused:
        assert isinstance(error, ArtifactError), f"not the clear error: {error!r}"
        assert str(error).startswith(f"artifact_root: another publisher is writing {target} right now (")
        assert "(fix: two runs publish the same set" in str(error)
    files = _published_files(target)
    winners = [i for i in published if outputs[i] == files]
    assert len(winners) == 1, "every file of the set comes from one publisher, one that published"
    manifest = json.loads((target / "manifest.json").read_text())
    assert {entry["path"]: entry["sha256"] for entry in manifest["files"]} == {
        path: _sha256(data) for path, data in files.items()
    }
    assert sorted(p.name for p in target.parent.iterdir()) == [f".{JOB_NAME}.lock", JOB_NAME]
    again = _publish(artifact_root, tmp_path / "output-0")  # nothing left behind blocks the next run
    assert _published_files(Path(again.uri)) == outputs[0]


def test_a_publisher_finding_the_set_being_written_names_the_holder_and_writes_nothing(tmp_path):
    publisher_outputs(tmp_path / "first", "first", (1, 2), 256 * 1024)
    second = publisher_outputs(tmp_path / "second", "second", (1, 2), 256 * 1024)
    artifact_root = tmp_path / "artifacts"
    first = _publish(artifact_root, tmp_path / "first")
    target = Path(first.uri)
    before = _published_files(target)
    lock = target.with_name(f".{JOB_NAME}.lock")
    with lock.open("r+") as held:  # another publisher, as its lock file shows it
        fcntl.flock(held, fcntl.LOCK_EX)
        held.truncate()
        held.write("pid 4242 on airflow-worker-2 since 2026-11-08T10:00:00+00:00\n")
        held.flush()

        with pytest.raises(ArtifactError) as caught:
            _publish(artifact_root, tmp_path / "second")

    assert str(caught.value) == (
        f"artifact_root: another publisher is writing {target} right now ({lock} is held by pid 4242 on "
        "airflow-worker-2 since 2026-11-08T10:00:00+00:00); nothing was written by this run and that "
        "publisher's set is published whole (fix: two runs publish the same set — same model, dataset "
        "version and job name; let the other one finish, then run this one again if its set should "
        "replace that one)"
    )
    assert _published_files(target) == before
    assert not partial_of(target).exists()
    assert _published_files(Path(_publish(artifact_root, tmp_path / "second").uri)) == second


def test_the_lock_file_names_its_holder_and_its_airflow_task(tmp_path, monkeypatch):
    for name, value in {
        "DAG_ID": "retrain",
        "DAG_RUN_ID": "manual__1",
        "TASK_ID": "publish",
        "TRY_NUMBER": "2",
    }.items():
        monkeypatch.setenv(f"AIRFLOW_CTX_{name}", value)
    publisher_outputs(tmp_path / "output", "only", (1, 2), 256 * 1024)

    published = _publish(tmp_path / "artifacts", tmp_path / "output")

    written = Path(published.uri).with_name(f".{JOB_NAME}.lock").read_text()
    assert written.startswith(f"pid {os.getpid()} on ")
    assert "(Airflow task retrain/manual__1/publish, try 2) since " in written


def test_a_lock_file_hard_linked_to_another_file_is_refused_and_the_file_kept(tmp_path):
    publisher_outputs(tmp_path / "output", "only", (1, 2), 256 * 1024)
    config = tmp_path / "airflow.cfg"
    config.write_text("[core]\n")
    parent = tmp_path / "artifacts" / "cifar10" / "v1"
    parent.mkdir(parents=True)
    os.link(config, parent / f".{JOB_NAME}.lock")

    with pytest.raises(SpecError, match=r"is not a plain lock file .* \(fix: remove it\)"):
        _publish(tmp_path / "artifacts", tmp_path / "output")

    assert config.read_text() == "[core]\n"
    assert not (parent / JOB_NAME).exists()


# -- staging: a listing never replaces a more complete version ---------------------------------


class _Upload:
    """Objects appearing one by one under a source directory, each whole (written aside, renamed in),
    as PutObject makes them appear; the completion marker ``_SUCCESS`` last."""

    def __init__(self, source: Path, count: int, gap: float) -> None:
        self.source, self.count, self.gap = source, count, gap
        source.mkdir(parents=True)
        self.thread = threading.Thread(target=self._run)

    def start(self) -> None:
        """Put the first object, then the rest in the background: a stager never finds no version."""
        self._put_part(0)
        self.thread.start()

    def _run(self) -> None:
        for index in range(1, self.count):
            time.sleep(self.gap)
            self._put_part(index)
        self._put("_SUCCESS", b"")

    def _put_part(self, index: int) -> None:
        self._put(f"part-{index:02d}.bin", _bytes(f"{self.source}/{index}", 4096 + index))

    def _put(self, key: str, data: bytes) -> None:
        aside = self.source.parent / f".uploading-{key}"
        aside.write_bytes(data)
        os.replace(aside, self.source / key)


class _LaggingSource(LocalObjectSource):
    """A view of the bucket that lags behind the upload (another deployment's replica): its listing
    misses the newest objects. Only such a view can list fewer objects than a version staged before."""

    def list(self) -> list[SourceObject]:
        objects = super().list()
        return objects[: max(1, len(objects) - 3)]


def _watch_publications(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file count of each version published, in publication order (publications are serialized
    by the version lock, so the order is exact); publishing itself is the real one."""
    counts: list[int] = []
    real_publish = engine.publish_directory

    def publish(target: Path, manifest: str, field: str) -> None:
        counts.append(json.loads((partial_of(target) / manifest).read_text())["total_files"])
        real_publish(target, manifest, field)

    monkeypatch.setattr(engine, "publish_directory", publish)
    return counts


STALE = "the listing is older than the staged version"


@pytest.mark.parametrize("trial", range(TRIALS))
def test_stagers_racing_an_upload_never_publish_fewer_files_than_before(tmp_path, monkeypatch, trial):
    counts = _watch_publications(monkeypatch)
    upload = _Upload(tmp_path / "bucket" / "v1", count=10, gap=0.004)
    uri = upload.source.as_uri() + "/"
    root = tmp_path / "cpfs"
    starts = random.Random(trial).sample(range(0, 50, 5), PUBLISHERS + 1)

    def stage(index: int) -> object:
        time.sleep(starts[index] / 1000)
        source = _LaggingSource(uri) if index == PUBLISHERS else uri
        return stage_dataset(source, root, "v1", workers=2)

    upload.start()
    outcomes = _race(PUBLISHERS + 1, stage)
    upload.thread.join()
    final = stage_dataset(uri, root, "v1", workers=2)

    for outcome in outcomes:
        if not isinstance(outcome, StagedDataset):
            assert isinstance(outcome, StagingError) and STALE in str(outcome), f"unexpected: {outcome!r}"
    assert counts == sorted(counts), f"a version with fewer files replaced a fuller one: {counts}"
    assert final.files == 11 and counts[-1] == 11
    version = root / "v1"
    manifest = json.loads((version / MANIFEST_NAME).read_text())
    on_disk = {p.name: p.read_bytes() for p in version.iterdir() if p.name != MANIFEST_NAME}
    assert {e["path"]: (e["size"], e["sha256"]) for e in manifest["files"]} == {
        name: (len(data), _sha256(data)) for name, data in on_disk.items()
    }
    assert on_disk == {p.name: p.read_bytes() for p in upload.source.iterdir()}


def _source_tree(root: Path, count: int) -> str:
    root.mkdir(parents=True)
    for index in range(count):
        (root / f"part-{index:02d}.bin").write_bytes(_bytes(f"part-{index}", 1000))
    return root.as_uri() + "/"


def test_a_listing_that_lacks_staged_objects_is_refused_naming_the_version_and_both_counts(tmp_path):
    uri = _source_tree(tmp_path / "bucket" / "v1", 10)
    root = tmp_path / "cpfs"
    stage_dataset(uri, root, "v1")
    staged = json.loads((root / "v1" / MANIFEST_NAME).read_text())
    for index in range(5, 10):  # a stager's view mid-upload, or objects deleted since
        (tmp_path / "bucket" / "v1" / f"part-{index:02d}.bin").unlink()

    with pytest.raises(StagingError) as caught:
        stage_dataset(uri, root, "v1")

    assert str(caught.value) == (
        f"dataset_version: version v1 is staged at {root / 'v1'} with 10 files, but {uri} now lists 5, "
        "without 5 of the staged ones (part-05.bin, part-06.bin, part-07.bin, ...): the listing is older "
        "than the staged version — the version is still being uploaded, or objects were deleted from it; "
        "nothing was copied and the staged version is untouched (fix: wait until the upload has finished "
        "— its completion marker, dataset.version.marker (_SUCCESS by default), is written last — and run "
        "again; stage changed data as a new dataset_version; or, if the objects were deleted on purpose, "
        f"move {root / 'v1'} away so that the version is staged afresh)"
    )
    assert json.loads((root / "v1" / MANIFEST_NAME).read_text()) == staged
    assert len(list((root / "v1").glob("part-*"))) == 10
    assert not partial_of(root / "v1").exists()


def test_a_stager_waiting_for_the_lock_lists_only_once_it_holds_it(tmp_path):
    """The probe's race: a stager that arrives mid-upload while another holds the version lock must
    not apply the listing it would have taken then; it lists when its turn comes."""
    source = tmp_path / "bucket" / "v1"
    uri = _source_tree(source, 5)
    root = tmp_path / "cpfs"
    root.mkdir()
    result: list[StagedDataset] = []
    with (root / ".v1.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another stager is publishing v1
        waiting = threading.Thread(target=lambda: result.append(stage_dataset(uri, root, "v1")))
        waiting.start()
        time.sleep(0.2)
        for index in range(5, 10):
            (source / f"part-{index:02d}.bin").write_bytes(_bytes(f"part-{index}", 1000))
    waiting.join(timeout=30)

    assert result and result[0].files == 10
    assert len(list((root / "v1").glob("part-*"))) == 10


# -- a disk that fills up mid-copy -------------------------------------------------------------


SOURCE_FILES = {
    "labels.json": b'{"classes": ["cat", "dog"]}',
    "test.npz": bytes(range(256)) * 8,
    "train/shard-0.npz": b"shard zero " * 300,
    "train/shard-1.npz": b"shard one " * 500,
}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "bucket" / "v1"
    for key, data in SOURCE_FILES.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return root


def _disk_full_writing(monkeypatch: pytest.MonkeyPatch, name: str = "") -> None:
    """Writes into the file ``name`` (every file: "") fail as on a full disk; others go through."""
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(f"/{name}" if name else ""):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)


def _journaled(partial: Path) -> set[str]:
    return {json.loads(line)["path"] for line in (partial / JOURNAL_NAME).read_text().splitlines()}


def _fill_the_disk_while_staging(source: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> StagingError:
    with monkeypatch.context() as patch:
        _disk_full_writing(patch, ".shard-1.npz.part")  # the last object copied (one worker, key order)
        with pytest.raises(StagingError) as caught:
            stage_dataset(source.as_uri() + "/", root, "v1", workers=1)
    return caught.value


def test_a_full_disk_names_the_partial_directory_it_keeps_and_the_next_run_resumes(
    source, tmp_path, monkeypatch
):
    root = tmp_path / "cpfs"
    partial = root / ".v1.partial"

    error = _fill_the_disk_while_staging(source, root, monkeypatch)

    message = str(error)
    assert message.startswith(f"no space left on {root} while staging v1 (No space left on device; ")
    kept = {p.relative_to(partial).as_posix() for p in partial.rglob("*") if p.is_file()} - {JOURNAL_NAME}
    assert kept == {"labels.json", "test.npz", "train/shard-0.npz"}, "copied files kept, part file removed"
    size = sum(len(SOURCE_FILES[key]) for key in kept)
    assert (
        f"MB free now): {partial} is kept with the 3 files ({size / 1e6:.1f} MB) copied so far, and the "
        "next run resumes from it, copying only files not yet journaled; nothing published was changed "
        "(fix: free space on the filesystem and run again, or set staging.target_root to a larger "
        "filesystem)"
    ) in message
    assert not (root / "v1").exists()
    journaled = _journaled(partial)
    inodes = {key: (partial / key).stat().st_ino for key in journaled}

    staged = stage_dataset(source.as_uri() + "/", root, "v1", workers=1)

    assert staged.transferred_files == len(SOURCE_FILES) - len(journaled)
    assert {key: (root / "v1" / key).stat().st_ino for key in journaled} == inodes, "not copied again"
    assert {key: (root / "v1" / key).read_bytes() for key in SOURCE_FILES} == SOURCE_FILES
    assert not partial.exists()


def test_the_rerun_refused_for_space_names_the_partial_directory_and_its_size(source, tmp_path, monkeypatch):
    root = tmp_path / "cpfs"
    partial = root / ".v1.partial"
    _fill_the_disk_while_staging(source, root, monkeypatch)
    kept = sum(len(SOURCE_FILES[key]) for key in ("labels.json", "test.npz", "train/shard-0.npz"))
    _disk_full_writing(monkeypatch)  # the disk is still full: not even the lock file takes a byte
    monkeypatch.setattr(
        engine.shutil, "disk_usage", lambda path: SimpleNamespace(total=10**12, used=10**12 - 10, free=10)
    )

    with pytest.raises(StagingError) as caught:
        stage_dataset(source.as_uri() + "/", root, "v1", workers=1)

    message = str(caught.value)
    assert message.startswith(f"not enough free space on {root}: 0.0 MB free, ")
    assert (
        f"(data to copy x {engine.SPACE_HEADROOM}); {partial} holds 3 files ({kept / 1e6:.1f} MB) an earlier "
        f"run copied: the next run resumes from it and copies only files not yet journaled (delete {partial} "
        "to start over and free that space) (fix: free space or stage to a larger filesystem, set as "
        "staging.target_root)"
    ) in message
    assert {p.name for p in partial.rglob("*") if p.is_file()} >= {"labels.json", "test.npz"}


def test_a_full_disk_while_restaging_leaves_the_published_version_untouched(source, tmp_path, monkeypatch):
    root = tmp_path / "cpfs"
    first = stage_dataset(source.as_uri() + "/", root, "v1")
    (source / "train" / "shard-1.npz").write_bytes(b"a rewritten shard")

    error = _fill_the_disk_while_staging(source, root, monkeypatch)

    assert "nothing published was changed" in str(error)
    assert json.loads((root / "v1" / MANIFEST_NAME).read_text())["checksum"] == first.checksum
    assert {key: (root / "v1" / key).read_bytes() for key in SOURCE_FILES} == SOURCE_FILES
