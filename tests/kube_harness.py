"""A Kubernetes connection pointed at the Kubernetes API fake, for the tests that drive the cncf hooks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from tests.emulators.base import ManualClock
from tests.emulators.kubernetes_fake import KubernetesFake

NS = "training"
CONN_ID = "kubernetes_default"


@contextmanager
def kubernetes_fake(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock: ManualClock | None = None,
    *,
    conn_id: str = CONN_ID,
) -> Iterator[KubernetesFake]:
    """A KubernetesFake (on ``clock``, where given) that connection ``conn_id`` points at, namespace NS.

    On leaving, the fake must have answered every request without an internal error.
    """
    with KubernetesFake() as server:
        if clock is not None:
            server.clock = clock
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig.yaml")
        extra = {"kube_config_path": str(kubeconfig), "namespace": NS}
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
        )
        # The hook loads the kubeconfig into the default configuration: restore it afterwards.
        monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
        yield server
        assert server.internal_errors == []


def core(conn_id: str = CONN_ID) -> client.CoreV1Api:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=conn_id).core_v1_client


def kube_configuration(kubeconfig: Path) -> client.Configuration:
    """A client configuration from ``kubeconfig``, leaving the default configuration alone."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return configuration


def cpfs_volume(name: str) -> dict:
    """A static CPFS (general-purpose) PV as the ACK + CPFS guide creates it."""
    attributes = {
        "mountProtocol": "cpfs-nfs",
        "server": "cpfs-0123.cn-wulanchabu.cpfs.aliyuncs.com",
        "path": "/share",
        "volumeAs": "subpath",
    }
    return _static_volume(name, "nasplugin.csi.alibabacloud.com", attributes)


def oss_volume(name: str, uri: str, region: str = "cn-wulanchabu") -> dict:
    """A static OSS PV as the ACK OSS CSI guide creates it, for the bucket and path of ``uri``."""
    bucket, _, path = uri.removeprefix("oss://").partition("/")
    attributes = {
        "bucket": bucket,
        "url": f"oss-{region}-internal.aliyuncs.com",
        "path": f"/{path}",
        "otherOpts": "-o max_stat_cache_size=0 -o allow_other",
    }
    return _static_volume(name, "ossplugin.csi.alibabacloud.com", attributes)


def _static_volume(name: str, driver: str, attributes: dict[str, str]) -> dict:
    """A PV of ``driver`` labelled so that the claim of the same name binds to it."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"alicloud-pvname": name}},
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteMany"],
            "csi": {"driver": driver, "volumeHandle": name, "volumeAttributes": attributes},
        },
    }


def bound_claim(name: str) -> dict:
    """A PVC that binds to the PV of the same name through its alicloud-pvname label."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Ti"}},
            "selector": {"matchLabels": {"alicloud-pvname": name}},
            "storageClassName": "",
        },
    }
