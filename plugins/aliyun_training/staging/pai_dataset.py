"""Register a staged dataset version as a PAI dataset version, so DLC jobs can mount it by id.

A DLC job mounts ``DataSources[{DataSourceId, DataSourceVersion, MountPath}]``: the staging stage
therefore needs a (dataset id, version name) for every staged version. One PAI dataset per
logical dataset name and workspace; one version per staged location (its Uri).

Registration must be idempotent, because a task may be retried after any call, including after a
create whose answer was lost: the dataset is found by its exact Name, the version by its exact
Uri, and creates are only made for what is missing (``AIWorkspaceHook`` makes each create once).
:func:`create_dataset_request` and :func:`create_dataset_version_request` build the two creates
with no call and no connection, so a dry run can show them.

Facts from the AIWorkspace SDK (alibabacloud_aiworkspace20210204) docstrings:

- CreateDataset requires Name, DataSourceType, Property and Uri; its Uri, Property and Options are
  those "of the initial version v1", i.e. creating a dataset creates its first version from them.
  So a new dataset is created with the version's own Uri, and that v1 is the registered version.
- CreateDatasetVersion requires DataSourceType (equal to the dataset's), Property and Uri; the
  service names the version (v1, v2, ...) and answers VersionName.
- Options is a JSON string whose ``mountPath`` is the default mount path DLC uses.
- Uri forms: see :func:`dataset_uri` (the SDK docstrings give none for CPFS or BMCPFS).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aliyun_training.hooks.aiworkspace import AIWorkspaceHook

URI_KINDS = ("cpfs", "bmcpfs")
_PLAIN_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
#: A DNS name of at least three labels, as mount target domains are.
_MOUNT_TARGET_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?){2,}")


def dataset_uri(
    kind: str,
    *,
    file_system_id: str,
    region: str,
    path: str,
    mount_target: str | None = None,
    protocol_service_id: str | None = None,
    export_id: str | None = None,
) -> str:
    """The one place a CPFS dataset Uri is built, for ``kind`` ``"cpfs"`` or ``"bmcpfs"``.

    - ``cpfs`` (general-purpose CPFS 2.0, DataSourceType CPFS):
      ``cpfs://<fsid>.<region>/<protocol service id>/<export id>/<path>/``, the form the PAI Python
      SDK and DSW build; a job reaches CPFS 2.0 through a protocol service's export, so both ids are
      part of the address (the ``nas://`` form of NAS is reported refused for CPFS).
    - ``bmcpfs`` (CPFS for Lingjun, DataSourceType BMCPFS): ``bmcpfs://<mount target domain>/<path>/``,
      the host being the mount target's domain exactly as the console lists it (e.g.
      ``cpfs-0123abcd-vpc-xxxx.cn-wulanchabu.cpfs.aliyuncs.com``), never composed from ids.

    ``path`` is the directory inside the file system; the Uri always ends with ``/`` because a
    staged version is a directory (Property DIRECTORY).
    """
    if kind not in URI_KINDS:
        raise SpecError(
            f"dataset_uri_kind: {kind!r} is not a known CPFS Uri form (fix: use one of {URI_KINDS})"
        )
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise SpecError(f"path: {path!r} must not contain . or .. segments (fix: give an absolute directory)")
    tail = "/".join(parts) + "/" if parts else ""
    if kind == "bmcpfs":
        if not mount_target or not _MOUNT_TARGET_DOMAIN.fullmatch(mount_target):
            raise SpecError(
                f"staging.mount_target: {mount_target!r} is not a mount target domain (fix: copy the "
                "Lingjun CPFS mount target's domain from the console, e.g. "
                "cpfs-0123abcd-vpc-xxxx.cn-wulanchabu.cpfs.aliyuncs.com)"
            )
        return f"bmcpfs://{mount_target}/{tail}"
    ids = {
        "staging.file_system_id": (file_system_id, "the CPFS file system id, e.g. cpfs-0123abcd"),
        "region": (region, "the connection's region, e.g. cn-wulanchabu"),
        "staging.protocol_service_id": (protocol_service_id, "the protocol service id, e.g. ptc-0123abcd"),
        "staging.export_id": (export_id, "the protocol service export id, e.g. exp-0123abcd"),
    }
    for field, (value, fix) in ids.items():
        if not value or not _PLAIN_ID.fullmatch(value):
            raise SpecError(f"{field}: {value!r} is not a plain id (fix: give {fix})")
    return f"cpfs://{file_system_id}.{region}/{protocol_service_id}/{export_id}/{tail}"


def create_dataset_request(
    *,
    workspace_id: str,
    name: str,
    version_uri: str,
    data_source_type: str,
    provider_type: str | None,
    mount_path: str,
    version_description: str,
    description: str | None = None,
    labels: Mapping[str, str] | None = None,
    version_labels: Mapping[str, str] | None = None,
) -> Any:
    """The CreateDataset request of a new dataset whose v1 is the directory at ``version_uri``.

    Pure: no call, no connection, no secret.
    """
    from alibabacloud_aiworkspace20210204 import models

    return models.CreateDatasetRequest(
        workspace_id=workspace_id,
        name=name,
        data_source_type=data_source_type,
        property="DIRECTORY",
        uri=version_uri,
        options=_options(mount_path),
        provider_type=provider_type,
        description=description,
        labels=_labels(models, labels),
        version_description=version_description,
        version_labels=_labels(models, version_labels),
    )


def create_dataset_version_request(
    *,
    version_uri: str,
    data_source_type: str,
    mount_path: str,
    version_description: str,
    version_labels: Mapping[str, str] | None = None,
) -> Any:
    """The CreateDatasetVersion request of the directory at ``version_uri`` (DataSourceType equal to
    the dataset's). Pure: no call, no connection, no secret."""
    from alibabacloud_aiworkspace20210204 import models

    return models.CreateDatasetVersionRequest(
        data_source_type=data_source_type,
        property="DIRECTORY",
        uri=version_uri,
        options=_options(mount_path),
        description=version_description,
        labels=_labels(models, version_labels),
    )


def register_dataset_version(
    hook: AIWorkspaceHook,
    *,
    workspace_id: str,
    name: str,
    version_uri: str,
    data_source_type: str,
    provider_type: str | None,
    mount_path: str,
    version_description: str,
    description: str | None = None,
    labels: Mapping[str, str] | None = None,
    version_labels: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """(dataset id, version name) of the PAI dataset ``name`` whose version has Uri ``version_uri``.

    Creates the dataset (its v1 being this Uri) when the workspace has none of that name, else
    reuses the version with that Uri, else creates one. Running it again creates nothing.
    ``labels`` go on the dataset, ``version_labels`` on a version this call creates.
    """
    dataset_id = hook.find_dataset(workspace_id, name) or hook.create_dataset(
        create_dataset_request(
            workspace_id=workspace_id,
            name=name,
            version_uri=version_uri,
            data_source_type=data_source_type,
            provider_type=provider_type,
            mount_path=mount_path,
            version_description=version_description,
            description=description,
            labels=labels,
            version_labels=version_labels,
        )
    )
    version = hook.find_dataset_version(dataset_id, version_uri) or hook.create_dataset_version(
        dataset_id,
        create_dataset_version_request(
            version_uri=version_uri,
            data_source_type=data_source_type,
            mount_path=mount_path,
            version_description=version_description,
            version_labels=version_labels,
        ),
    )
    return dataset_id, version


def _options(mount_path: str) -> str:
    """Options: a JSON string whose ``mountPath`` is the default mount path DLC uses."""
    return json.dumps({"mountPath": mount_path})


def _labels(models: Any, labels: Mapping[str, str] | None) -> list[Any] | None:
    if not labels:
        return None
    return [models.Label(key=key, value=value) for key, value in sorted(labels.items())]
