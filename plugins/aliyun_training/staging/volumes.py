"""A static CPFS PersistentVolume + claim for one staged dataset version, so ACK jobs mount exactly it.

After a version is staged onto CPFS, training pods on ACK mount its directory through a claim of
its own (``StagedDataset.pvc``). The objects follow ACK's documented static-volume manifests
(reference sheet "CPFS on ACK"):

- ``cpfs``: CPFS general-purpose through its NFS protocol service. CSI driver
  ``nasplugin.csi.alibabacloud.com``, ``volumeHandle`` = the PV's name, ``volumeAttributes``
  ``{mountProtocol: cpfs-nfs, server, path}``, mount options
  ``rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport`` and ``vers=3``. ``volumeAs:
  subpath`` is a StorageClass parameter of dynamic provisioning and is not set on a static PV.
  The protocol service exports the file system under ``/share``, so ``path`` starts with it.
- ``bmcpfs``: CPFS for Lingjun. CSI driver ``bmcpfsplugin.csi.alibabacloud.com``, ``volumeHandle``
  = ``<file system id>+<path>``, ``volumeAttributes`` ``{vscMountTarget, vpcMountTarget, path}``
  (VSC for Lingjun nodes, VPC for other nodes; at least one). Kubernetes keys a volume by its
  handle (the attacher names the VolumeAttachment ``csi-<sha256(handle + driver + node)>``, the
  kubelet a volume ``<driver>^<handle>``), so every PV needs its own; the driver attaches the file
  system named before the ``+`` (kubernetes-sigs/alibaba-cloud-csi-driver pkg/bmcpfs
  ``parseVolumeHandle``) and mounts ``<mount target>:<path>`` from ``volumeAttributes.path``, which
  therefore stays. (ACK's and the driver's static examples name the bare file system id: right for
  one PV per file system, not for one per version.) PVs made before handles were unique are
  reported as conflicts, not reused. Unverified: on VSC nodes the driver's
  ControllerUnpublishVolume passes the whole handle to the VSC detach, which its own comment says
  errors for a ``+`` handle unless the NAS API answers a code it ignores or the plugin runs with
  ``SKIP_BMCPFS_DETACH``; a VolumeAttachment left behind could hold up the next pod on that node
  mounting the same version.

Both: the PV carries the label ``alicloud-pvname: <name>`` and the claim binds by a selector on
it (and by ``volumeName``, so no other volume can ever satisfy it); the PV is pre-bound to the
claim by ``claimRef``, ``storageClassName`` is ``""`` on both (else the cluster's default class
would be written into the claim and it would never bind), and ``persistentVolumeReclaimPolicy`` is
``Retain``: deleting the claim never deletes data.

Access mode: ``ReadWriteMany``, as ACK documents both drivers. Kubernetes does not enforce access
modes on mounts (and the Lingjun driver ignores read-only requests), so read-only consumption is
enforced where it works for every driver: the training pod's ``volumeMounts[].readOnly``, which the
arena backend sets from ``DatasetMount.read_only`` (True by default). ``access_mode`` can still
be set to ``ReadOnlyMany``.

Idempotent: an existing PV/claim with the same spec is reused; one with a different spec (another
path, server or file system) is never overwritten: :class:`VolumeConflictError` names it and the fix.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aliyun_training.kubernetes.names import (
    LABEL_MAX,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    is_dns_label,
    readable_part,
    stable_name,
)
from aliyun_training.kubernetes.pods import read_or_none
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

VolumeKind = Literal["cpfs", "bmcpfs"]
AccessMode = Literal["ReadWriteMany", "ReadOnlyMany"]

CPFS_DRIVER = "nasplugin.csi.alibabacloud.com"
BMCPFS_DRIVER = "bmcpfsplugin.csi.alibabacloud.com"
#: Mount options ACK documents for CPFS general-purpose over NFS (one option string per entry).
CPFS_MOUNT_OPTIONS = ["rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport", "vers=3"]
#: The label ACK's examples bind static claims by.
PV_NAME_LABEL = "alicloud-pvname"
#: Separates the file system id from the rest of a Lingjun CPFS volume handle (the driver's
#: ``volumeHandleDelimiter``).
BMCPFS_HANDLE_DELIMITER = "+"
#: CPFS general-purpose exports the file system under this directory over NFS.
CPFS_NFS_EXPORT = "/share"
DEFAULT_CAPACITY = "1Ti"


class VolumeConflictError(RuntimeError):
    """A PV or claim of that name exists with another spec; it is never overwritten."""


def version_volume_name(dataset: str, version: str) -> str:
    """The PV and claim name of one dataset version: ``<dataset>-<version>``, a DNS-1123 label.

    Lowercased with anything else than ``[a-z0-9-]`` turned into ``-``; when that changed the
    name or it is over 63 characters, a hash of the exact (dataset, version) is appended, so
    ``v1.0`` and ``v1-0`` never share a volume.
    """
    raw = f"{dataset}-{version}"
    readable = readable_part(raw) or "dataset"
    if readable == raw and len(readable) <= LABEL_MAX:
        return readable
    return stable_name(readable, f"{dataset}\n{version}")


def build_volume(
    *,
    namespace: str,
    name: str,
    kind: VolumeKind,
    path: str,
    capacity: str = DEFAULT_CAPACITY,
    server: str | None = None,
    file_system_id: str | None = None,
    vsc_mount_target: str | None = None,
    vpc_mount_target: str | None = None,
    access_mode: AccessMode = "ReadWriteMany",
    labels: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The static PV and its claim (both named ``name``) for the directory ``path`` of a CPFS file system.

    ``cpfs`` needs ``server`` (the protocol service's mount target domain); ``bmcpfs`` needs
    ``file_system_id`` and ``vsc_mount_target`` and/or ``vpc_mount_target``. Raises SpecError
    naming the bad argument.
    """
    _check(name, kind, path, server, file_system_id, vsc_mount_target, vpc_mount_target)
    csi: dict[str, Any]
    if kind == "cpfs":
        csi = {
            "driver": CPFS_DRIVER,
            "volumeHandle": name,
            "volumeAttributes": {"mountProtocol": "cpfs-nfs", "server": server, "path": path},
        }
    else:
        targets = {"vscMountTarget": vsc_mount_target, "vpcMountTarget": vpc_mount_target}
        csi = {
            "driver": BMCPFS_DRIVER,
            "volumeHandle": bmcpfs_volume_handle(file_system_id or "", path),
            "volumeAttributes": {**{k: v for k, v in targets.items() if v}, "path": path},
        }
    common_labels = {**(labels or {}), MANAGED_BY_LABEL: MANAGED_BY}
    pv_spec: dict[str, Any] = {
        "capacity": {"storage": capacity},
        "accessModes": [access_mode],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "volumeMode": "Filesystem",
        "claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": name,
        },
        "csi": csi,
    }
    if kind == "cpfs":
        pv_spec["mountOptions"] = list(CPFS_MOUNT_OPTIONS)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {**common_labels, PV_NAME_LABEL: name}},
        "spec": pv_spec,
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": common_labels},
        "spec": {
            "accessModes": [access_mode],
            "resources": {"requests": {"storage": capacity}},
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "selector": {"matchLabels": {PV_NAME_LABEL: name}},
            "volumeName": name,
        },
    }
    return pv, pvc


