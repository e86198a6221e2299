"""Copy one dataset version from an object store onto the training filesystem, verified and atomic.

Guarantees, because training jobs and backfills read these directories concurrently:

- a reader never sees half a version: files land in ``.<version>.partial/`` and the directory is
  published by one rename;
- every file is verified: its size, and the CRC64 OSS reports for the object (combined over the
  parallel byte ranges of a large object), else a sha256; a corrupted transfer is fetched again;
- the manifest beside the data records key, size, checksum and source ETag per file;
- an interrupted run resumes: files already in the partial directory with a journal entry for
  the same ETag are not copied again;
- re-staging an unchanged version transfers nothing (listing, manifest and file stats compared);
  re-staging a changed one copies only the objects whose ETag changed and hard-links the rest;
- two runs staging the same version at once serialize on a lock file (``publish.publication_lock``),
  and each lists the source only once it holds the lock, so a listing never predates the version
  the previous holder published;
- a listing that lacks objects the published version has (a version still being uploaded, or
  objects deleted) is refused: it never replaces a more complete version;
- bad input (empty source, unsafe keys, no space, a source that changes mid-copy) fails before
  anything is published and never removes what was there;
- a disk that fills up mid-copy keeps the partial directory with the files copied so far (the next
  run resumes from it) and says so, as does the next run's free-space check while it is there;
- only a version directory staging published (it holds ``_manifest.json``) is ever replaced: a
  target that exists without one, or a link at the target, its partial directory or its lock, is
  refused before anything is copied (see ``publish.py``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import stat
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.stage_records import StagedDataset
from aliyun_training.staging.opening import open_source
from aliyun_training.staging.publish import (
    check_publishable,
    partial_of,
    publication_lock,
    publish_directory,
    restore_retired,
)
from aliyun_training.staging.sources import (
    ObjectSource,
    SourceObject,
    StagingError,
    with_retries,
)
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["JOURNAL_NAME", "MANIFEST_NAME", "StagingError", "stage_dataset"]

MANIFEST_NAME = "_manifest.json"
#: The setting a refused target is reported under: the version names the directory under the root.
TARGET_FIELD = "dataset_version"
JOURNAL_NAME = "_journal.jsonl"
JOURNAL_FLUSH_SECONDS = 0.5
#: Free space required beyond the data still to copy, for filesystem overhead and concurrent writers.
SPACE_HEADROOM = 1.2
#: Objects at least this large are read in parallel byte ranges of PART_SIZE (remote stores only).
MULTIPART_THRESHOLD = 32 * 1024 * 1024
PART_SIZE = 8 * 1024 * 1024
#: Tries per read (transient errors) and per object (a checksum that does not match).
READ_ATTEMPTS = 5
VERIFY_ATTEMPTS = 3
_CHUNK = 1024 * 1024

log = logging.getLogger(__name__)


@dataclass
class _Progress:
    """Logs files, bytes, MB/s and ETA at most every ``interval`` seconds (thread-safe)."""

    total_files: int
    total_bytes: int
    interval: float
    files: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    last_report: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, size: int = 0, files: int = 0) -> None:
        with self.lock:
            self.files += files
            self.bytes += size
            now = time.monotonic()
            if now - self.last_report < self.interval and self.files < self.total_files:
                return
            self.last_report = now
        elapsed = max(now - self.started, 1e-6)
        rate = self.bytes / elapsed
        eta = (self.total_bytes - self.bytes) / rate if rate else 0.0
        log.info(
            "Staged %d/%d files, %.1f/%.1f MB, %.1f MB/s, %.0f files/s, ETA %.0f s",
            self.files,
            self.total_files,
            self.bytes / 1e6,
            self.total_bytes / 1e6,
            rate / 1e6,
            self.files / elapsed,
            eta,
        )


def stage_dataset(
    source: str | ObjectSource,
    target_root: str | os.PathLike[str],
    version: str,
    *,
    workers: int = 16,
    progress_interval: float = 10.0,
) -> StagedDataset:
    """Publish ``source`` as ``<target_root>/<version>/`` and return what was staged.

    ``source`` is an opened object source (an OSS one carries its client settings) or a
    ``file://`` URI.
    """
    started = time.monotonic()
    # fullmatch: with re.match the pattern's "$" would also accept "v1\n" (a newline in a path).
    if not re.fullmatch(DATASET_VERSION_PATTERN, version):
        raise SpecError(
            f"dataset_version: {version!r} is not a valid version name "
            "(fix: use letters, digits, '.', '_' or '-', starting with a letter or digit)"
        )
    if isinstance(source, str):
        source = open_source(source)
    root = Path(target_root)
    target = root / version
    check_publishable(target, MANIFEST_NAME, TARGET_FIELD)
    _check_target(root)
    with publication_lock(target, TARGET_FIELD, wait=True):
        restore_retired(target, MANIFEST_NAME)  # a publication killed between its two renames (NFS)
        published = _read_manifest(target)
        # Listed only now: a listing taken while another stager held the lock may predate (lack
        # objects of) the version that stager published.
        objects = _checked_listing(source)
        _refuse_older_listing(published, objects, source.uri, target)
        transferred: tuple[int, int] = (0, 0)
        manifest = published if published and _unchanged(published, target, objects) else None
        if manifest is None:
            transferred, manifest = _stage(source, objects, published, target, workers, progress_interval)
            publish_directory(target, MANIFEST_NAME, TARGET_FIELD)
            log.info("Published %s (%d files, %d copied)", target, len(objects), transferred[0])
        else:
            log.info("Version %s is already staged at %s and unchanged: nothing to copy", version, target)
    return StagedDataset(
        uri=str(target),
        version=version,
        files=manifest["total_files"],
        bytes=manifest["total_bytes"],
        manifest_uri=str(target / MANIFEST_NAME),
        checksum=manifest["checksum"],
        transferred_files=transferred[0],
        transferred_bytes=transferred[1],
        seconds=round(time.monotonic() - started, 3),
        source_uri=source.uri,
    )


def _checked_listing(source: ObjectSource) -> list[SourceObject]:
    objects = source.list()
    if not objects:
        raise SpecError(f"source_uri: no objects under {source.uri} (fix: upload the dataset version first)")
    keys = {obj.key for obj in objects}
    for obj in objects:
        parts = obj.key.split("/")
        if obj.key.startswith("/") or "" in parts or "." in parts or ".." in parts:
            raise SpecError(
                f"source_uri: object key {obj.key!r} would escape the target directory or alias another "
                "(fix: rename the object; keys must be relative paths without '.', '..' or '//')"
            )
        if obj.key in (MANIFEST_NAME, JOURNAL_NAME):
            raise SpecError(f"source_uri: object key {obj.key!r} is reserved for the staging manifest")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in keys:
                raise SpecError(
                    f"source_uri: object {'/'.join(parts[:depth])!r} is also a folder of {obj.key!r}; a "
                    "filesystem cannot hold both (fix: rename one of them)"
                )
    return objects


def _check_target(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StagingError(f"target {root} cannot be created ({exc}); is the filesystem mounted?") from None
    if not os.access(root, os.W_OK):
        raise StagingError(f"target {root} is not writable; check the mount and its permissions")


def _refuse_older_listing(
    published: dict[str, Any] | None, objects: list[SourceObject], source_uri: str, target: Path
) -> None:
    """Refuse a listing that lacks objects of the published version: it is older than that version.

    A version listed while it was still being uploaded (or after objects were deleted) would
    replace a more complete one with fewer files. Objects whose ETag changed are not refused: they
    are copied again, as a rewritten object always was.
    """
    if not published:
        return
    listed = {o.key for o in objects}
    missing = [entry["path"] for entry in published["files"] if entry["path"] not in listed]
    if not missing:
        return
    examples = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    raise StagingError(
        f"dataset_version: version {target.name} is staged at {target} with {len(published['files'])} "
        f"files, but {source_uri} now lists {len(objects)}, without {len(missing)} of the staged ones "
        f"({examples}): the listing is older than the staged version — the version is still being "
        "uploaded, or objects were deleted from it; nothing was copied and the staged version is "
        "untouched (fix: wait until the upload has finished — its completion marker, "
        "dataset.version.marker (_SUCCESS by default), is written last — and run again; stage changed "
        f"data as a new dataset_version; or, if the objects were deleted on purpose, move {target} away "
        "so that the version is staged afresh)"
    )


def _check_space(root: Path, todo: list[SourceObject], partial: Path) -> None:
    needed = int(sum(o.size for o in todo) * SPACE_HEADROOM)
    free = shutil.disk_usage(root).free
    if free < needed:
        raise StagingError(
            f"not enough free space on {root}: {free / 1e6:.1f} MB free, {needed / 1e6:.1f} MB needed "
            f"(data to copy x {SPACE_HEADROOM}){_leftover(partial)} (fix: free space or stage to a larger "
            "filesystem, set as staging.target_root)"
        )


def _leftover(partial: Path) -> str:
    """What an earlier run left in the partial directory, for a free-space error ('' when nothing)."""
    files, size = _usage(partial)
    if not files:
        return ""
    return (
        f"; {partial} holds {files} files ({size / 1e6:.1f} MB) an earlier run copied: the next run "
        f"resumes from it and copies only files not yet journaled (delete {partial} to start over and "
        "free that space)"
    )


def _usage(directory: Path) -> tuple[int, int]:
    """Regular files (not following links) under ``directory`` and their total size; (0, 0) if absent."""
    files = size = 0
    for dirpath, _, names in os.walk(directory):
        for name in names:
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(info.st_mode):
                    files += name != JOURNAL_NAME
                    size += info.st_size
    return files, size


def _read_manifest(target: Path) -> dict[str, Any] | None:
    try:
        return json.loads((target / MANIFEST_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _unchanged(manifest: dict[str, Any], target: Path, objects: list[SourceObject]) -> bool:
    """Whether the published version matches the source listing and its files were not touched.

    Files are compared by size and modification time as the manifest recorded them, not re-hashed:
    a re-run of a staged version must cost a listing, not a read of the whole dataset.
    """
    listed = {(o.key, o.size, o.etag) for o in objects}
    recorded = {(f["path"], f["size"], f["etag"]) for f in manifest["files"]}
    if listed != recorded:
        log.info("Source of %s changed since it was staged: staging the changed objects", target)
        return False
    untouched = [path for path in manifest["files"] if _stat_matches(target, path, manifest.get("stat", {}))]
    if len(untouched) != len(manifest["files"]):
        log.warning("Staged files of %s were modified or removed: staging them again", target)
        return False
    return True


def _stat_matches(directory: Path, entry: dict[str, Any], stats: dict[str, int]) -> bool:
    try:
        stat = (directory / entry["path"]).stat()
    except OSError:
        return False
    return stat.st_size == entry["size"] and stat.st_mtime_ns == stats.get(entry["path"])


def _stage(
    source: ObjectSource,
    objects: list[SourceObject],
    published: dict[str, Any] | None,
    target: Path,
    workers: int,
    progress_interval: float,
) -> tuple[tuple[int, int], dict[str, Any]]:
    """Fill the partial directory and write its manifest; return ((files, bytes) copied, manifest).

    A full disk (or quota) is reported, not raised as a bare OSError: what was copied stays in the
    partial directory for the next run, and incomplete part files are removed to free their space.
    """
    partial = partial_of(target)
    try:
        transferred, entries = _copy_all(
            source, objects, partial, published, target, workers, progress_interval
        )
        manifest = _write_manifest(partial, source.uri, target.name, entries)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        _prune(partial, {o.key for o in objects})
        raise _out_of_space(target, partial, exc) from None
    (partial / JOURNAL_NAME).unlink()  # only now: a run that fails before resumes from it
    return transferred, manifest


def _out_of_space(target: Path, partial: Path, exc: OSError) -> StagingError:
    files, size = _usage(partial)
    free = shutil.disk_usage(target.parent).free
    return StagingError(
        f"no space left on {target.parent} while staging {target.name} ({exc.strerror}; "
        f"{free / 1e6:.1f} MB free now): {partial} is kept with the {files} files ({size / 1e6:.1f} MB) "
        "copied so far, and the next run resumes from it, copying only files not yet journaled; "
        "nothing published was changed (fix: free space on the filesystem and run again, or set "
        "staging.target_root to a larger filesystem)"
    )


def _copy_all(
    source: ObjectSource,
    objects: list[SourceObject],
    partial: Path,
    published: dict[str, Any] | None,
    target: Path,
    workers: int,
    progress_interval: float,
) -> tuple[tuple[int, int], list[dict[str, Any]]]:
    """Copy every object not already in the partial directory; return ((files, bytes) copied, entries)."""
    journal_path = partial / JOURNAL_NAME
    done = _read_journal(journal_path, partial, objects)
    if done:
        log.info("Resuming: %d of %d files were copied by an earlier run", len(done), len(objects))
    linkable = _unchanged_files(published, target, objects, done)
    todo = [o for o in objects if o.key not in done and o.key not in linkable]
    _check_space(partial.parent, todo, partial)
    partial.mkdir(parents=True, exist_ok=True)
    with journal_path.open("a") as journal:
        for key, entry in linkable.items():
            _link(target / key, partial / key)
            journal.write(json.dumps(entry) + "\n")
            done[key] = entry
        journal.flush()
        progress = _Progress(len(todo), sum(o.size for o in todo), progress_interval)
        flushed = time.monotonic()
        for entry in _transfer(source, todo, partial, workers, progress):
            journal.write(json.dumps(entry) + "\n")
            done[entry["path"]] = entry
            if time.monotonic() - flushed >= JOURNAL_FLUSH_SECONDS:
                # A killed run loses at most this long of journal: those files are copied again.
                journal.flush()
                flushed = time.monotonic()
    _prune(partial, {o.key for o in objects})
    return (len(todo), sum(o.size for o in todo)), [done[o.key] for o in objects]


def _prune(partial: Path, keys: set[str]) -> None:
    """Remove what an earlier run left that this listing does not have (deleted objects, part files)."""
    for path in sorted(partial.rglob("*"), reverse=True):
        relative = path.relative_to(partial).as_posix()
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
        elif relative not in keys and relative != JOURNAL_NAME:
            log.info("Removing %s: not part of this version", relative)
            path.unlink()


def _read_journal(
    journal_path: Path, partial: Path, objects: list[SourceObject]
) -> dict[str, dict[str, Any]]:
    """Entries of an interrupted run that still match the source and the file on disk."""
    if not journal_path.exists():
        return {}
    current = {o.key: o for o in objects}
    done = {}
    for line in journal_path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
            entry = json.loads(line)
            obj = current.get(entry["path"])
            path = partial / entry["path"]
            if obj and obj.etag == entry["etag"] and path.is_file() and path.stat().st_size == obj.size:
                done[entry["path"]] = entry
    return done


def _unchanged_files(
    published: dict[str, Any] | None,
    target: Path,
    objects: list[SourceObject],
    done: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Manifest entries of published files whose object did not change: they are linked, not copied."""
    if not published:
        return {}
    previous = {e["path"]: e for e in published["files"]}
    stats = published.get("stat", {})
    unchanged = {}
    for obj in objects:
        entry = previous.get(obj.key)
        if obj.key in done or not entry or (entry["size"], entry["etag"]) != (obj.size, obj.etag):
            continue
        if _stat_matches(target, entry, stats):
            unchanged[obj.key] = entry
    if unchanged:
        log.info(
            "%d of %d files are unchanged since the last staging: linking them", len(unchanged), len(objects)
        )
    return unchanged


