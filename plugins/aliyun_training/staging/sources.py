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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol, TypeVar
from urllib.parse import urlparse

from aliyun_training.spec import SpecError

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

    def list(self) -> list[SourceObject]:
        """Every object under the prefix, sorted by key."""

    def read(self, obj: SourceObject, start: int, end: int, sink: ChunkSink) -> str | None:
        """Feed bytes ``[start, end)`` of ``obj`` to ``sink``; return the whole object's CRC64 if the
        store reports one. Raise SourceChangedError if the object is no longer the listed version."""

    def is_transient(self, exc: BaseException) -> bool:
        """Whether a failed read is worth retrying (throttling, 5xx, a dropped connection)."""


class LocalObjectSource:
    """A directory tree addressed as ``file:///path/prefix/``."""

    checksum: Literal["crc64", "sha256"] = "sha256"
    ranged_reads = False

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.root = Path(urlparse(uri).path)

    def list(self) -> list[SourceObject]:
        if not self.root.is_dir():
            raise SpecError(
                f"source_uri: {self.uri} does not exist "
                "(fix: create the dataset version there or correct the URI)"
            )
        objects = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                path = Path(dirpath, name)
                objects.append(self._describe(path.relative_to(self.root).as_posix(), path))
        return sorted(objects, key=lambda o: o.key)

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
        return (self.root / key).open("rb")

    def head(self, key: str) -> SourceObject:
        return self._describe(key, self.root / key)

    def is_transient(self, exc: BaseException) -> bool:
        return False

    @staticmethod
    def _describe(key: str, path: Path) -> SourceObject:
        stat = path.stat()
        return SourceObject(key=key, size=stat.st_size, etag=f"{stat.st_size:x}-{stat.st_mtime_ns:x}")


def open_source(uri: str, **oss_options: Any) -> ObjectSource:
    """The object source for ``uri``; ``oss_options`` configure the OSS client (see OssObjectSource)."""
    parsed = urlparse(uri)
    scheme = parsed.scheme
    if parsed.query or parsed.fragment or parsed.params:
        raise SpecError(
            f"source_uri: {uri!r} contains '?', '#' or ';', which would cut the path short "
            "(fix: rename the folder without them)"
        )
    if scheme == "file":
        return LocalObjectSource(uri)
    if scheme == "oss":
        from aliyun_training.staging.oss import OssObjectSource

        return OssObjectSource(uri, **oss_options)
    raise SpecError(
        f"source_uri: scheme {scheme or '(none)'!r} of {uri!r} is not supported "
        "(fix: use oss://bucket/prefix/ or file:///path/)"
    )


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
