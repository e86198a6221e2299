"""Make a staged version mountable by the training job: a PAI dataset version, or a PV and PVC.

The run plan's staging part carries one of the registrations defined here, which picks the kind:

- :class:`PaiDatasetRegistration`: DLC mounts ``DataSources[{DataSourceId, DataSourceVersion}]``;
  the version's URI is ``bmcpfs://`` (CPFS for Lingjun) or ``cpfs://`` (CPFS 2.0);
- :class:`PvcRegistration`: ACK mounts a claim whose volume is exactly the version's directory.

``cpfs_path`` is the directory that holds the versions *inside the file system* (the stager may
see it under a mount point, e.g. ``/mnt/cpfs`` + ``cpfs_path``); the version lives at
``<cpfs_path>/<version>``. Both registrations are idempotent: re-running finds what exists.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from aliyun_training.stage_records import StagedDataset

DATA_SOURCE_TYPES = {"cpfs": "CPFS", "bmcpfs": "BMCPFS"}


class PaiDatasetRegistration(BaseModel):
    """Register a staged version as a PAI dataset version, which a DLC job mounts by id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pai_dataset"] = "pai_dataset"
    workspace_id: str
    name: str
    uri_kind: Literal["bmcpfs", "cpfs"] = "bmcpfs"
    file_system_id: str | None = None
    mount_target: str | None = None
    protocol_service_id: str | None = None
    export_id: str | None = None
    #: The directory holding the versions inside the file system.
    cpfs_path: str
    provider_type: Literal["Lingjun", "Ecs"] = "Lingjun"
    mount_path: str
    #: The region the PAI dataset's CPFS URI names; None: the connection's.
    region: str | None = None
    #: The deployment that registers the version: a label of the dataset and the versions it creates.
    installation: str | None = None


class PvcRegistration(BaseModel):
    """Register a staged version as a static PV and PVC whose volume is exactly its directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pvc"] = "pvc"
    kubernetes_conn_id: str
    namespace: str
    dataset: str
    volume_kind: Literal["cpfs", "bmcpfs"] = "cpfs"
    cpfs_path: str
    server: str | None = None
    file_system_id: str | None = None
    vpc_mount_target: str | None = None
    vsc_mount_target: str | None = None
    #: The deployment that creates the PV and claim, labelled on both (``INSTALLATION_LABEL``). A
    #: version's volume is shared data: another deployment staging the same version into the same
    #: directory uses it as it is (both are read-only mounts of one directory), never deletes it.
    installation: str | None = None


Registration = Annotated[PaiDatasetRegistration | PvcRegistration, Field(discriminator="kind")]


def register_staged(staged: StagedDataset, register: Registration, conn_id: str) -> StagedDataset:
    """``staged`` plus the ids a training job mounts it by; ``conn_id`` is the alibaba_cloud connection."""
    path = _version_path(register, staged.version)
    if isinstance(register, PaiDatasetRegistration):
        dataset_id, version = _register_pai_dataset(staged, register, path, conn_id)
        return staged.model_copy(update={"pai_dataset_id": dataset_id, "pai_dataset_version": version})
    from aliyun_training.staging.volumes import ensure_version_volume

    claim = ensure_version_volume(register.kubernetes_conn_id, **volume_arguments(register, staged.version))
    return staged.model_copy(update={"pvc": claim})


def check_registration(register: Registration, version: str) -> None:
    """Raise the SpecError registering would raise, without calling any API: run it before staging."""
    if isinstance(register, PaiDatasetRegistration):
        pai_dataset_uri(register, _version_path(register, version), register.region or "")
    else:
        from aliyun_training.staging.volumes import build_volume

        build_volume(**volume_arguments(register, version))


def _version_path(register: Registration, version: str) -> str:
    return posixpath.join(posixpath.normpath(register.cpfs_path), version)


def pai_dataset_uri(register: PaiDatasetRegistration, path: str, region: str) -> str:
    """The CPFS URI of the version at ``path`` that the PAI dataset version points at."""
    from aliyun_training.staging.pai_dataset import dataset_uri

    return dataset_uri(
        register.uri_kind,
        file_system_id=register.file_system_id or "",
        region=region,
        path=path,
        mount_target=register.mount_target,
        protocol_service_id=register.protocol_service_id,
        export_id=register.export_id,
    )


def _register_pai_dataset(
    staged: StagedDataset, register: PaiDatasetRegistration, path: str, conn_id: str
) -> tuple[str, str]:
    from aliyun_training.hooks.aiworkspace import AIWorkspaceHook
    from aliyun_training.staging.pai_dataset import register_dataset_version

    # The workspace's region: the environment's, else the connection's.
    hook = AIWorkspaceHook(conn_id, region=register.region)
    return register_dataset_version(
        hook,
        workspace_id=register.workspace_id,
        name=register.name,
        version_uri=pai_dataset_uri(register, path, hook.region),
        data_source_type=DATA_SOURCE_TYPES[register.uri_kind],
        provider_type=register.provider_type,
        mount_path=register.mount_path,
        version_description=f"{staged.version}: {staged.files} files, {staged.bytes} bytes from "
        f"{staged.source_uri or 'the object store'}, checksum {staged.checksum[:16]}",
        labels=installation_labels(register.installation),
        version_labels=installation_labels(register.installation),
    )


def installation_labels(installation: str | None) -> dict[str, str]:
    """The label naming the deployment on a PAI dataset and its versions (the owner tag's key)."""
    from aliyun_training.spec import JobOwner

    return {JobOwner.tag_key("installation"): installation} if installation else {}


def volume_arguments(register: PvcRegistration, version: str) -> dict[str, Any]:
    """Arguments of the version's PV and claim."""
    from aliyun_training.kubernetes.names import INSTALLATION_LABEL
    from aliyun_training.staging.volumes import version_volume_name

    return {
        "labels": {INSTALLATION_LABEL: register.installation} if register.installation else None,
        "namespace": register.namespace,
        "name": version_volume_name(register.dataset, version),
        "kind": register.volume_kind,
        "path": _version_path(register, version),
        **register.model_dump(include={"server", "file_system_id", "vsc_mount_target", "vpc_mount_target"}),
    }
