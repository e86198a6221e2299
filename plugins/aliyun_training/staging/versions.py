"""Which versions of a dataset its source holds: the newest for a run that names none, and what exists.

A source template (``oss://bucket/datasets/{dataset}/{version}/``, or the local object store's
``file://`` one) puts each version in its own folder, so the versions are the folder names under
the template's part before ``{version}``, read with one delimited listing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from aliyun_training.staging.sources import SourceObject

_NUMBER = re.compile(r"(\d+)")


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
    """The dataset's versions in its source, oldest first (see :func:`version_order`)."""
    from aliyun_training.staging.sources import open_connected_source

    folder = versions_folder(template, dataset)
    names = open_connected_source(folder, alibaba_cloud_conn_id).folders()
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


def version_landed(source_uri: str, alibaba_cloud_conn_id: str) -> bool:
    """Whether the version's folder holds any object yet (a missing folder has not landed)."""
    return bool(_listing(source_uri, alibaba_cloud_conn_id))


def _listing(source_uri: str, alibaba_cloud_conn_id: str) -> list[SourceObject]:
    """The objects of a version's folder; none for a local folder that does not exist yet (an OSS
    prefix without objects lists empty, and a missing bucket stays an error)."""
    from aliyun_training.staging.sources import LocalObjectSource, open_connected_source

    source = open_connected_source(source_uri, alibaba_cloud_conn_id)
    if isinstance(source, LocalObjectSource) and not source.root.is_dir():
        return []
    return source.list()


#: Written into a derived version's folder once its prepare job succeeded; a folder without it is
#: partial (a job that died mid-write) and is prepared again.
PREPARED_MARKER = "_prepared.json"


def is_prepared(output_uri: str, alibaba_cloud_conn_id: str) -> bool:
    """Whether a prepare job finished writing ``output_uri`` (its marker is there)."""
    return any(obj.key == PREPARED_MARKER for obj in _listing(output_uri, alibaba_cloud_conn_id))


def mark_prepared(output_uri: str, alibaba_cloud_conn_id: str, record: dict[str, object]) -> None:
    """Write the marker last, once every shard is in place."""
    import json

    body = json.dumps(record, indent=2, sort_keys=True).encode()
    if output_uri.startswith("file://"):
        from pathlib import Path

        folder = Path(output_uri.removeprefix("file://"))
        partial = folder / f".{PREPARED_MARKER}.partial"
        partial.write_bytes(body)
        partial.replace(folder / PREPARED_MARKER)
        return
    from aliyun_training.oss_location import parse_oss_uri
    from aliyun_training.staging.oss import OssClientConfig

    location = parse_oss_uri(output_uri, field="output_uri")
    bucket = OssClientConfig.from_connection(alibaba_cloud_conn_id).bucket(location.bucket, enable_crc=True)
    bucket.put_object(f"{location.prefix}{PREPARED_MARKER}", body)
