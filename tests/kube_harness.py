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