def _link(existing: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    os.link(existing, dest)


@dataclass
class _ObjectCopy:
    """One object being written into ``<partial>/.<name>.part`` by one or more range reads."""

    obj: SourceObject
    dest: Path
    ranges: list[tuple[int, int]]
    crcs: list[int | None] = field(default_factory=list)
    digest: Any = None
    reported_crc: str | None = None
    remaining: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Directories this run already created, shared by all its copies.
    made_dirs: set[Path] = field(default_factory=set)

    @property
    def tmp(self) -> Path:
        return self.dest.with_name(f".{self.dest.name}.part")


def _transfer(
    source: ObjectSource, todo: list[SourceObject], partial: Path, workers: int, progress: _Progress
) -> Iterator[dict[str, Any]]:
    """Copy ``todo`` with a bounded pool, large objects as parallel ranges; yield finished entries.

    At most a few reads per worker are queued at a time, so waiting costs the same for 5 objects
    or 5 million. The first hard failure stops queueing and propagates once running reads end;
    files finished before it stay journaled for the next run.
    """
    work = _range_reads(source, todo, partial)
    window = max(1, workers) * 4
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="stage")
    pending: set[Future[dict[str, Any] | None]] = set()
    try:
        while True:
            for copy, index in itertools.islice(work, window - len(pending)):
                pending.add(pool.submit(_copy_range, source, copy, index, progress))
            if not pending:
                return
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                entry = future.result()
                if entry is not None:
                    progress.add(files=1)
                    yield entry
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _range_reads(
    source: ObjectSource, todo: list[SourceObject], partial: Path
) -> Iterator[tuple[_ObjectCopy, int]]:
    """(object copy, range index) for every range to read, planning each object when it is reached."""
    made_dirs: set[Path] = set()
    for obj in todo:
        copy = _plan(source, obj, partial, made_dirs)
        for index in range(len(copy.ranges)):
            yield copy, index