def bmcpfs_volume_handle(file_system_id: str, path: str) -> str:
    """``<file system id>+<path>``: unique per directory; the driver attaches the file system named
    before the first ``+`` whatever follows it (a ``+`` in the path included)."""
    return f"{file_system_id}{BMCPFS_HANDLE_DELIMITER}{path}"


def ensure_version_volume(hook_or_conn_id: Any, *, wait_seconds: float = 15.0, **volume: Any) -> str:
    """Create the version's PV and claim unless they exist with this spec; return the claim name.

    ``volume`` are :func:`build_volume`'s arguments. ``hook_or_conn_id`` is a cncf
    ``KubernetesHook`` or its connection id. Waits up to ``wait_seconds`` for the claim to be Bound
    and logs its phase; a claim still Pending then is logged, not raised (the ACK preflight check
    reports an unbound dataset claim before training).
    """
    pv, pvc = build_volume(**volume)
    name, namespace, kind, path = (volume[key] for key in ("name", "namespace", "kind", "path"))
    hook = _as_hook(hook_or_conn_id)
    core = hook.core_v1_client
    objects = [
        _Object(
            "PersistentVolume",
            pv,
            _PV_FIELDS,
            read=lambda: core.read_persistent_volume(name),
            create=lambda: core.create_persistent_volume(pv),
        ),
        _Object(
            "PersistentVolumeClaim",
            pvc,
            _PVC_FIELDS,
            read=lambda: core.read_namespaced_persistent_volume_claim(name, namespace),
            create=lambda: core.create_namespaced_persistent_volume_claim(namespace, pvc),
        ),
    ]
    # Both are checked before either is created: a conflict leaves the cluster as it was.
    missing = [obj for obj in objects if not obj.matches_existing(hook)]
    for obj in missing:
        obj.create_or_match(hook)
    phase = _wait_bound(hook, namespace, name, wait_seconds)
    if phase == "Bound":
        log.info("Claim %s/%s is Bound to PersistentVolume %s (%s %s)", namespace, name, name, kind, path)
    else:
        log.warning(
            "Claim %s/%s is %s after %.0f s, not Bound: check `kubectl describe pvc -n %s %s` (is the %s "
            "CSI plugin installed, and does PersistentVolume %s show an error?)",
            namespace,
            name,
            phase or "unknown",
            wait_seconds,
            namespace,
            name,
            CPFS_DRIVER if kind == "cpfs" else BMCPFS_DRIVER,
            name,
        )
    return name


