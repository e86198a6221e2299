"""Static CPFS PV + claim per staged dataset version: exact objects, names, idempotent creation."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.staging.volumes import (
    VolumeConflictError,
    build_volume,
    ensure_version_volume,
    version_volume_name,
)
from aliyun_training.validation import SpecError
from fakes.base import ManualClock
from fakes.kube import CONN_ID, NS, core, kubernetes_fake
from fakes.kubernetes_fake import KubernetesFake, TrainingScript, volume_attachment_name

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SERVER = "cpfs-0123abcd-xyz.cn-wulanchabu.cpfs.aliyuncs.com"
CPFS = {"kind": "cpfs", "server": SERVER, "path": "/share/datasets/cifar10/2026-11-22"}
BMCPFS = {
    "kind": "bmcpfs",
    "file_system_id": "bmcpfs-0123456789abcdef",
    "vsc_mount_target": "cpfs-0123-vsc-abc.cn-wulanchabu.fss.aliyuncs.com",
    "vpc_mount_target": "cpfs-0123-vpc-abc.cn-wulanchabu.cpfs.aliyuncs.com",
    "path": "/datasets/cifar10/2026-11-22",
}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch) as server:
        yield server


def test_cpfs_general_purpose_objects_are_acks_static_volume() -> None:
    pv, pvc = build_volume(namespace=NS, name="cifar10-2026-11-22", **CPFS)
    assert pv == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": "cifar10-2026-11-22",
            "labels": {
                "app.kubernetes.io/managed-by": "aliyun-training",
                "alicloud-pvname": "cifar10-2026-11-22",
            },
        },
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": NS,
                "name": "cifar10-2026-11-22",
            },
            "csi": {
                "driver": "nasplugin.csi.alibabacloud.com",
                "volumeHandle": "cifar10-2026-11-22",
                "volumeAttributes": {
                    "mountProtocol": "cpfs-nfs",
                    "server": SERVER,
                    "path": "/share/datasets/cifar10/2026-11-22",
                },
            },
            "mountOptions": ["rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport", "vers=3"],
        },
    }
    assert pvc == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "cifar10-2026-11-22",
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "aliyun-training"},
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Ti"}},
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "selector": {"matchLabels": {"alicloud-pvname": "cifar10-2026-11-22"}},
            "volumeName": "cifar10-2026-11-22",
        },
    }


def test_lingjun_cpfs_objects_address_the_file_system_and_directory_in_a_handle_of_their_own() -> None:
    pv, pvc = build_volume(
        namespace=NS,
        name="cifar10-v2",
        capacity="500Gi",
        access_mode="ReadOnlyMany",
        labels={"aliyun-training/dataset": "cifar10"},
        **BMCPFS,
    )
    # <file system id>+<path>: the driver attaches the file system before the "+", and Kubernetes
    # gets a handle unique to this version's PV; the mount still reads volumeAttributes.path.
    assert pv["spec"]["csi"] == {
        "driver": "bmcpfsplugin.csi.alibabacloud.com",
        "volumeHandle": "bmcpfs-0123456789abcdef+/datasets/cifar10/2026-11-22",
        "volumeAttributes": {
            "vscMountTarget": BMCPFS["vsc_mount_target"],
            "vpcMountTarget": BMCPFS["vpc_mount_target"],
            "path": "/datasets/cifar10/2026-11-22",
        },
    }
    assert "mountOptions" not in pv["spec"]
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pv["spec"]["capacity"] == {"storage": "500Gi"}
    assert pvc["spec"]["resources"] == {"requests": {"storage": "500Gi"}}
    assert pv["metadata"]["labels"] == {
        "aliyun-training/dataset": "cifar10",
        "app.kubernetes.io/managed-by": "aliyun-training",
        "alicloud-pvname": "cifar10-v2",
    }
    # Only the mount target for the node type in use is needed.
    pv, _ = build_volume(namespace=NS, name="x", **{**BMCPFS, "vsc_mount_target": None})
    assert pv["spec"]["csi"]["volumeAttributes"] == {
        "vpcMountTarget": BMCPFS["vpc_mount_target"],
        "path": BMCPFS["path"],
    }


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"path": "datasets/x"}, "path:"),
        ({"path": "/share/../etc"}, "path:"),
        ({"path": "/data/x"}, "path: '/data/x' is outside /share"),
        ({"server": None}, "server:"),
        ({"server": "http://cpfs.example.com"}, "server:"),
        ({"kind": "nas"}, "kind:"),
    ],
)
def test_bad_cpfs_arguments_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=re.escape(field)) as raised:
        build_volume(namespace=NS, name="v", **{**CPFS, **overrides})
    assert "fix:" in str(raised.value)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"file_system_id": "cpfs-123"}, "file_system_id:"),
        ({"vsc_mount_target": None, "vpc_mount_target": None}, "vsc_mount_target:"),
    ],
)
def test_bad_bmcpfs_arguments_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        build_volume(namespace=NS, name="v", **{**BMCPFS, **overrides})


def test_a_bad_name_is_refused() -> None:
    with pytest.raises(SpecError, match="name: 'Cifar_10' is not a DNS-1123 label"):
        build_volume(namespace=NS, name="Cifar_10", **CPFS)


def test_volume_names_are_dns_labels_with_a_hash_whenever_the_name_was_changed() -> None:
    assert version_volume_name("cifar10", "2026-11-22") == "cifar10-2026-11-22"
    dotted, dashed = version_volume_name("cifar10", "v1.0"), version_volume_name("cifar10", "v1-0")
    assert dashed == "cifar10-v1-0"
    assert re.fullmatch(r"cifar10-v1-0-[0-9a-f]{8}", dotted)
    assert re.fullmatch(r"imagenet-v2-[0-9a-f]{8}", version_volume_name("ImageNet", "V2"))
    long = version_volume_name("a-very-long-dataset-name-" * 3, "2026-11-22_rc1")
    assert len(long) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", long)
    assert long != version_volume_name("a-very-long-dataset-name-" * 3, "2026-11-22_rc2")
    assert version_volume_name("a-very-long-dataset-name-" * 3, "2026-11-22_rc1") == long


def test_ensure_creates_once_binds_and_then_reuses(fake: KubernetesFake) -> None:
    assert (
        ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-2026-11-22", **CPFS)
        == "cifar10-2026-11-22"
    )
    assert fake.count("POST", "/persistentvolumes") == 1
    assert fake.count("POST", "/persistentvolumeclaims") == 1
    sent = next(r.body for r in fake.requests if r.method == "POST" and r.path.endswith("/persistentvolumes"))
    assert sent == build_volume(namespace=NS, name="cifar10-2026-11-22", **CPFS)[0]
    claim = core().read_namespaced_persistent_volume_claim("cifar10-2026-11-22", NS)
    assert claim.status.phase == "Bound" and claim.spec.volume_name == "cifar10-2026-11-22"

    posts = fake.count("POST")
    assert (
        ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-2026-11-22", **CPFS)
        == "cifar10-2026-11-22"
    )
    assert fake.count("POST") == posts
    assert fake.count("PUT") == fake.count("PATCH") == fake.count("DELETE") == 0


def test_ensure_accepts_a_hook_and_creates_a_missing_claim_for_an_existing_volume(
    fake: KubernetesFake,
) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    hook = KubernetesHook(conn_id=CONN_ID)
    pv, _ = build_volume(namespace=NS, name="cifar10-v3", **BMCPFS)
    hook.core_v1_client.create_persistent_volume(pv)
    assert ensure_version_volume(hook, namespace=NS, name="cifar10-v3", **BMCPFS) == "cifar10-v3"
    assert fake.count("POST", "/persistentvolumes") == 1
    assert fake.count("POST", "/persistentvolumeclaims") == 1
    assert hook.core_v1_client.read_persistent_volume("cifar10-v3").status.phase == "Bound"


def test_an_existing_volume_with_another_path_is_never_overwritten(fake: KubernetesFake) -> None:
    ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-2026-11-22", **CPFS)
    with pytest.raises(VolumeConflictError) as raised:
        ensure_version_volume(
            CONN_ID, namespace=NS, name="cifar10-2026-11-22", **{**CPFS, "path": "/share/other"}
        )
    message = str(raised.value)
    assert "PersistentVolume cifar10-2026-11-22 already exists with another spec" in message
    assert "spec.csi.volumeAttributes" in message and "/share/other" in message
    assert f"kubectl delete pvc -n {NS} cifar10-2026-11-22 && kubectl delete pv cifar10-2026-11-22" in message
    assert fake.count("POST", "/persistentvolumes") == 1 and fake.count("PUT") == fake.count("PATCH") == 0
    volume = core().read_persistent_volume("cifar10-2026-11-22")
    assert volume.spec.csi.volume_attributes["path"] == CPFS["path"]


@pytest.mark.slow
def test_an_existing_claim_with_another_spec_is_reported(fake: KubernetesFake) -> None:
    _, pvc = build_volume(namespace=NS, name="cifar10-v4", **CPFS)
    pvc["spec"]["resources"]["requests"]["storage"] = "10Gi"
    pvc["spec"].pop("volumeName")
    core().create_namespaced_persistent_volume_claim(NS, pvc)
    with pytest.raises(VolumeConflictError) as raised:
        ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-v4", **CPFS, wait_seconds=0)
    message = str(raised.value)
    assert f"PersistentVolumeClaim cifar10-v4 in namespace {NS} already exists" in message
    assert "spec.resources.requests.storage is '10Gi', not '1Ti'" in message
    assert "spec.volumeName is None, not 'cifar10-v4'" in message
    assert f"kubectl delete pvc -n {NS} cifar10-v4" in message
    assert fake.count("POST", "/persistentvolumes") == 0  # checked before anything is created


def test_the_same_capacity_written_differently_is_the_same_spec(fake: KubernetesFake) -> None:
    pv, _ = build_volume(namespace=NS, name="cifar10-v5", **CPFS)
    pv["spec"]["capacity"]["storage"] = "1024Gi"
    core().create_persistent_volume(pv)
    ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-v5", **CPFS)
    assert fake.count("POST", "/persistentvolumes") == 1


def test_a_lingjun_volume_made_with_the_bare_file_system_id_is_a_conflict_not_reused(
    fake: KubernetesFake,
) -> None:
    """A PV from before handles were unique per PV shares its handle with every other version."""
    old, old_claim = build_volume(namespace=NS, name="cifar10-v6", **BMCPFS)
    old["spec"]["csi"]["volumeHandle"] = BMCPFS["file_system_id"]
    core().create_persistent_volume(old)
    core().create_namespaced_persistent_volume_claim(NS, old_claim)
    posts = fake.count("POST")

    with pytest.raises(VolumeConflictError) as raised:
        ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-v6", **BMCPFS, wait_seconds=0)

    message = str(raised.value)
    assert "PersistentVolume cifar10-v6 already exists with another spec" in message
    assert (
        "spec.csi.volumeHandle is 'bmcpfs-0123456789abcdef', not "
        "'bmcpfs-0123456789abcdef+/datasets/cifar10/2026-11-22'"
    ) in message
    assert f"kubectl delete pvc -n {NS} cifar10-v6 && kubectl delete pv cifar10-v6" in message
    assert fake.count("POST") == posts and fake.count("PUT") == fake.count("PATCH") == 0


POD_ON_ONE_NODE = "fake-node-lingjun-0"


def _pod_mounting(name: str, claims: list[str]) -> dict[str, Any]:
    """A pod on one Lingjun node mounting ``claims`` (a job reading two versions of one file system)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": POD_ON_ONE_NODE,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1",
                    "volumeMounts": [{"name": c, "mountPath": f"/mnt/{c}"} for c in claims],
                }
            ],
            "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims],
        },
    }


