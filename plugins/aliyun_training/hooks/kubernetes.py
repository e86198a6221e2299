"""The cncf.kubernetes hooks of one connection, and reading a Kubernetes list in pages.

A trigger waits on a training job for days through one hook, but the credentials the hook loaded
do not last that long: a projected service-account token is rotated by the kubelet and rejected
once it expires, and a kubeconfig ``exec`` plugin (ACK's, a cloud CLI) hands out short-lived tokens.
The provider's clients reload them only in some cases (the sync client's in-cluster loader every
minute, an exec token whose ``expirationTimestamp`` passed; the async hook loads a kubeconfig with
a token or ``tokenFile`` once). So the hooks here answer a 401 by loading the connection's
credentials again and repeating that one request: the API server authenticates a request before
anything else ("Controlling Access to the Kubernetes API": an unauthenticated request is rejected
with 401), so a request answered 401 changed nothing and is safe to send again.

Every request (a watch or a log stream is one, a repeat after a 401 another) first takes a token
from the connection's rate limiter, which every hook of that connection in the process shares
(``rate_limit.cluster_limiter``: 50 requests a second in bursts of 100 unless the
``api_rate_limits`` setting names another rate).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aliyun_training.connections import define_connection_fix
from aliyun_training.hooks.paging import TokenPage, atoken_pages, token_pages
from aliyun_training.hooks.rate_limit import cluster_limiter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger(__name__)

#: Items asked for per list request: kubectl's default ``--chunk-size``. A list without ``limit``
#: makes the API server build the whole answer in memory at once; paging keeps it bounded.
LIST_PAGE_SIZE = 500
#: The API server's answer to credentials it does not accept (expired, rotated away).
UNAUTHORIZED = 401
_RELOADING = "Kubernetes connection %s: the API server rejected the credentials (401); loading them again"


class KubernetesConnectionError(ValueError):
    """The connection gives no cluster to talk to; the message names the connection and the fix."""


def _no_cluster(conn_id: str, why: str) -> KubernetesConnectionError:
    kind = "'Kubernetes Cluster Connection' and the ACK cluster's kubeconfig"
    fix = define_connection_fix(conn_id, kind, "kubernetes_conn_id")
    return KubernetesConnectionError(f"connection {conn_id!r} gives no cluster: {why} (fix: {fix})")


class KubernetesHooks:
    """The sync ``KubernetesHook`` and the async ``AsyncKubernetesHook`` of ``conn_id``.

    Each is built on first use, so an owner built where no cluster is reachable (a DAG parse, the
    scheduler) costs nothing, and then kept, so the connection is read and the kubeconfig loaded
    once per owner rather than once per API call; a request the API server answers 401 makes the
    hook load the credentials again and repeat it (see the module's docstring).
    """

    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id

    @cached_property
    def sync(self) -> Any:
        return _hook_classes()[0](conn_id=self.conn_id)

    @cached_property
    def asynchronous(self) -> Any:
        return _hook_classes()[1](conn_id=self.conn_id)


@functools.cache
def _hook_classes() -> tuple[type[Any], type[Any]]:
    """The provider's two hooks with credential reloading, defined on first use: importing the
    provider and both clients takes time a DAG parse must not spend."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

    class RenewingKubernetesHook(KubernetesHook):
        """``KubernetesHook`` whose client, answered 401, takes the configuration and connection
        pool of a client built afresh from the connection (the kubeconfig read again, its token
        file or exec plugin included), then repeats the request."""

        def get_conn(self) -> Any:
            # The provider reads a missing default connection as "in the cluster, else
            # ~/.kube/config", and fails with the kubeconfig loader's words when neither is there.
            name = self.conn_id or self.default_conn_name
            try:
                api = super().get_conn()
            except AirflowNotFoundException:
                raise _no_cluster(name, "it is not defined") from None
            except ConfigException as exc:
                raise _no_cluster(name, f"no kubeconfig in it, in the pod or at ~/.kube ({exc})") from None
            send = api.call_api
            bucket = cluster_limiter(name)

            def call_api(*args: Any, **kwargs: Any) -> Any:
                bucket.acquire()
                try:
                    return send(*args, **kwargs)
                except ApiException as exc:
                    if exc.status != UNAUTHORIZED:
                        raise
                log.warning(_RELOADING, self.conn_id)
                fresh = KubernetesHook(conn_id=self.conn_id).get_conn()
                api.configuration, api.rest_client = fresh.configuration, fresh.rest_client
                bucket.acquire()
                return send(*args, **kwargs)

            api.call_api = call_api
            return api

    class RenewingAsyncKubernetesHook(AsyncKubernetesHook):
        """``AsyncKubernetesHook`` whose clients, answered 401, load the connection's credentials
        again into the hook's configuration (which every client of the hook shares, so later
        connections use them too) and repeat the request.

        A response read unloaded (``_preload_content=False``, as logs are) raises nothing for an
        error status in kubernetes_asyncio, so its status is checked here as well.
        """

        @contextlib.asynccontextmanager
        async def get_conn(self) -> AsyncIterator[Any]:
            async with super().get_conn() as opened:
                api: Any = opened  # the generated client, whose call_api this instance replaces
                send = api.call_api
                bucket = cluster_limiter(self.conn_id or self.default_conn_name)

                async def call_api(*args: Any, **kwargs: Any) -> Any:
                    await bucket.aacquire()
                    try:
                        answer = await send(*args, **kwargs)
                    except AsyncApiException as exc:
                        if exc.status != UNAUTHORIZED:
                            raise
                    else:
                        if kwargs.get("_preload_content", True) or answer.status != UNAUTHORIZED:
                            return answer
                        answer.release()
                    log.warning(_RELOADING, self.conn_id)
                    await self._reload_credentials()
                    await bucket.aacquire()
                    return await send(*args, **kwargs)

                api.call_api = call_api
                yield api

        async def _reload_credentials(self) -> None:
            """Load the connection into this hook's configuration once more: a plain hook given
            that configuration loads it on opening a connection (and closes its own client)."""
            renewed = AsyncKubernetesHook(
                conn_id=self.conn_id, client_configuration=self.client_configuration
            )
            async with renewed.get_conn():
                pass

    return RenewingKubernetesHook, RenewingAsyncKubernetesHook


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
    ``_continue``; the listing ends when the answer's token comes back empty."""
    return {**query, "limit": LIST_PAGE_SIZE, **({"_continue": token} if token else {})}


def _page(listed: Any) -> TokenPage[Any]:
    """Items and next token of one answer: a model (``metadata._continue``) or, from the custom
    objects API, the list as JSON (``metadata.continue``)."""
    if isinstance(listed, dict):
        return listed.get("items") or [], (listed.get("metadata") or {}).get("continue")
    return listed.items or [], listed.metadata._continue if listed.metadata else None
