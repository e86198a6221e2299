"""Make a staged version mountable by the training job: a PAI dataset version, or a PV and PVC.

``register`` settings (from the environment file) pick the kind:

- ``{"kind": "pai_dataset", "workspace_id", "name", "uri_kind": "cpfs"|"bmcpfs", "mount_target"
  (bmcpfs: the mount target's domain), "file_system_id", "protocol_service_id" and "export_id"
  (cpfs), "cpfs_path", "provider_type": "Lingjun"|"Ecs", "mount_path"}``: DLC mounts
  ``DataSources[{DataSourceId, DataSourceVersion}]``;
- ``{"kind": "pvc", "kubernetes_conn_id", "namespace", "volume_kind": "cpfs"|"bmcpfs",
  "cpfs_path", "server" (cpfs) or "file_system_id" and "vpc_mount_target"/"vsc_mount_target"
  (bmcpfs), "dataset"}``: ACK mounts a claim whose volume is exactly the version's directory.

``cpfs_path`` is the directory that holds the versions *inside the file system* (the stager may
see it under a mount point, e.g. ``/mnt/cpfs`` + ``cpfs_path``); the version lives at
``<cpfs_path>/<version>``. Both registrations are idempotent: re-running finds what exists.
"""

from __future__ import annotations

import posixpath
from typing import Any

from aliyun_training.spec import SpecError, StagedDataset

DATA_SOURCE_TYPES = {"cpfs": "CPFS", "bmcpfs": "BMCPFS"}


def register_staged(staged: StagedDataset, register: dict[str, Any], conn_id: str) -> StagedDataset:
    """``staged`` plus the ids a training job mounts it by; ``conn_id`` is the alibaba_cloud connection."""
    kind = register.get("kind")
    path = _version_path(register, staged.version)
    if kind == "pai_dataset":
        dataset_id, version = _register_pai_dataset(staged, register, path, conn_id)
        return staged.model_copy(update={"pai_dataset_id": dataset_id, "pai_dataset_version": version})
    if kind == "pvc":
        from aliyun_training.staging.volumes import ensure_version_volume

        claim = ensure_version_volume(
            register.get("kubernetes_conn_id") or "kubernetes_default",
            **_volume(register, staged.version, path),
        )
        return staged.model_copy(update={"pvc": claim})
    raise SpecError(f"register.kind: {kind!r} is not a registration (fix: use pai_dataset or pvc)")


def check_registration(register: dict[str, Any], version: str, region: str | None) -> None:
    """Raise the SpecError registering would raise, without calling any API: run it before staging."""
    path = _version_path(register, version)
    if register.get("kind") == "pai_dataset":
        _workspace(register)
        _pai_uri(register, path, region or "")
    elif register.get("kind") == "pvc":
        from aliyun_training.staging.volumes import build_volume

        build_volume(**_volume(register, version, path))
    else:
        raise SpecError(
            f"register.kind: {register.get('kind')!r} is not a registration (fix: use pai_dataset or pvc)"
        )


def _version_path(register: dict[str, Any], version: str) -> str:
    root = register.get("cpfs_path")
    if not root or not root.startswith("/"):
        raise SpecError(
            "staging.cpfs_path: give the directory holding the versions inside the file system "
            "(fix: an absolute path such as /datasets/cifar10)"
        )
    return posixpath.join(posixpath.normpath(root), version)


def _workspace(register: dict[str, Any]) -> str:
    if not register.get("workspace_id"):
        raise SpecError("workspace_id: a PAI dataset lives in a workspace (fix: set workspace_id)")
    return register["workspace_id"]


def _pai_uri(register: dict[str, Any], path: str, region: str) -> str:
    from aliyun_training.staging.pai_dataset import dataset_uri

    return dataset_uri(
        register.get("uri_kind") or "bmcpfs",
        file_system_id=register.get("file_system_id") or "",
        region=region,
        path=path,
        **{k: register.get(k) for k in ("mount_target", "protocol_service_id", "export_id")},
    )


def _register_pai_dataset(
    staged: StagedDataset, register: dict[str, Any], path: str, conn_id: str
) -> tuple[str, str]:
    from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
    from aliyun_training.staging.pai_dataset import register_dataset_version

    hook = AlibabaCloudHook(conn_id)
    return register_dataset_version(
        hook,
        workspace_id=_workspace(register),
        name=register.get("name") or posixpath.basename(posixpath.dirname(path)),
        version_uri=_pai_uri(register, path, hook.region),
        data_source_type=DATA_SOURCE_TYPES[register.get("uri_kind") or "bmcpfs"],
        provider_type=register.get("provider_type"),
        mount_path=register.get("mount_path") or "/mnt/data",
        version_description=f"{staged.version}: {staged.files} files, {staged.bytes} bytes from "
        f"{staged.source_uri or 'the object store'}, checksum {staged.checksum[:16]}",
    )


def _volume(register: dict[str, Any], version: str, path: str) -> dict[str, Any]:
    """Arguments of the version's PV and claim."""
    from aliyun_training.staging.volumes import version_volume_name

    dataset = register.get("dataset") or posixpath.basename(posixpath.dirname(path))
    return {
        "namespace": register.get("namespace") or "default",
        "name": version_volume_name(dataset, version),
        "kind": register.get("volume_kind") or "cpfs",
        "path": path,
        **{k: register.get(k) for k in ("server", "file_system_id", "vsc_mount_target", "vpc_mount_target")},
    }