def test_two_versions_of_one_lingjun_file_system_attach_side_by_side_on_a_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1_800_000_000.0)
    with kubernetes_fake(tmp_path, monkeypatch, clock) as fake:
        fake.script_for("reader", TrainingScript(phases=[("Created", 0.05), ("Running", 60.0)]))
        first = {**BMCPFS, "path": "/datasets/cifar10/v1"}
        second = {**BMCPFS, "path": "/datasets/cifar10/v2"}
        ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-v1", **first, wait_seconds=0)
        ensure_version_volume(CONN_ID, namespace=NS, name="cifar10-v2", **second, wait_seconds=0)
        core().create_namespaced_pod(NS, _pod_mounting("reader", ["cifar10-v1", "cifar10-v2"]))
        clock.advance(1)

        pod = core().read_namespaced_pod("reader", NS)
        assert pod.status.phase == "Running"
        driver = "bmcpfsplugin.csi.alibabacloud.com"
        handles = [f"{BMCPFS['file_system_id']}+{v['path']}" for v in (first, second)]
        assert {
            name: attachment["persistentVolumeName"] for name, attachment in fake.volume_attachments.items()
        } == {
            volume_attachment_name(handles[0], driver, POD_ON_ONE_NODE): "cifar10-v1",
            volume_attachment_name(handles[1], driver, POD_ON_ONE_NODE): "cifar10-v2",
        }
        events = core().list_namespaced_event(NS, field_selector="involvedObject.name=reader").items
        assert "FailedAttachVolume" not in [e.reason for e in events]
