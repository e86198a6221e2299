"""The one place that knows the shard format: WebDataset-style tar shards of PPM images.

A shard is a plain tar (readable with the stdlib, no TensorFlow or webdataset package needed) whose
members come in pairs sharing a key: ``<key>.ppm`` (a binary P6 image) and ``<key>.cls`` (the class
index as ASCII digits). A prepared version holds ``<split>-000000.tar``, ... per split and a
``shards.json`` index naming the shards, the class ids and the image shape.

Shards are written reproducibly: the same samples in the same order give byte-identical tars, so a
re-run prepare stage can be compared with (or cached by) its previous output.

Only numpy and the standard library are imported here: the prepare stage runs on a CPU image without
torch, and the training script reads shards through the same functions.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

FORMAT = "webdataset"
INDEX_NAME = "shards.json"
IMAGE_SUFFIX = ".ppm"
LABEL_SUFFIX = ".cls"
#: WebDataset splits a member name at its first dot into key and extension, so keys have none.
_KEY = re.compile(r"[A-Za-z0-9_\-/]+")
_PPM_HEADER_FIELDS = 4  # magic, width, height, maxval


class DataError(ValueError):
    """Input that is not what the format promises, or an output place that cannot be used.

    The message names the file or directory and what to do about it, so a stage can print it as is.
    """


@dataclass(frozen=True)
class Sample:
    """One image ([height, width, 3] uint8) with its class index, named by a key unique in its split."""

    key: str
    image: np.ndarray
    label: int


def write_ppm(image: np.ndarray) -> bytes:
    """Encode an RGB uint8 image as binary PPM (P6), the simplest format numpy alone can write."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise DataError(f"expected a uint8 [height, width, 3] image, got {image.dtype} {list(image.shape)}")
    height, width, _ = image.shape
    return f"P6\n{width} {height}\n255\n".encode() + np.ascontiguousarray(image).tobytes()


def read_ppm(data: bytes) -> np.ndarray:
    """Decode a binary PPM (P6, maxval 255), comments included, into a [height, width, 3] uint8 array."""
    fields: list[bytes] = []
    pos = 0
    while len(fields) < _PPM_HEADER_FIELDS:
        while pos < len(data) and data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            end = data.find(b"\n", pos)
            pos = len(data) if end < 0 else end + 1
            continue
        start = pos
        while pos < len(data) and not data[pos : pos + 1].isspace() and data[pos : pos + 1] != b"#":
            pos += 1
        if start == pos:
            raise DataError("truncated PPM header")
        fields.append(data[start:pos])
    magic, *numbers = fields
    if magic != b"P6" or not all(number.isdigit() for number in numbers):
        raise DataError("not a binary PPM (P6) image")
    width, height, maxval = (int(number) for number in numbers)
    if maxval != 255 or width < 1 or height < 1:
        raise DataError(f"unsupported PPM: {width}x{height}, maxval {maxval} (need maxval 255)")
    pixels = data[pos + 1 :]  # exactly one whitespace byte separates the header from the pixels
    if len(pixels) != width * height * 3:
        raise DataError(
            f"PPM pixel data has {len(pixels)} bytes, {width}x{height} RGB needs {width * height * 3}"
        )
    return np.frombuffer(pixels, dtype=np.uint8).reshape(height, width, 3)


