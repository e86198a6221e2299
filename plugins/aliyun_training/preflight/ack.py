"""Checks for the ACK backend: every PVC a job mounts (datasets, outputs) exists and is bound."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aliyun_training.backends.ack.request import claim_name
from aliyun_training.findings import Finding, Verdict

if TYPE_CHECKING:
    from aliyun_training.backends.ack.backend import AckBackend
    from aliyun_training.spec import TrainingJobSpec


def check_dataset_pvcs(backend: AckBackend, spec: TrainingJobSpec) -> list[Finding]:
    """A missing or unbound PVC leaves every pod Pending; say so before the job is created."""
    from kubernetes.client.exceptions import ApiException

    from aliyun_training.hooks.kubernetes import KubernetesHooks

    namespace = backend.settings.namespace
    core = KubernetesHooks(backend.settings.kubernetes_conn_id).sync.core_v1_client
    findings = []
    for mount in spec.datasets:
        claim = claim_name(mount.uri, backend.settings)
        where = f"PVC {namespace}/{claim}"
        # The only read-write mount is the OSS-backed output claim; the rest hold datasets on CPFS.
        volume, setting = ("OSS", "output_pvc") if not mount.read_only else ("CPFS", "data_pvc")
        try:
            phase = core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase
        except ApiException as exc:
            fix = (
                f"create the {volume} PV and PVC (see the ACK + {volume} guide) or fix {setting}"
                if exc.status == 404
                else "let the kubernetes connection's identity read PVCs in the namespace"
            )
            findings.append(
                Finding(check="pvc", verdict=Verdict.FAIL, found=f"{where}: {exc.reason}", fix=fix)
            )
            continue
        verdict = Verdict.PASS if phase == "Bound" else Verdict.FAIL
        fix = "" if phase == "Bound" else f"bind the PVC to its {volume} PV (check the PV's selector label)"
        findings.append(Finding(check="pvc", verdict=verdict, found=f"{where} is {phase}", fix=fix))
    return findings
