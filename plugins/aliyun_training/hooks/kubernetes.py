"""The cncf.kubernetes hooks of one connection, and reading a Kubernetes list in pages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any

from aliyun_training.hooks.paging import TokenPage, atoken_pages, token_pages

#: Items asked for per list request: kubectl's default ``--chunk-size``. A list without ``limit``
#: makes the API server build the whole answer in memory at once; paging keeps it bounded.
LIST_PAGE_SIZE = 500


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


def list_all(list_call: Callable[..., Any], *args: Any, **query: Any) -> list[Any]:
    """Every item of ``list_call(*args, **query)`` (a sync client's ``list_*``), page by page."""

    def fetch(token: str | None) -> TokenPage[Any]:
        return _page(list_call(*args, **_paged(query, token)))

    return list(token_pages(fetch))


async def alist_all(list_call: Callable[..., Awaitable[Any]], *args: Any, **query: Any) -> list[Any]:
    """``list_all`` for kubernetes_asyncio: the same pages, each request awaited."""

    async def fetch(token: str | None) -> TokenPage[Any]:
        return _page(await list_call(*args, **_paged(query, token)))

    return [item async for item in atoken_pages(fetch)]


def _paged(query: dict[str, Any], token: str | None) -> dict[str, Any]:
    """One page's request (Kubernetes "API Concepts: Retrieving large results sets in chunks"):
    ``limit``, then the ``continue`` token of the previous answer. Both clients take it as
    ``_continue`` and return it as ``metadata._continue``; the listing ends when it comes back empty."""
    return {**query, "limit": LIST_PAGE_SIZE, **({"_continue": token} if token else {})}


def _page(listed: Any) -> TokenPage[Any]:
    return listed.items or [], listed.metadata._continue if listed.metadata else None