def _add_member(archive: tarfile.TarFile, name: str, payload: bytes) -> None:
    """Add one member with fixed metadata, so the tar's bytes depend on its contents only."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(payload), 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    archive.addfile(info, io.BytesIO(payload))


def shard_name(split: str, index: int) -> str:
    """``train-000000.tar``: zero-padded, so sorting names sorts shards."""
    return f"{split}-{index:06d}.tar"


def write_shards(out_dir: Path, split: str, samples: Iterable[Sample], shard_size: int) -> list[str]:
    """Write ``samples`` in the order given into shards of ``shard_size`` pairs; return the shard names."""
    if shard_size < 1:
        raise ValueError("shard_size must be at least 1")
    names: list[str] = []
    stream = iter(samples)
    while chunk := list(itertools.islice(stream, shard_size)):
        names.append(shard_name(split, len(names)))
        with tarfile.open(out_dir / names[-1], "w", format=tarfile.USTAR_FORMAT) as archive:
            for sample in chunk:
                if not _KEY.fullmatch(sample.key):
                    raise DataError(f"sample key {sample.key!r}: use letters, digits, _ - / only (no dots)")
                _add_member(archive, sample.key + IMAGE_SUFFIX, write_ppm(sample.image))
                _add_member(archive, sample.key + LABEL_SUFFIX, str(sample.label).encode())
    return names


def _split_member(name: str, shard: Path) -> tuple[str, str]:
    key, dot, suffix = name.partition(".")
    if not dot or "." + suffix not in (IMAGE_SUFFIX, LABEL_SUFFIX):
        raise DataError(f"{shard}: unexpected member {name!r} (want <key>.ppm and <key>.cls)")
    return key, "." + suffix


def _pairs(shard: Path) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Stream one shard's members, grouped by key in file order, as WebDataset readers do."""
    key: str | None = None
    group: dict[str, bytes] = {}
    with tarfile.open(shard, "r|") as archive:
        for member in archive:
            if not member.isfile():
                raise DataError(f"{shard}: member {member.name!r} is not a regular file")
            member_key, suffix = _split_member(member.name, shard)
            if member_key != key and key is not None:
                yield key, group
                group = {}
            key = member_key
            handle = archive.extractfile(member)
            assert handle is not None  # regular files always have contents
            group[suffix] = handle.read()
    if key is not None:
        yield key, group


def read_samples(shards: Iterable[Path]) -> Iterator[Sample]:
    """Yield every sample of ``shards`` in order, decoded; a malformed shard raises DataError."""
    for shard in shards:
        try:
            for key, group in _pairs(shard):
                if set(group) != {IMAGE_SUFFIX, LABEL_SUFFIX}:
                    raise DataError(f"{shard}: sample {key!r} has {sorted(group)}, needs .ppm and .cls")
                label = group[LABEL_SUFFIX].decode("ascii", errors="replace")
                if not label.isdigit():
                    raise DataError(f"{shard}: sample {key!r} has class {label!r}, not an index")
                yield Sample(key, read_ppm(group[IMAGE_SUFFIX]), int(label))
        except tarfile.TarError as error:
            raise DataError(f"{shard}: not a readable tar ({error})") from error


def read_index(data_dir: Path, splits: Iterable[str]) -> dict[str, Any]:
    """Load and check ``shards.json`` and the named splits' shards, so a wrong directory fails first."""
    path = data_dir / INDEX_NAME
    if not path.is_file():
        raise DataError(f"{data_dir} has no {INDEX_NAME}; is it a prepared shard version?")
    try:
        index = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataError(f"{path}: expected format {FORMAT!r}")
    if not isinstance(index.get("classes"), list) or not index["classes"]:
        raise DataError(f"{path}: classes must be a non-empty list")
    for split in splits:
        entry = (index.get("splits") or {}).get(split)
        if not isinstance(entry, dict) or not isinstance(entry.get("samples"), int) or entry["samples"] < 1:
            raise DataError(f"{path}: split {split!r} is missing or has no samples")
        missing = [name for name in entry.get("shards") or [] if not (data_dir / name).is_file()]
        if missing or not entry.get("shards"):
            raise DataError(f"{path}: split {split!r} names no shards or missing ones {missing}")
    return index


def write_atomically(path: Path, payload: bytes) -> None:
    """Write through a temporary sibling and rename it, so readers never see a truncated file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(payload)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def check_replaceable(target: Path, marker: str) -> None:
    """Refuse a target that exists and is neither empty nor a complete earlier output (``marker``)."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise DataError(f"{target} exists and is not a directory; point the output at a new directory")
    if target.is_dir() and any(target.iterdir()) and not (target / marker).is_file():
        raise DataError(
            f"{target} is not empty and holds no {marker}; point the output at a new or empty directory"
        )


@contextlib.contextmanager
def publish_directory(target: Path, marker: str) -> Iterator[Path]:
    """Yield a temporary sibling of ``target`` to fill; on success it replaces ``target`` by rename.

    A crash leaves only the hidden sibling, never a half-written ``target``. An earlier complete
    output (it holds ``marker``) is swapped out and deleted; anything else at ``target`` is refused.
    """
    check_replaceable(target, marker)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        if target.is_dir() and any(target.iterdir()):
            os.replace(target, old)
        elif target.is_dir():
            target.rmdir()
        os.replace(partial, target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
