"""hooks.kubernetes: Kubernetes lists read page by page, and a connection that gives no cluster named
with its fix. (The hooks' credential reloading is driven against the Kubernetes API fake in
tests/integration/test_ack_recovery.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from aliyun_training.hooks.kubernetes import (
    LIST_PAGE_SIZE,
    KubernetesConnectionError,
    KubernetesHooks,
    alist_all,
    list_all,
)


class PagedList:
    """A list call answering ``pages`` in turn, each with the next page's token; it records each query."""

    def __init__(self, pages: list[tuple[list[str], str | None]], as_json: bool = False) -> None:
        self.pages = pages
        self.as_json = as_json
        self.queries: list[dict[str, Any]] = []

    def __call__(self, namespace: str, **query: Any) -> Any:
        assert namespace == "training"
        self.queries.append(query)
        items, token = self.pages[len(self.queries) - 1]
        if self.as_json:  # the custom objects API answers JSON: metadata.continue
            return {"items": items, "metadata": {"continue": token} if token else {}}
        return client.V1PodList(items=items, metadata=client.V1ListMeta(_continue=token))


PAGES: list[tuple[list[str], str | None]] = [
    (["pod-1", "pod-2"], "token-1"),
    (["pod-3"], "token-2"),
    ([], None),
]


@pytest.mark.parametrize("as_json", [False, True], ids=["model", "custom-objects-json"])
def test_every_item_is_read_in_pages_each_asking_for_the_next_with_the_last_token(as_json: bool) -> None:
    list_pods = PagedList(PAGES, as_json)

    items = list_all(list_pods, "training", label_selector="app=stage")

    assert items == ["pod-1", "pod-2", "pod-3"]
    assert list_pods.queries == [
        {"label_selector": "app=stage", "limit": LIST_PAGE_SIZE},
        {"label_selector": "app=stage", "limit": LIST_PAGE_SIZE, "_continue": "token-1"},
        {"label_selector": "app=stage", "limit": LIST_PAGE_SIZE, "_continue": "token-2"},
    ]
    assert LIST_PAGE_SIZE == 500, "kubectl's default chunk size"


async def test_the_async_listing_reads_the_same_pages() -> None:
    list_pods = PagedList(PAGES)

    async def alist_pods(namespace: str, **query: Any) -> Any:
        return list_pods(namespace, **query)

    assert await alist_all(alist_pods, "training") == ["pod-1", "pod-2", "pod-3"]
    assert [query.get("_continue") for query in list_pods.queries] == [None, "token-1", "token-2"]


def test_a_connection_that_is_not_defined_is_named_with_how_to_define_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_B_CLUSTER", raising=False)
    hooks = KubernetesHooks("team_b_cluster")  # building the owner reads nothing

    with pytest.raises(KubernetesConnectionError) as refused:
        hooks.sync.get_conn()

    assert str(refused.value) == (
        "connection 'team_b_cluster' gives no cluster: it is not defined (fix: add it in Admin > "
        "Connections with the type 'Kubernetes Cluster Connection' and the ACK cluster's kubeconfig, or as "
        "the environment variable AIRFLOW_CONN_TEAM_B_CLUSTER, or name another connection in the "
        "environment file's kubernetes_conn_id)"
    )
