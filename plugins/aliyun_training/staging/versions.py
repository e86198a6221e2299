"""Which versions of a dataset its source holds, and whether a version has landed.

A source template (``oss://bucket/datasets/{dataset}/{version}/``, or the local object store's
``file://`` one) puts each version in its own folder, so the versions are the folder names under
the template's part before ``{version}``, read with one delimited listing.

Every run takes only a version that has landed, however it chose it: a scheduled run waits for its
version (``wait_for_version``), the new-version watcher announces only landed versions, and a
version taken without waiting (named in the form, or the newest) is looked at once when the run is
planned (``plan.resolve.choose_version``). All of them look with :func:`look_at_version`. Versions
hold millions of objects, so each look at one reads at most one page:

- With a completion marker (``dataset.version.marker``, ``_SUCCESS`` by default, as Hadoop and Spark
  jobs write it): the version has landed once that object is directly in its folder. The upload
  writes it last, so its presence says everything else is in place. One HEAD (oss2
  ``Bucket.object_exists``, a GetObjectMeta) or one ``stat``, however large the version.
- Without one (``marker: null``): the version has landed once two looks a poll apart list the same
  first page (up to :data:`LISTING_PAGE` objects: keys, sizes, ETags, and whether more follow), the
  page is not empty and holds no object of an upload in progress (:data:`IN_PROGRESS`). Objects
  after the first page are never compared: a version larger than a page should be written with a
  marker.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.staging.sources import SourceObject
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Iterator

_NUMBER = re.compile(r"(\d+)")

#: The objects one marker-less look compares: one ListObjectsV2 page, OSS's largest ``max-keys``.
LISTING_PAGE = 1000
#: Keys of objects an upload still in progress writes, which a completed version never holds:
#: ``.uploading``, ``.tmp`` and ``.partial`` (upload tools' and editors' temporary names), Hadoop's
#: ``._COPYING_`` (``hadoop fs -put``), and each followed by ``-<digits>`` (a writer's process id,
#: as this project's own generators name their temporary files).
IN_PROGRESS = re.compile(r"\.(uploading|tmp|partial|_COPYING_)(-\d+)?$")


def versions_folder(template: str, dataset: str) -> str:
    """The URI of the folder holding the versions: the template up to its ``{version}`` segment."""
    head, found, _ = template.partition("{version}")
    if not found or not head.endswith("/"):
        raise SpecError(
            f"source_uri: {template!r} does not give each version its own folder "
            "(fix: end a path segment before {version}, e.g. oss://bucket/datasets/{dataset}/{version}/)"
        )
    return head.format(dataset=dataset)


def source_versions(template: str, dataset: str, alibaba_cloud_conn_id: str) -> list[str]:
    """The dataset's versions in its source, oldest first (see :func:`version_order`).

    A connection that is not defined (or unusable) is a setting to fix, not an error to retry: it
    fails as a SpecError naming the connection and how to define it.
    """
    from aliyun_training.hooks.alibaba_cloud import AlibabaCloudConnectionError
    from aliyun_training.staging.opening import open_connected_source

    folder = versions_folder(template, dataset)
    try:
        names = open_connected_source(folder, alibaba_cloud_conn_id).folders()
    except AlibabaCloudConnectionError as exc:
        raise SpecError(f"alibaba_cloud_conn_id: cannot list the versions in {folder}: {exc}") from None
    return sorted((n for n in names if re.fullmatch(DATASET_VERSION_PATTERN, n)), key=version_order)


def version_order(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key: numbers compare as numbers (``v10`` after ``v9``), dates as their digits."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _NUMBER.split(version) if part)


def missing_version(dataset: str, version: str, versions: list[str], folder: str) -> SpecError:
    """The error of a version the source does not hold, naming the ones it does."""
    listed = ", ".join(versions[-10:]) if versions else "none"
    more = f" (the newest 10 of {len(versions)})" if len(versions) > 10 else ""
    return SpecError(
        f"dataset_version: {dataset} has no version {version!r} in {folder}; it holds {listed}{more} "
        "(fix: choose one of them, or leave the version empty for the newest)"
    )


# -- has a version landed ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LandingCheck:
    """One look at a version's folder.

    ``message`` says what the look was for or found, for the waiting task's log; ``digest`` is the
    marker-less look's page, which the next look (a poll later) must equal for the version to land.
    ``settling``: a marker-less first look found objects and none of an upload in progress, all one
    look can tell; the version lands if the next look lists the same.
    """

    landed: bool
    message: str
    digest: str | None = None
    settling: bool = False

    @property
    def incomplete(self) -> bool:
        """Whether the look saw the version incomplete: no marker, nothing listed, an upload in
        progress, a listing that changed (or a look that failed)."""
        return not (self.landed or self.settling)


def check_landing(
    version_uri: str, marker: str | None, alibaba_cloud_conn_id: str, previous: str | None = None
) -> LandingCheck:
    """Whether the version in the folder ``version_uri`` has landed, from one request, for a task
    that waits: :func:`look_at_version`, with a transient OSS failure (throttling, 5xx, a dropped
    connection) as "not yet", keeping ``previous``: a wait of hours should not fail on one blip.
    """
    from aliyun_training.staging.oss import is_transient_oss_error

    folder = version_uri.rstrip("/") + "/"
    try:
        return look_at_version(folder, marker, alibaba_cloud_conn_id, previous)
    except Exception as exc:
        if not is_transient_oss_error(exc):
            raise
        status = getattr(exc, "status", 0)  # an oss2 answer's; a dropped connection has none
        reason = f"HTTP {status} {getattr(exc, 'code', '')}" if status > 0 else type(exc).__name__
        return LandingCheck(False, f"could not look at {folder} ({reason}); looking again", previous)


def look_at_version(
    version_uri: str, marker: str | None, alibaba_cloud_conn_id: str, previous: str | None = None
) -> LandingCheck:
    """Whether the version in the folder ``version_uri`` has landed, from one request: the one
    completion check of every way a run gets its version (``wait_for_version``, the new-version
    watcher, and a version a run takes without waiting: ``plan.resolve.choose_version``).

    With a ``marker``: whether that object exists. Without: whether the listing's first page is
    complete and equals ``previous``, the digest of the look a poll earlier (None: this is the first
    look, which cannot land, only settle). A missing bucket or a denied request raises
    :class:`SpecError` naming the fix; any other failure is raised as it is.
    """
    folder = version_uri.rstrip("/") + "/"
    if marker is None:
        return _compare_listing(folder, alibaba_cloud_conn_id, previous)
    if _object_exists(folder, marker, alibaba_cloud_conn_id, field="source_uri"):
        return LandingCheck(True, f"landed: marker found: {folder}{marker}")
    return LandingCheck(False, f"waiting for {folder}{marker}")


def _compare_listing(folder: str, alibaba_cloud_conn_id: str, previous: str | None) -> LandingCheck:
    """The marker-less rule on the folder's first page (see the module's docstring)."""
    objects, truncated = _first_page(folder, alibaba_cloud_conn_id)
    page = [[o.key, o.size, o.etag] for o in objects]
    digest = hashlib.sha256(json.dumps([truncated, page]).encode()).hexdigest()
    listed = f"{len(objects)} object{'' if len(objects) == 1 else 's'}" + (
        f" (the first page of more than {LISTING_PAGE})" if truncated else ""
    )
    if not objects:
        return LandingCheck(False, f"waiting for objects in {folder} (it lists none)", digest)
    busy = next((o.key for o in objects if IN_PROGRESS.search(o.key)), None)
    if busy is not None:
        return LandingCheck(False, f"upload in progress: {folder}{busy} ({listed} listed)", digest)
    if previous is None:
        return LandingCheck(
            False,
            f"listed {listed} in {folder}; landed if the next look lists the same",
            digest,
            settling=True,
        )
    if digest != previous:
        return LandingCheck(False, f"listing changed: {listed} in {folder}", digest)
    unseen = (
        f"; objects after the first {LISTING_PAGE} were not compared (fix: have the upload write a "
        "marker last and set dataset.version.marker to it)"
        if truncated
        else ""
    )
    return LandingCheck(True, f"landed: listing unchanged: {listed} in {folder}{unseen}", digest)


def _first_page(folder: str, alibaba_cloud_conn_id: str) -> tuple[list[SourceObject], bool]:
    """Up to :data:`LISTING_PAGE` objects of the folder and whether more follow (one ListObjectsV2).

    A zero-byte key ending in ``/`` is a folder object (the console's "create folder"), not data. A
    local folder is walked depth first in name order, reading directories only until the page is
    full; one that does not exist lists empty.
    """
    if folder.startswith("oss://"):
        bucket, prefix = _oss_folder(folder, alibaba_cloud_conn_id, field="source_uri")
        from aliyun_training.staging.oss import oss_errors

        with oss_errors(folder, "source_uri", "listing", "oss:ListObjects"):
            result = bucket.list_objects_v2(prefix=prefix, max_keys=LISTING_PAGE)
        objects = [
            SourceObject(info.key[len(prefix) :], info.size, info.etag)
            for info in result.object_list
            if not (info.key.endswith("/") and info.size == 0)
        ]
        return objects, bool(result.is_truncated)
    root = _local_folder(folder)
    found = list(itertools.islice(_local_objects(root, root), LISTING_PAGE + 1))
    return found[:LISTING_PAGE], len(found) > LISTING_PAGE


def _local_objects(root: Path, directory: Path) -> Iterator[SourceObject]:
    """The regular files under ``directory``, described as :class:`LocalObjectSource` describes them.

    A file renamed or deleted between its directory's read and its ``stat`` (a writer's temporary
    file) is left out: the next look lists the folder as it is then.
    """
    try:
        with os.scandir(directory) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _local_objects(root, Path(entry.path))
            continue
        try:
            info = entry.stat() if entry.is_file() else None
        except FileNotFoundError:
            info = None
        if info is not None:
            key = Path(entry.path).relative_to(root).as_posix()
            yield SourceObject(key, info.st_size, f"{info.st_size:x}-{info.st_mtime_ns:x}")


def _object_exists(folder: str, name: str, alibaba_cloud_conn_id: str, *, field: str) -> bool:
    """Whether the object ``name`` is directly in ``folder``: one GetObjectMeta (HEAD), or one stat."""
    if not folder.startswith("oss://"):
        return (_local_folder(folder) / name).is_file()
    bucket, prefix = _oss_folder(folder, alibaba_cloud_conn_id, field=field)
    from aliyun_training.staging.oss import oss_errors

    with oss_errors(folder, field, f"reading {name} in", "oss:GetObject"):
        return bool(bucket.object_exists(prefix + name))


def _local_folder(uri: str) -> Path:
    return Path(urlparse(uri).path)


def _oss_folder(
    uri: str, alibaba_cloud_conn_id: str, *, field: str, enable_crc: bool = False
) -> tuple[Any, str]:
    """The oss2 Bucket of an ``oss://`` folder, through the connection, and the folder's key prefix;
    ``field`` names the setting the URI came from in errors."""
    from aliyun_training.oss_location import parse_oss_uri
    from aliyun_training.staging.oss import OssClientConfig

    location = parse_oss_uri(uri, field=field)
    config = OssClientConfig.from_connection(alibaba_cloud_conn_id)
    return config.bucket(location.bucket_name, enable_crc=enable_crc), location.prefix


# -- prepared versions ------------------------------------------------------------------------------

#: Written into a derived version's folder once its prepare job succeeded; a folder without it is
#: partial (a job that died mid-write) and is prepared again.
PREPARED_MARKER = "_prepared.json"


def is_prepared(output_uri: str, alibaba_cloud_conn_id: str) -> bool:
    """Whether a prepare job finished writing ``output_uri`` (its marker is there: one request)."""
    return _object_exists(
        output_uri.rstrip("/") + "/", PREPARED_MARKER, alibaba_cloud_conn_id, field="output_uri"
    )


def mark_prepared(output_uri: str, alibaba_cloud_conn_id: str, record: dict[str, object]) -> None:
    """Write the marker last, once every shard is in place."""
    body = json.dumps(record, indent=2, sort_keys=True).encode()
    if not output_uri.startswith("oss://"):
        folder = _local_folder(output_uri)
        partial = folder / f".{PREPARED_MARKER}.partial"
        partial.write_bytes(body)
        partial.replace(folder / PREPARED_MARKER)
        return
    bucket, prefix = _oss_folder(output_uri, alibaba_cloud_conn_id, field="output_uri", enable_crc=True)
    bucket.put_object(f"{prefix}{PREPARED_MARKER}", body)


def read_json_object(folder: str, name: str, alibaba_cloud_conn_id: str, *, field: str) -> Any:
    """The JSON document ``name`` in ``folder`` (a local folder or an ``oss://`` one), or None when
    it is not there; a document that is not JSON raises SpecError naming it."""
    where = folder.rstrip("/") + "/" + name
    if not folder.startswith("oss://"):
        path = _local_folder(folder) / name
        body = path.read_bytes() if path.is_file() else None
    else:
        bucket, prefix = _oss_folder(folder.rstrip("/") + "/", alibaba_cloud_conn_id, field=field)
        import oss2

        from aliyun_training.staging.oss import oss_errors

        with oss_errors(folder, field, f"reading {name} in", "oss:GetObject"):
            try:
                body = bucket.get_object(prefix + name).read()
            except oss2.exceptions.NoSuchKey:
                body = None
    if body is None:
        return None
    return parse_job_json(body, f"{field}: {where}")


def parse_job_json(body: bytes | str, where: str) -> Any:
    """The JSON document a job wrote (``where`` names it in errors), every number in it finite.

    A job's numbers are compared and charted: the promotion gate compares scores, and NaN is neither
    above nor below anything (a NaN champion could never be beaten), while Infinity beats everything.
    Python's json module reads the bare tokens ``NaN``, ``Infinity`` and ``-Infinity``, which JSON
    does not have, and ``1e999`` as infinity; an integer too large for a float reads as itself but
    fails where it is converted. So the document is refused as it is read, naming the first such key
    (``epochs[2].test_loss``), before anything is published or compared. A document nested deeper
    than Python's parser recurses is refused too, rather than failing with a RecursionError.
    """
    try:
        document = json.loads(body)
    except RecursionError:
        raise SpecError(
            f"{where} nests too deep for Python's JSON parser (fix: write a flatter document)"
        ) from None
    except ValueError as exc:
        raise SpecError(f"{where} is not JSON ({exc})") from None
    found = _non_finite(document)
    if found is not None:
        path, shown = found
        raise SpecError(
            f"{where}: {path} is {shown}, not a finite number (fix: write a finite number; leave out, or "
            "write null for, a value that could not be computed)"
        )
    return document


def _non_finite(document: Any) -> tuple[str, str] | None:
    """The first number of ``document`` (in its order) that is not finite, as its key path and how
    it reads; None when every number is finite. Walked without recursion: the parser's depth is the
    only limit."""
    pending: list[tuple[str, Any]] = [("", document)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict):
            pending.extend(reversed([(f"{path}.{key}" if path else str(key), v) for key, v in value.items()]))
        elif isinstance(value, list):
            pending.extend(reversed([(f"{path}[{i}]", item) for i, item in enumerate(value)]))
        elif isinstance(value, float) and not math.isfinite(value):
            return path or "the document", json.dumps(value)
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
            return path or "the document", "an integer beyond a float's range"
    return None