def _plan(source: ObjectSource, obj: SourceObject, partial: Path, made_dirs: set[Path]) -> _ObjectCopy:
    """Split an object into ranges; no file is touched here (creating files is the workers' job)."""
    if source.ranged_reads and obj.size >= MULTIPART_THRESHOLD:
        ranges = [(start, min(start + PART_SIZE, obj.size)) for start in range(0, obj.size, PART_SIZE)]
    else:
        ranges = [(0, obj.size)]
    return _ObjectCopy(
        obj, partial / obj.key, ranges, crcs=[None] * len(ranges), remaining=len(ranges), made_dirs=made_dirs
    )


def _copy_range(
    source: ObjectSource, copy: _ObjectCopy, index: int, progress: _Progress
) -> dict[str, Any] | None:
    """Write one range of an object; the thread writing the last range verifies and finishes it."""
    start, end = copy.ranges[index]
    crc, reported = _read_into(source, copy, start, end, progress)
    with copy.lock:
        copy.crcs[index] = crc
        copy.reported_crc = copy.reported_crc or reported
        copy.remaining -= 1
        if copy.remaining:
            return None
    return _finish(source, copy, progress)


def _read_into(
    source: ObjectSource, copy: _ObjectCopy, start: int, end: int, progress: _Progress
) -> tuple[int | None, str | None]:
    """Read ``[start, end)`` into the part file at its offset; return (CRC64 of the range, store's CRC64)."""

    def attempt() -> tuple[int | None, str | None]:
        crc = _Crc64() if source.checksum == "crc64" else None
        offset = start
        if copy.dest.parent not in copy.made_dirs:  # most objects share a few directories
            copy.dest.parent.mkdir(parents=True, exist_ok=True)
            copy.made_dirs.add(copy.dest.parent)
        # Only a single-range object may truncate: other ranges share the file.
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if len(copy.ranges) == 1 else 0)
        fd = os.open(copy.tmp, flags, 0o644)
        try:

            def sink(chunk: bytes) -> None:
                nonlocal offset
                os.pwrite(fd, chunk, offset)
                offset += len(chunk)
                if crc is not None:
                    crc.update(chunk)

            reported = source.read(copy.obj, start, end, sink)
        finally:
            os.close(fd)
        return (crc.crc if crc is not None else None), reported

    result = with_retries(attempt, source.is_transient, READ_ATTEMPTS)
    progress.add(size=end - start)
    return result


