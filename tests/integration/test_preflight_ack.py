"""preflight.ack: every PVC an ACK job mounts must exist and be bound, or each one says what to do.

The cluster is the in-process Kubernetes API fake, reached through ``kubernetes_default``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from aliyun_training.backends import get_backend
from aliyun_training.findings import Finding, Verdict
from aliyun_training.preflight.ack import check_dataset_pvcs
from aliyun_training.spec import TrainingJobSpec
from fakes.cloud import arena_job
from fakes.kube import NS, core, kubernetes_fake

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from fakes.kubernetes_fake import KubernetesFake


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch) as fake:
        yield fake


def claim(name: str, access: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": [access],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Ti"}},
        },
    }


def test_each_mounted_pvc_passes_when_bound_and_fails_with_its_fix_when_missing_or_pending(
    kube: KubernetesFake,
) -> None:
    api = core()
    api.create_persistent_volume(
        {
            "metadata": {"name": "cpfs-train"},
            "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadOnlyMany"], "storageClassName": ""},
        }
    )
    api.create_namespaced_persistent_volume_claim(NS, claim("cpfs-train", "ReadOnlyMany"))
    api.create_namespaced_persistent_volume_claim(NS, claim("oss-outputs", "ReadWriteMany"))  # no PV for it
    kube.reconcile()  # the PV controller binds what fits
    spec = TrainingJobSpec.parse(
        arena_job(
            command="torchrun train.py",
            datasets=[
                {"uri": "pvc://cpfs-train", "mount_path": "/mnt/data"},
                {"uri": "pvc://cpfs-raw", "mount_path": "/mnt/raw"},
                {"uri": "pvc://oss-outputs", "mount_path": "/mnt/output", "read_only": False},
            ],
        )
    )

    findings = check_dataset_pvcs(get_backend("arena", {"namespace": NS}), spec)  # type: ignore[arg-type]

    assert findings == [
        Finding(check="pvc", verdict=Verdict.PASS, found=f"PVC {NS}/cpfs-train is Bound"),
        Finding(
            check="pvc",
            verdict=Verdict.FAIL,
            found=f"PVC {NS}/cpfs-raw: Not Found",
            fix="create the CPFS PV and PVC (see the ACK + CPFS guide) or fix data_pvc",
        ),
        Finding(
            check="pvc",
            verdict=Verdict.FAIL,
            found=f"PVC {NS}/oss-outputs is Pending",
            fix="bind the PVC to its OSS PV (check the PV's selector label)",
        ),
    ]
