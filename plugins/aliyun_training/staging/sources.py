"""Object stores the staging engine copies from.

A source lists objects (key, size, ETag) under a prefix and opens one for reading. ``file://``
directories stand in for OSS on one machine; an object's ETag there is derived from its size and
modification time, so a file rewritten during a copy is detected like a changed OSS object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import urlparse

from aliyun_training.spec import SpecError


@dataclass(frozen=True)
class SourceObject:
    """One object under the source prefix; ``key`` is relative to the prefix, with ``/`` separators."""

    key: str
    size: int
    etag: str


class ObjectSource(Protocol):
    uri: str

    def list(self) -> list[SourceObject]:
        """Every object under the prefix, sorted by key."""

    def open(self, key: str) -> BinaryIO:
        """A binary stream of one object's content."""

    def head(self, key: str) -> SourceObject:
        """The object's current size and ETag, to detect a source that changed during the copy."""


class LocalObjectSource:
    """A directory tree addressed as ``file:///path/prefix/``."""

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

    def open(self, key: str) -> BinaryIO:
        return (self.root / key).open("rb")

    def head(self, key: str) -> SourceObject:
        return self._describe(key, self.root / key)

    @staticmethod
    def _describe(key: str, path: Path) -> SourceObject:
        stat = path.stat()
        return SourceObject(key=key, size=stat.st_size, etag=f"{stat.st_size:x}-{stat.st_mtime_ns:x}")


def open_source(uri: str) -> ObjectSource:
    """The object source for ``uri``; only ``file://`` is available until the OSS source lands."""
    scheme = urlparse(uri).scheme
    if scheme == "file":
        return LocalObjectSource(uri)
    raise SpecError(
        f"source_uri: scheme {scheme or '(none)'!r} of {uri!r} is not supported (fix: use file://)"
    )