def _finish(source: ObjectSource, copy: _ObjectCopy, progress: _Progress) -> dict[str, Any]:
    """Verify the assembled object (fetching it again if it is corrupt), then move it into place."""
    obj = copy.obj
    for attempt in range(1, VERIFY_ATTEMPTS + 1):
        if len(copy.ranges) > 1:
            os.truncate(copy.tmp, obj.size)  # a part file left by a killed run may be longer
        checksum = _checksum(source, copy)
        if checksum is not None:
            break
        if attempt == VERIFY_ATTEMPTS:
            copy.tmp.unlink(missing_ok=True)
            raise StagingError(
                f"source object {obj.key} arrived corrupted {VERIFY_ATTEMPTS} times (CRC64 mismatch); "
                "nothing was published — check the network path to the object store and retry"
            )
        log.warning(
            "Object %s failed CRC64 verification (attempt %d/%d): fetching it again",
            obj.key,
            attempt,
            VERIFY_ATTEMPTS,
        )
        copy.ranges, copy.crcs, copy.reported_crc = [(0, obj.size)], [None], None
        copy.crcs[0], copy.reported_crc = _read_into(source, copy, 0, obj.size, progress)
    os.replace(copy.tmp, copy.dest)
    return {"path": obj.key, "size": obj.size, **(checksum or {}), "etag": obj.etag}