# -- checks ---------------------------------------------------------------------------------------


def _check(
    name: str,
    kind: str,
    path: str,
    server: str | None,
    file_system_id: str | None,
    vsc_mount_target: str | None,
    vpc_mount_target: str | None,
) -> None:
    if not is_dns_label(name):
        raise SpecError(
            f"name: {name!r} is not a DNS-1123 label of at most 63 characters "
            "(fix: use version_volume_name(dataset, version))"
        )
    if not path.startswith("/") or "/../" in f"{path}/" or "//" in path:
        raise SpecError(
            f"path: {path!r} must be an absolute directory path without '..' (fix: e.g. /share/x)"
        )
    if kind == "cpfs":
        if not server or "/" in server or ":" in server:
            raise SpecError(
                f"server: {server!r} is not a CPFS mount target domain "
                "(fix: give the protocol service's mount target, e.g. cpfs-xxxx.<region>.cpfs.aliyuncs.com)"
            )
        if path != CPFS_NFS_EXPORT and not path.startswith(CPFS_NFS_EXPORT + "/"):
            raise SpecError(
                f"path: {path!r} is outside {CPFS_NFS_EXPORT} (fix: CPFS general-purpose exports the file "
                f"system over NFS under {CPFS_NFS_EXPORT}; use {CPFS_NFS_EXPORT}/<dir>)"
            )
    elif kind == "bmcpfs":
        if not file_system_id or not file_system_id.startswith("bmcpfs-"):
            raise SpecError(
                f"file_system_id: {file_system_id!r} is not a CPFS for Lingjun file system id "
                "(fix: give its id, e.g. bmcpfs-0123456789abcdef)"
            )
        if not (vsc_mount_target or vpc_mount_target):
            raise SpecError(
                "vsc_mount_target: a CPFS for Lingjun volume needs a mount target (fix: set "
                "vsc_mount_target for Lingjun nodes and/or vpc_mount_target for other nodes)"
            )
    else:
        raise SpecError(f"kind: {kind!r} is not a CPFS kind (fix: use cpfs or bmcpfs)")


# -- idempotent create ----------------------------------------------------------------------------

