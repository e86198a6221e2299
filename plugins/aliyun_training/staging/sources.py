"""Object stores the staging engine copies from: ``oss://`` through oss2, ``file://`` on one machine.

A source lists the objects (key, size, ETag) under a prefix and reads byte ranges of one object.
A read must only ever deliver bytes of the listed version: OSS reads are conditional on the ETag
(``If-Match``), a ``file://`` read re-checks the file afterwards, and either raises
:class:`SourceChangedError` when the object changed. ``file://`` directories stand in for OSS on
one machine; an object's ETag there is derived from its size and modification time.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, NoReturn, Protocol, TypeVar
from urllib.parse import urlparse

from aliyun_training.validation import SpecError

_CHUNK = 1024 * 1024
T = TypeVar("T")
log = logging.getLogger(__name__)


class StagingError(RuntimeError):
    """Staging failed; nothing was published and the previously published version is untouched."""


class SourceChangedError(StagingError):
    """An object was rewritten or deleted while it was being copied."""

    def __init__(self, key: str, listed: str, now: str) -> None:
        super().__init__(
            f"source object {key} changed during the copy (listed {listed}, now {now}); nothing was "
            "published — retry once the dataset version is no longer being written"
        )


@dataclass(frozen=True)
class SourceObject:
    """One object under the source prefix; ``key`` is relative to the prefix, with ``/`` separators."""

    key: str
    size: int
    etag: str


#: Receives each chunk of a read, in order.
ChunkSink = Callable[[bytes], None]


class ObjectSource(Protocol):
    uri: str
    #: The checksum the store reports per object, which a copy is verified against.
    checksum: Literal["crc64", "sha256"]
    #: Whether parallel byte-range reads of one large object pay off (a remote store does).
    ranged_reads: bool

    def folders(self) -> list[str]:
        """The names of the folders directly under the prefix (a dataset's versions, for one)."""

    def list(self) -> list[SourceObject]:
        """Every object under the prefix, sorted by key."""

    def read(self, obj: SourceObject, start: int, end: int, sink: ChunkSink) -> str | None:
        """Feed bytes ``[start, end)`` of ``obj`` to ``sink``; return the whole object's CRC64 if the
        store reports one. Raise SourceChangedError if the object is no longer the listed version."""

    def is_transient(self, exc: BaseException) -> bool:
        """Whether a failed read is worth retrying (throttling, 5xx, a dropped connection)."""


class LocalObjectSource:
    """A directory tree addressed as ``file:///path/prefix/``.

    Only regular files are objects. Listing refuses, naming the path and the fix, before anything is
    read: a FIFO, socket or device (reading a FIFO blocks forever, the others are no data), a
    dangling link, a link that leads out of the source directory (its content is not the dataset
    version's, and it may be anything readable on this machine) and a link to a directory (walking
    it could alias or loop back into the tree; its files would otherwise be silently missing). A link
    to a regular file inside the source is copied as that file. The source directory itself may be
    a link: it is what ``source_uri`` names.
    """

    checksum: Literal["crc64", "sha256"] = "sha256"
    ranged_reads = False

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.root = Path(urlparse(uri).path)

    def folders(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(entry.name for entry in self.root.iterdir() if entry.is_dir())

    def list(self) -> list[SourceObject]:
        if not self.root.is_dir():
            raise SpecError(
                f"source_uri: {self.uri} does not exist "
                "(fix: create the dataset version there or correct the URI)"
            )
        real_root = self.root.resolve()
        objects = []
        for dirpath, dirs, files in os.walk(self.root, onerror=self._unlistable):
            for name in sorted(dirs + files):
                path = Path(dirpath, name)
                if name in dirs and not path.is_symlink():
                    continue  # a real directory: os.walk descends into it
                self._check_entry(path, real_root)
                objects.append(self._describe(path.relative_to(self.root).as_posix(), path))
        return sorted(objects, key=lambda o: o.key)

    def _check_entry(self, path: Path, real_root: Path) -> None:
        """Refuse what is not a regular file, or a link that is not to one inside the source."""
        if path.is_symlink():
            try:
                resolved = path.resolve(strict=True)
            except (OSError, RuntimeError):  # dangling, or a loop of links
                self._refuse(path, f"is a symbolic link to {os.readlink(path)}, which leads to no file")
            if not resolved.is_relative_to(real_root):
                self._refuse(path, f"is a symbolic link to {resolved}, outside the source directory")
            if resolved.is_dir():
                self._refuse(path, f"is a symbolic link to the directory {resolved}")
        kind = _special_kind(path.stat().st_mode)
        if kind:
            self._refuse(path, f"is a {kind}, not a regular file")

    def _unlistable(self, error: OSError) -> NoReturn:
        """os.walk skips a directory it cannot read unless told otherwise: its files would be missing."""
        raise SpecError(
            f"source_uri: {error.filename} cannot be listed ({error.strerror}); nothing was copied "
            "(fix: make it readable by the user the staging runs as)"
        )

    def _refuse(self, path: Path, problem: str) -> NoReturn:
        raise SpecError(
            f"source_uri: {path} {problem}; nothing was copied (fix: replace it with the regular "
            f"files it stands for, or remove it from the dataset version under {self.uri}: only "
            "regular files and directories are staged)"
        )

    def read(self, obj: SourceObject, start: int, end: int, sink: ChunkSink) -> str | None:
        copied = 0
        with self.open(obj.key) as stream:
            stream.seek(start)
            while copied < end - start and (chunk := stream.read(min(_CHUNK, end - start - copied))):
                sink(chunk)
                copied += len(chunk)
        now = self.head(obj.key)
        if now.etag != obj.etag:
            raise SourceChangedError(
                obj.key, f"size {obj.size} ETag {obj.etag}", f"size {now.size} ETag {now.etag}"
            )
        return None

    def open(self, key: str) -> BinaryIO:
        """The object's file; a path that became something else since listing is a changed source.

        Opened non-blocking, so a FIFO swapped in after listing cannot hang the copy.
        """
        fd = os.open(self.root / key, os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise SourceChangedError(key, "a regular file", f"a {_special_kind(mode) or 'directory'}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def head(self, key: str) -> SourceObject:
        return self._describe(key, self.root / key)

    def is_transient(self, exc: BaseException) -> bool:
        return False

    @staticmethod
    def _describe(key: str, path: Path) -> SourceObject:
        info = path.stat()
        return SourceObject(key=key, size=info.st_size, etag=f"{info.st_size:x}-{info.st_mtime_ns:x}")


def _special_kind(mode: int) -> str | None:
    """What a non-regular, non-directory file is, in words; None for a regular file or directory."""
    kinds = {
        stat.S_ISFIFO: "FIFO (named pipe)",
        stat.S_ISSOCK: "socket",
        stat.S_ISCHR: "character device",
        stat.S_ISBLK: "block device",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), None)


def with_retries(
    fn: Callable[[], T], is_transient: Callable[[BaseException], bool], attempts: int, base_delay: float = 0.2
) -> T:
    """Call ``fn``, retrying transient failures with exponential backoff; the last failure propagates."""
    attempt = 1
    while True:
        try:
            return fn()
        except Exception as exc:
            if attempt >= attempts or not is_transient(exc):
                raise
            log.warning("Attempt %d/%d failed (%s); retrying", attempt, attempts, _short(exc))
            time.sleep(base_delay * 2 ** (attempt - 1))
            attempt += 1


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 300 else text[:300] + "..."
