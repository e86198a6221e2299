"""The staging engine: verified, resumable, atomic copies of a dataset version, and its CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from aliyun_training.stage_records import StagedDataset
from aliyun_training.staging import engine
from aliyun_training.staging.engine import JOURNAL_NAME, MANIFEST_NAME, StagingError, stage_dataset
from aliyun_training.staging.opening import open_source
from aliyun_training.staging.publish import publish_directory
from aliyun_training.staging.sources import LocalObjectSource
from aliyun_training.validation import SpecError

REPO_ROOT = Path(__file__).resolve().parents[2]

SOURCE_FILES = {
    "labels.json": b'{"classes": ["cat", "dog"]}',
    "test.npz": bytes(range(256)) * 8,
    "train/shard-0.npz": b"shard zero " * 300,
    "train/shard-1.npz": b"shard one " * 500,
    "train/extra/notes.txt": b"nested two levels deep\n",
}


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    for key, content in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "bucket" / "cifar10" / "v1"
    _write_tree(root, SOURCE_FILES)
    return root


@pytest.fixture
def target_root(tmp_path: Path) -> Path:
    return tmp_path / "cpfs" / "cifar10"


def _uri(path: Path) -> str:
    return path.as_uri() + "/"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _published_files(version_dir: Path) -> dict[str, bytes]:
    return {
        p.relative_to(version_dir).as_posix(): p.read_bytes()
        for p in version_dir.rglob("*")
        if p.is_file() and p.name != MANIFEST_NAME
    }


def _manifest(version_dir: Path) -> dict:
    return json.loads((version_dir / MANIFEST_NAME).read_text())


def _leftovers(root: Path) -> list[str]:
    """Hidden staging directories (partial or retired) left next to the published versions."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("."))


def test_stage_publishes_every_file_unchanged(source, target_root):
    staged = stage_dataset(_uri(source), target_root, "v1", workers=2)

    version_dir = target_root / "v1"
    assert staged.uri == str(version_dir)
    assert staged.version == "v1"
    assert staged.files == len(SOURCE_FILES)
    assert staged.bytes == sum(len(c) for c in SOURCE_FILES.values())
    assert staged.transferred_files == len(SOURCE_FILES)
    assert staged.manifest_uri == str(version_dir / MANIFEST_NAME)
    assert _published_files(version_dir) == SOURCE_FILES


def test_manifest_records_path_size_sha256_and_etag_per_file(source, target_root):
    staged = stage_dataset(_uri(source), target_root, "v1")

    manifest = _manifest(target_root / "v1")
    etags = {obj.key: obj.etag for obj in open_source(_uri(source)).list()}
    assert {entry["path"] for entry in manifest["files"]} == set(SOURCE_FILES)
    for entry in manifest["files"]:
        content = SOURCE_FILES[entry["path"]]
        assert entry["size"] == len(content)
        assert entry["sha256"] == _sha256(content)
        assert entry["etag"] == etags[entry["path"]]
    assert manifest["total_files"] == len(SOURCE_FILES)
    assert manifest["total_bytes"] == sum(len(c) for c in SOURCE_FILES.values())
    assert manifest["version"] == "v1"
    assert manifest["source_uri"] == _uri(source)
    assert manifest["checksum"] == staged.checksum
    assert len(staged.checksum) == 64


def test_stage_leaves_no_partial_directory_or_journal(source, target_root):
    stage_dataset(_uri(source), target_root, "v1")

    assert _leftovers(target_root) == []
    assert not (target_root / "v1" / JOURNAL_NAME).exists()


def test_same_content_gives_the_same_checksum_in_another_target(source, tmp_path):
    first = stage_dataset(_uri(source), tmp_path / "a", "v1")
    second = stage_dataset(_uri(source), tmp_path / "b", "v1")

    assert first.checksum == second.checksum


def test_restaging_an_unchanged_version_transfers_nothing(source, target_root):
    first = stage_dataset(_uri(source), target_root, "v1")
    inode = (target_root / "v1" / "labels.json").stat().st_ino

    again = stage_dataset(_uri(source), target_root, "v1")

    assert again.transferred_files == 0
    assert again.checksum == first.checksum
    assert again.files == first.files
    assert (target_root / "v1" / "labels.json").stat().st_ino == inode