#: Fields of the objects this module owns; anything else (status, server defaults) is not compared.
_PV_FIELDS = (
    ("metadata", "labels", PV_NAME_LABEL),
    ("spec", "capacity", "storage"),
    ("spec", "accessModes"),
    ("spec", "persistentVolumeReclaimPolicy"),
    ("spec", "storageClassName"),
    ("spec", "claimRef", "namespace"),
    ("spec", "claimRef", "name"),
    ("spec", "csi", "driver"),
    ("spec", "csi", "volumeHandle"),
    ("spec", "csi", "volumeAttributes"),
    ("spec", "mountOptions"),
)
_PVC_FIELDS = (
    ("spec", "accessModes"),
    ("spec", "resources", "requests", "storage"),
    ("spec", "storageClassName"),
    ("spec", "selector"),
    ("spec", "volumeName"),
)


@dataclass(frozen=True)
class _Object:
    """One object this module owns: what it should be, and how to read and create it."""

    kind: str
    wanted: dict[str, Any]
    fields: tuple[tuple[str, ...], ...]
    read: Callable[[], Any]
    create: Callable[[], Any]

    @property
    def name(self) -> str:
        return self.wanted["metadata"]["name"]

    @property
    def where(self) -> str:
        namespace = self.wanted["metadata"].get("namespace")
        return f"{self.kind} {self.name}" + (f" in namespace {namespace}" if namespace else "")

    def matches_existing(self, hook: Any) -> bool:
        """True when it exists with this spec; False when it does not exist; raises on another spec."""
        existing = _read(hook, self.read)
        if existing is None:
            return False
        self._check(existing)
        log.info("%s already exists with this spec: reusing it", self.where)
        return True

    def create_or_match(self, hook: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.create()
        except ApiException as exc:
            if exc.status != 409 or not self.matches_existing(hook):  # created concurrently?
                raise
            return
        log.info("Created %s", self.where)

    def _check(self, existing: dict[str, Any]) -> None:
        differences = _differences(self.wanted, existing, self.fields)
        if not differences:
            return
        namespace = self.wanted["metadata"].get("namespace")
        claim = self.wanted["spec"].get("claimRef") or {}
        command = (
            f"kubectl delete pvc -n {namespace} {self.name}"
            if namespace
            # The PV is pre-bound to its claim: deleting the PV alone waits for the claim to go.
            else f"kubectl delete pvc -n {claim.get('namespace')} {claim.get('name')} && kubectl delete pv "
            f"{self.name}"
        )
        raise VolumeConflictError(
            f"{self.where} already exists with another spec: {'; '.join(differences)} "
            f"(fix: it is never overwritten, as it may hold another version's data; if it is stale, "
            f"delete it with `{command}`, else stage under another dataset or version name)"
        )


def _read(hook: Any, read: Callable[[], Any]) -> dict[str, Any] | None:
    """The object as JSON (what ``build_volume`` writes is compared with it), None when missing."""
    existing = read_or_none(read)
    return None if existing is None else hook.api_client.sanitize_for_serialization(existing)


def _differences(
    wanted: dict[str, Any], existing: dict[str, Any], fields: tuple[tuple[str, ...], ...]
) -> list[str]:
    return [
        f"{'.'.join(path)} is {_dig(existing, path)!r}, not {_dig(wanted, path)!r}"
        for path in fields
        if not _same(path[-1], _dig(wanted, path), _dig(existing, path))
    ]


def _same(field: str, want: Any, have: Any) -> bool:
    """Equal as the server means it: quantities by value, an absent class as the empty one."""
    from kubernetes.utils import parse_quantity

    if field == "storage" and want is not None and have is not None:
        return parse_quantity(want) == parse_quantity(have)
    if field == "storageClassName":
        return (want or "") == (have or "")
    return want == have


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _wait_bound(hook: Any, namespace: str, name: str, seconds: float) -> str | None:
    deadline = time.monotonic() + seconds
    while True:
        claim = hook.core_v1_client.read_namespaced_persistent_volume_claim(name, namespace)
        phase = claim.status.phase if claim.status else None
        if phase == "Bound" or time.monotonic() >= deadline:
            return phase
        time.sleep(0.2)


def _as_hook(hook_or_conn_id: Any) -> Any:
    if isinstance(hook_or_conn_id, str):
        from aliyun_training.hooks.kubernetes import KubernetesHooks

        return KubernetesHooks(hook_or_conn_id).sync
    return hook_or_conn_id