def _checksum(source: ObjectSource, copy: _ObjectCopy) -> dict[str, str] | None:
    """The verified checksum entry of an assembled object, or None when it does not match the store's."""
    if source.checksum == "crc64" and copy.reported_crc is not None:
        combined = _combine_crc64(copy.crcs, copy.ranges)
        return {"crc64": str(combined)} if str(combined) == copy.reported_crc else None
    if copy.tmp.stat().st_size != copy.obj.size:
        return None
    return {"sha256": _sha256(copy.tmp)}


class _Crc64:
    """CRC-64/XZ, the ECMA-182 CRC64 OSS reports as ``x-oss-hash-crc64ecma``, updated chunk by chunk."""

    def __init__(self) -> None:
        self.crc = 0

    def update(self, chunk: bytes) -> None:
        self.crc = _crc64_model().calc(chunk, self.crc)


@functools.cache
def _crc64_model() -> Any:
    import anycrc

    return anycrc.Model("CRC64-XZ")


def _combine_crc64(crcs: list[int | None], ranges: list[tuple[int, int]]) -> int:
    """The whole object's CRC64 from its ranges' CRC64s, in order."""
    model = _crc64_model()
    combined = 0
    for crc, (start, end) in zip(crcs, ranges, strict=True):
        combined = model.combine(combined, crc or 0, end - start) if start else crc or 0
    return combined