def test_changed_source_file_is_staged_again(source, target_root):
    first = stage_dataset(_uri(source), target_root, "v1")
    rewritten = b"rewritten shard, a different length"
    (source / "train" / "shard-1.npz").write_bytes(rewritten)

    again = stage_dataset(_uri(source), target_root, "v1")

    assert again.transferred_files > 0
    assert again.checksum != first.checksum
    assert (target_root / "v1" / "train" / "shard-1.npz").read_bytes() == rewritten
    entry = next(e for e in _manifest(target_root / "v1")["files"] if e["path"] == "train/shard-1.npz")
    assert entry["sha256"] == _sha256(rewritten)
    assert _leftovers(target_root) == []


def test_new_source_file_is_staged_again(source, target_root):
    stage_dataset(_uri(source), target_root, "v1")
    (source / "train" / "shard-2.npz").write_bytes(b"late arrival")

    again = stage_dataset(_uri(source), target_root, "v1")

    assert again.files == len(SOURCE_FILES) + 1
    assert (target_root / "v1" / "train" / "shard-2.npz").read_bytes() == b"late arrival"


def test_corrupted_staged_file_is_detected_and_restaged(source, target_root):
    stage_dataset(_uri(source), target_root, "v1")
    staged_file = target_root / "v1" / "test.npz"
    corrupted = bytearray(staged_file.read_bytes())
    corrupted[100] ^= 0xFF
    staged_file.write_bytes(bytes(corrupted))

    again = stage_dataset(_uri(source), target_root, "v1")

    assert again.transferred_files > 0
    assert staged_file.read_bytes() == SOURCE_FILES["test.npz"]


def test_deleted_staged_file_is_restaged(source, target_root):
    stage_dataset(_uri(source), target_root, "v1")
    (target_root / "v1" / "train" / "extra" / "notes.txt").unlink()

    again = stage_dataset(_uri(source), target_root, "v1")

    assert again.transferred_files > 0
    assert _published_files(target_root / "v1") == SOURCE_FILES


def _interrupted_run(source: Path, target_root: Path, version: str, keys: list[str]) -> dict[str, int]:
    """Leave a partial directory as a run that copied ``keys`` and then died would; return their inodes."""
    partial = target_root / f".{version}.partial"
    objects = {obj.key: obj for obj in open_source(_uri(source)).list()}
    lines = []
    inodes = {}
    for key in keys:
        dest = partial / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(SOURCE_FILES[key])
        inodes[key] = dest.stat().st_ino
        entry = {"path": key, "size": objects[key].size, "sha256": _sha256(SOURCE_FILES[key])}
        lines.append(json.dumps({**entry, "etag": objects[key].etag}))
    (partial / JOURNAL_NAME).write_text("\n".join(lines) + "\n")
    return inodes


def test_interrupted_run_resumes_without_copying_finished_files(source, target_root):
    inodes = _interrupted_run(source, target_root, "v1", ["train/shard-0.npz"])

    staged = stage_dataset(_uri(source), target_root, "v1")

    assert staged.transferred_files == len(SOURCE_FILES) - 1
    assert (target_root / "v1" / "train" / "shard-0.npz").stat().st_ino == inodes["train/shard-0.npz"]
    assert _published_files(target_root / "v1") == SOURCE_FILES
    assert _leftovers(target_root) == []
    assert stage_dataset(_uri(source), target_root, "v1").transferred_files == 0


def test_resumed_manifest_matches_a_fresh_run(source, target_root, tmp_path):
    _interrupted_run(source, target_root, "v1", ["labels.json", "train/extra/notes.txt"])

    resumed = stage_dataset(_uri(source), target_root, "v1")
    fresh = stage_dataset(_uri(source), tmp_path / "fresh", "v1")

    assert resumed.transferred_files == len(SOURCE_FILES) - 2
    assert resumed.checksum == fresh.checksum
    assert _manifest(target_root / "v1")["files"] == _manifest(tmp_path / "fresh" / "v1")["files"]


