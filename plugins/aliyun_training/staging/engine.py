"""Copy one dataset version from an object store onto the training filesystem, verified and atomic.

Guarantees, because training jobs and backfills read these directories concurrently:

- a reader never sees half a version: files land in ``.<version>.partial/`` and the directory is
  published by one rename;
- every file is verified (size, sha256) and the manifest records path, size, sha256 and source ETag;
- an interrupted run resumes: files already copied into the partial directory with a matching
  size and journal entry are not copied again;
- re-staging an unchanged, verified version transfers nothing;
- two runs staging the same version at once serialize on a lock file;
- bad input (empty source, unsafe keys, no space, a source that changes mid-copy) fails before
  anything is published and never removes what was there.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from aliyun_training.publish import publish_directory
from aliyun_training.spec import DATASET_VERSION_PATTERN, SpecError, StagedDataset
from aliyun_training.staging.sources import ObjectSource, SourceObject, open_source

MANIFEST_NAME = "_manifest.json"
JOURNAL_NAME = "_journal.jsonl"
#: Free space required beyond the dataset itself, for filesystem overhead and concurrent writers.
SPACE_HEADROOM = 1.2
_CHUNK = 1024 * 1024

log = logging.getLogger(__name__)


class StagingError(RuntimeError):
    """Staging failed; nothing was published and the previously published version is untouched."""


@dataclass
class _Progress:
    """Logs files, bytes, MB/s and ETA at most every ``interval`` seconds."""

    total_files: int
    total_bytes: int
    interval: float
    files: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    last_report: float = field(default_factory=time.monotonic)

    def add(self, size: int) -> None:
        self.files += 1
        self.bytes += size
        now = time.monotonic()
        if now - self.last_report >= self.interval or self.files == self.total_files:
            self.last_report = now
            elapsed = max(now - self.started, 1e-6)
            rate = self.bytes / elapsed
            eta = (self.total_bytes - self.bytes) / rate if rate else 0.0
            log.info(
                "Staged %d/%d files, %.1f/%.1f MB, %.1f MB/s, ETA %.0f s",
                self.files,
                self.total_files,
                self.bytes / 1e6,
                self.total_bytes / 1e6,
                rate / 1e6,
                eta,
            )


def stage_dataset(
    source_uri: str,
    target_root: str | os.PathLike[str],
    version: str,
    *,
    workers: int = 8,
    progress_interval: float = 10.0,
) -> StagedDataset:
    """Publish ``source_uri`` as ``<target_root>/<version>/`` and return what was staged."""
    started = time.monotonic()
    if not re.match(DATASET_VERSION_PATTERN, version):
        raise SpecError(
            f"dataset_version: {version!r} is not a valid version name "
            "(fix: use letters, digits, '.', '_' or '-', starting with a letter or digit)"
        )
    source = open_source(source_uri)
    objects = _checked_listing(source)
    root = Path(target_root)
    _check_target(root)
    target = root / version
    with _version_lock(root, version):
        manifest = _verified_manifest(target, objects)
        transferred = 0
        if manifest is None:
            _check_space(root, objects)
            partial = root / f".{version}.partial"
            transferred, entries = _copy_all(source, objects, partial, workers, progress_interval)
            manifest = _write_manifest(partial, source_uri, version, entries)
            publish_directory(partial, target)
            log.info("Published %s (%d files, %d copied)", target, len(objects), transferred)
        else:
            log.info("Version %s is already staged at %s and verified: nothing to copy", version, target)
    return StagedDataset(
        uri=str(target),
        version=version,
        files=manifest["total_files"],
        bytes=manifest["total_bytes"],
        manifest_uri=str(target / MANIFEST_NAME),
        checksum=manifest["checksum"],
        transferred_files=transferred,
        seconds=round(time.monotonic() - started, 3),
    )


def _checked_listing(source: ObjectSource) -> list[SourceObject]:
    objects = source.list()
    if not objects:
        raise SpecError(f"source_uri: no objects under {source.uri} (fix: upload the dataset version first)")
    for obj in objects:
        parts = PurePosixPath(obj.key).parts
        if obj.key.startswith("/") or ".." in parts or not parts:
            raise SpecError(f"source_uri: object key {obj.key!r} would escape the target directory")
        if obj.key in (MANIFEST_NAME, JOURNAL_NAME):
            raise SpecError(f"source_uri: object key {obj.key!r} is reserved for the staging manifest")
    return objects


def _check_target(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StagingError(f"target {root} cannot be created ({exc}); is the filesystem mounted?") from None
    if not os.access(root, os.W_OK):
        raise StagingError(f"target {root} is not writable; check the mount and its permissions")


def _check_space(root: Path, objects: list[SourceObject]) -> None:
    needed = int(sum(o.size for o in objects) * SPACE_HEADROOM)
    free = shutil.disk_usage(root).free
    if free < needed:
        raise StagingError(
            f"not enough free space on {root}: {free / 1e6:.1f} MB free, {needed / 1e6:.1f} MB needed "
            f"(dataset x {SPACE_HEADROOM}); free space or stage to a larger filesystem"
        )


@contextlib.contextmanager
def _version_lock(root: Path, version: str) -> Iterator[None]:
    with (root / f".{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _verified_manifest(target: Path, objects: list[SourceObject]) -> dict[str, Any] | None:
    """The published manifest if it matches the source listing and every file verifies, else None."""
    try:
        manifest = json.loads((target / MANIFEST_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    listed = {(o.key, o.size, o.etag) for o in objects}
    recorded = {(f["path"], f["size"], f["etag"]) for f in manifest["files"]}
    if listed != recorded:
        log.info("Source of %s changed since it was staged: staging it again", target)
        return None
    for entry in manifest["files"]:
        path = target / entry["path"]
        if not path.is_file() or path.stat().st_size != entry["size"] or _sha256(path) != entry["sha256"]:
            log.warning("Staged file %s does not verify: staging the version again", path)
            return None
    return manifest


def _copy_all(
    source: ObjectSource, objects: list[SourceObject], partial: Path, workers: int, progress_interval: float
) -> tuple[int, list[dict[str, Any]]]:
    """Copy every object not already in the partial directory; return (copied count, manifest entries)."""
    partial.mkdir(parents=True, exist_ok=True)
    journal_path = partial / JOURNAL_NAME
    done = _read_journal(journal_path, partial, objects)
    todo = [o for o in objects if o.key not in done]
    if done:
        log.info("Resuming: %d of %d files were copied by an earlier run", len(done), len(objects))
    progress = _Progress(len(todo), sum(o.size for o in todo), progress_interval)
    with journal_path.open("a") as journal, ThreadPoolExecutor(max_workers=workers) as pool:
        for entry in pool.map(lambda obj: _copy_one(source, obj, partial), todo):
            journal.write(json.dumps(entry) + "\n")
            journal.flush()
            done[entry["path"]] = entry
            progress.add(entry["size"])
    journal_path.unlink()
    return len(todo), [done[o.key] for o in objects]


def _read_journal(
    journal_path: Path, partial: Path, objects: list[SourceObject]
) -> dict[str, dict[str, Any]]:
    """Entries of an interrupted run that still match the source and the file on disk."""
    if not journal_path.exists():
        return {}
    current = {o.key: o for o in objects}
    done = {}
    for line in journal_path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            entry = json.loads(line)
            obj = current.get(entry["path"])
            path = partial / entry["path"]
            if obj and obj.etag == entry["etag"] and path.is_file() and path.stat().st_size == obj.size:
                done[entry["path"]] = entry
    return done


def _copy_one(source: ObjectSource, obj: SourceObject, partial: Path) -> dict[str, Any]:
    dest = partial / obj.key
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    digest = hashlib.sha256()
    with source.open(obj.key) as src, tmp.open("wb") as out:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
    size = tmp.stat().st_size
    now = source.head(obj.key)
    if size != obj.size or now.etag != obj.etag:
        tmp.unlink()
        raise StagingError(
            f"source object {obj.key} changed during the copy (listed size {obj.size} ETag {obj.etag}, "
            f"now size {now.size} ETag {now.etag}, copied {size} bytes); nothing was published — "
            "retry once the dataset version is no longer being written"
        )
    os.replace(tmp, dest)
    return {"path": obj.key, "size": size, "sha256": digest.hexdigest(), "etag": obj.etag}


def _write_manifest(
    partial: Path, source_uri: str, version: str, entries: list[dict[str, Any]]
) -> dict[str, Any]:
    checksum = hashlib.sha256("".join(f"{e['path']}\0{e['sha256']}\n" for e in entries).encode()).hexdigest()
    manifest = {
        "source_uri": source_uri,
        "version": version,
        "files": entries,
        "total_files": len(entries),
        "total_bytes": sum(e["size"] for e in entries),
        "checksum": checksum,
        "staged_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (partial / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
    return manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