def _write_manifest(
    partial: Path, source_uri: str, version: str, entries: list[dict[str, Any]]
) -> dict[str, Any]:
    def digest(entry: dict[str, Any]) -> str:
        return entry.get("sha256") or f"crc64:{entry['crc64']}"

    checksum = hashlib.sha256("".join(f"{e['path']}\0{digest(e)}\n" for e in entries).encode()).hexdigest()
    manifest = {
        "source_uri": source_uri,
        "version": version,
        "files": entries,
        "total_files": len(entries),
        "total_bytes": sum(e["size"] for e in entries),
        "checksum": checksum,
        "staged_at": datetime.now(UTC).isoformat(timespec="seconds"),
        # Size and mtime as written, so a re-run can tell untouched files without reading them.
        "stat": {e["path"]: (partial / e["path"]).stat().st_mtime_ns for e in entries},
    }
    (partial / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
    return manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def copy_plan(source: ObjectSource, target_root: str | os.PathLike[str], version: str) -> dict[str, Any]:
    """What staging ``version`` would copy, read-only: the source listing against what is staged.

    Nothing is created or locked; a version staged unchanged copies nothing. Files whose key, size
    and ETag the published manifest records are counted as already staged.
    """
    objects = _checked_listing(source)
    published = _read_manifest(Path(target_root) / version) or {"files": []}
    staged = {(f["path"], f["size"], f["etag"]) for f in published["files"]}
    todo = [o for o in objects if (o.key, o.size, o.etag) not in staged]
    return {
        "source_uri": source.uri,
        "target": str(Path(target_root) / version),
        "files": len(objects),
        "bytes": sum(o.size for o in objects),
        "files_to_copy": len(todo),
        "bytes_to_copy": sum(o.size for o in todo),
    }