def test_resume_ignores_a_journal_entry_for_a_source_that_changed_since(source, target_root):
    _interrupted_run(source, target_root, "v1", ["labels.json"])
    (source / "labels.json").write_bytes(b'{"classes": ["cat", "dog", "bird"]}')

    staged = stage_dataset(_uri(source), target_root, "v1")

    assert staged.transferred_files == len(SOURCE_FILES)
    assert (target_root / "v1" / "labels.json").read_bytes() == b'{"classes": ["cat", "dog", "bird"]}'


def test_resume_ignores_a_truncated_file_and_a_garbled_journal_line(source, target_root):
    _interrupted_run(source, target_root, "v1", ["test.npz"])
    partial = target_root / ".v1.partial"
    (partial / "test.npz").write_bytes(SOURCE_FILES["test.npz"][:10])
    with (partial / JOURNAL_NAME).open("a") as journal:
        journal.write('{"path": "labels.json", "si\n')

    staged = stage_dataset(_uri(source), target_root, "v1")

    assert staged.transferred_files == len(SOURCE_FILES)
    assert _published_files(target_root / "v1") == SOURCE_FILES


def test_empty_source_prefix_says_to_upload_first(tmp_path, target_root):
    empty = tmp_path / "bucket" / "empty"
    empty.mkdir(parents=True)

    with pytest.raises(SpecError) as excinfo:
        stage_dataset(_uri(empty), target_root, "v1")

    message = str(excinfo.value)
    assert message.startswith("source_uri:")
    assert "no objects under" in message
    assert "upload the dataset version first" in message
    assert not (target_root / "v1").exists()


def test_missing_source_names_source_uri(tmp_path, target_root):
    missing = tmp_path / "bucket" / "does-not-exist"

    with pytest.raises(SpecError) as excinfo:
        stage_dataset(_uri(missing), target_root, "v1")

    message = str(excinfo.value)
    assert message.startswith("source_uri:")
    assert "does not exist" in message
    assert "(fix: create the dataset version there" in message
    assert not (target_root / "v1").exists()


def test_unsupported_scheme_suggests_file_uris(target_root):
    with pytest.raises(SpecError) as excinfo:
        stage_dataset("s3://bucket/cifar10/v1/", target_root, "v1")

    assert "scheme 's3'" in str(excinfo.value)
    assert "use oss://bucket/prefix/ or file://" in str(excinfo.value)


def test_source_key_reserved_for_the_manifest_is_rejected(source, target_root):
    (source / MANIFEST_NAME).write_text("{}")

    with pytest.raises(SpecError) as excinfo:
        stage_dataset(_uri(source), target_root, "v1")

    assert "reserved for the staging manifest" in str(excinfo.value)
    assert not (target_root / "v1").exists()


@pytest.mark.parametrize("version", ["../x", ".hidden", "a/b", "", "v" * 65, "v1\n"])
def test_invalid_version_names_dataset_version(source, tmp_path, version):
    target_root = tmp_path / "cpfs" / "cifar10"

    with pytest.raises(SpecError) as excinfo:
        stage_dataset(_uri(source), target_root, version)

    message = str(excinfo.value)
    assert message.startswith("dataset_version:")
    assert "is not a valid version name" in message
    assert "use letters, digits" in message
    assert not (tmp_path / "cpfs").exists()


def _full_disk(monkeypatch: pytest.MonkeyPatch, free: int = 10) -> None:
    monkeypatch.setattr(
        engine.shutil, "disk_usage", lambda path: SimpleNamespace(total=10**12, used=10**12 - free, free=free)
    )


def test_not_enough_space_fails_before_copying(source, target_root, monkeypatch):
    _full_disk(monkeypatch)

    with pytest.raises(StagingError) as excinfo:
        stage_dataset(_uri(source), target_root, "v1")

    message = str(excinfo.value)
    assert f"not enough free space on {target_root}" in message
    assert "free space or stage to a larger filesystem" in message
    assert not (target_root / "v1").exists()
    assert _leftovers(target_root) == []


