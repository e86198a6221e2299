"""The cncf.kubernetes hooks of one connection, built on first use and then kept."""

from __future__ import annotations

from functools import cached_property
from typing import Any


class KubernetesHooks:
    """The sync ``KubernetesHook`` and the async ``AsyncKubernetesHook`` of ``conn_id``.

    Each is built on first use, so an owner built where no cluster is reachable (a DAG parse, the
    scheduler) costs nothing, and then kept, so the connection is read and the kubeconfig loaded
    once per owner rather than once per API call.
    """

    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id

    @cached_property
    def sync(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=self.conn_id)

    @cached_property
    def asynchronous(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        return AsyncKubernetesHook(conn_id=self.conn_id)