def test_not_enough_space_leaves_the_published_version_untouched(source, target_root, monkeypatch):
    first = stage_dataset(_uri(source), target_root, "v1")
    manifest_before = (target_root / "v1" / MANIFEST_NAME).read_text()
    (source / "labels.json").write_bytes(b"new labels that need restaging")
    _full_disk(monkeypatch)

    with pytest.raises(StagingError, match="not enough free space"):
        stage_dataset(_uri(source), target_root, "v1")

    assert (target_root / "v1" / MANIFEST_NAME).read_text() == manifest_before
    assert _published_files(target_root / "v1") == SOURCE_FILES
    assert _manifest(target_root / "v1")["checksum"] == first.checksum


def test_enough_space_with_headroom_passes(source, target_root, monkeypatch):
    total = sum(len(c) for c in SOURCE_FILES.values())
    _full_disk(monkeypatch, free=int(total * engine.SPACE_HEADROOM) + 1)

    staged = stage_dataset(_uri(source), target_root, "v1")

    assert staged.files == len(SOURCE_FILES)


def _source_rewritten_during_copy(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """The object ``key`` grows while it is being read, as when an uploader is still writing it."""
    original_open = LocalObjectSource.open

    def open_and_rewrite(self, opened_key):
        stream = original_open(self, opened_key)
        if opened_key == key:
            with (self.root / key).open("ab") as writer:
                writer.write(b" appended by a concurrent writer")
        return stream

    monkeypatch.setattr(LocalObjectSource, "open", open_and_rewrite)


def test_source_changing_during_copy_fails_and_publishes_nothing(source, target_root, monkeypatch):
    _source_rewritten_during_copy(monkeypatch, "train/shard-1.npz")

    with pytest.raises(StagingError) as excinfo:
        stage_dataset(_uri(source), target_root, "v1")

    message = str(excinfo.value)
    assert "source object train/shard-1.npz changed during the copy" in message
    assert "nothing was published" in message
    assert "retry once the dataset version is no longer being written" in message
    assert not (target_root / "v1").exists()


def test_source_changing_during_copy_keeps_the_earlier_version(source, target_root, monkeypatch):
    first = stage_dataset(_uri(source), target_root, "v1")
    (source / "test.npz").write_bytes(b"a new test split")
    _source_rewritten_during_copy(monkeypatch, "test.npz")

    with pytest.raises(StagingError, match="changed during the copy"):
        stage_dataset(_uri(source), target_root, "v1")

    assert _published_files(target_root / "v1") == SOURCE_FILES
    assert _manifest(target_root / "v1")["checksum"] == first.checksum


def test_changed_etag_during_copy_is_detected(source, target_root, monkeypatch):
    original_head = LocalObjectSource.head
    monkeypatch.setattr(
        LocalObjectSource,
        "head",
        lambda self, key: dataclasses.replace(original_head(self, key), etag="overwritten-etag"),
    )

    with pytest.raises(StagingError) as excinfo:
        stage_dataset(_uri(source), target_root, "v1")

    assert "ETag overwritten-etag" in str(excinfo.value)
    assert not (target_root / "v1").exists()


def test_retry_after_a_failed_copy_publishes_the_version(source, target_root, monkeypatch):
    _source_rewritten_during_copy(monkeypatch, "labels.json")
    with pytest.raises(StagingError):
        stage_dataset(_uri(source), target_root, "v1")
    monkeypatch.undo()

    staged = stage_dataset(_uri(source), target_root, "v1")

    expected = {**SOURCE_FILES, "labels.json": (source / "labels.json").read_bytes()}
    assert staged.files == len(SOURCE_FILES)
    assert _published_files(target_root / "v1") == expected
    assert _leftovers(target_root) == []


def test_target_that_cannot_be_created_is_reported(source, tmp_path):
    blocker = tmp_path / "not-a-mount"
    blocker.write_text("a regular file where the mount point should be")
    target_root = blocker / "cifar10"

    with pytest.raises(StagingError) as excinfo:
        stage_dataset(_uri(source), target_root, "v1")

    message = str(excinfo.value)
    assert f"target {target_root} cannot be created" in message
    assert "is the filesystem mounted?" in message


def test_concurrent_staging_of_one_version_publishes_it_once(source, target_root):
    barrier = threading.Barrier(2)

    def stage() -> StagedDataset:
        barrier.wait()
        return stage_dataset(_uri(source), target_root, "v1", workers=2)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: stage(), range(2)))

    assert sorted(r.transferred_files for r in results) == [0, len(SOURCE_FILES)]
    assert results[0].checksum == results[1].checksum
    assert _published_files(target_root / "v1") == SOURCE_FILES
    assert _manifest(target_root / "v1")["checksum"] == results[0].checksum
    assert _leftovers(target_root) == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "plugins")}
    return subprocess.run(
        [sys.executable, "-m", "aliyun_training.staging", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_cli_prints_the_staged_dataset_as_json(source, target_root):
    result = _cli("--source", _uri(source), "--target", str(target_root), "--version", "v1", "--workers", "2")

    assert result.returncode == 0, result.stderr
    staged = StagedDataset.model_validate(json.loads(result.stdout))
    assert staged.uri == str(target_root / "v1")
    assert staged.files == len(SOURCE_FILES)
    assert staged.transferred_files == len(SOURCE_FILES)
    assert _published_files(target_root / "v1") == SOURCE_FILES


@pytest.mark.slow
def test_cli_exits_2_on_bad_input(source, target_root):
    result = _cli("--source", _uri(source), "--target", str(target_root), "--version", "../x")

    assert result.returncode == 2
    assert "error: dataset_version:" in result.stderr
    assert result.stdout == ""


@pytest.mark.slow
def test_cli_exits_1_when_staging_fails(source, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")

    result = _cli("--source", _uri(source), "--target", str(blocker / "cifar10"), "--version", "v1")

    assert result.returncode == 1
    assert "error: target" in result.stderr
    assert "cannot be created" in result.stderr


def _publication(directory: Path, data: bytes) -> Path:
    """A directory as a publication leaves it: its data and the manifest that marks it as published."""
    directory.mkdir()
    (directory / "data.bin").write_bytes(data)
    (directory / MANIFEST_NAME).write_text("{}")
    return directory


def test_publish_directory_moves_partial_into_place(tmp_path):
    partial = _publication(tmp_path / ".v1.partial", b"new")

    publish_directory(tmp_path / "v1", MANIFEST_NAME, "dataset_version")

    assert (tmp_path / "v1" / "data.bin").read_bytes() == b"new"
    assert not partial.exists()


def test_publish_directory_replaces_an_existing_target_and_leaves_no_retired_dirs(tmp_path):
    target = _publication(tmp_path / "v1", b"old")
    (target / "old-only.bin").write_bytes(b"old")
    _publication(tmp_path / ".v1.partial", b"new")

    publish_directory(target, MANIFEST_NAME, "dataset_version")

    assert sorted(p.name for p in target.iterdir()) == [MANIFEST_NAME, "data.bin"]
    assert (target / "data.bin").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1"]


def test_publish_directory_swaps_without_a_moment_with_no_version(tmp_path, monkeypatch):
    """With RENAME_EXCHANGE the old version is swapped out in one step: no rename to a retired name."""
    target = _publication(tmp_path / "v1", b"old")
    partial = _publication(tmp_path / ".v1.partial", b"new")
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append((a, b)), real_replace(a, b))[1])

    publish_directory(target, MANIFEST_NAME, "dataset_version")

    assert (target / "data.bin").read_bytes() == b"new" and not partial.exists()
    assert renames == [], "the swap is one renameat2 call, not two renames"


def test_a_version_renamed_aside_by_a_killed_publication_is_restored(tmp_path):
    _publication(tmp_path / ".v1.retired-0badc0de", b"published before the crash")
    _publication(tmp_path / ".v1.partial", b"new")

    publish_directory(tmp_path / "v1", MANIFEST_NAME, "dataset_version")

    assert (tmp_path / "v1" / "data.bin").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1"]
