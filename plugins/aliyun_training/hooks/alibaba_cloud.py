"""The ``alibaba_cloud`` connection: credentials, endpoints and the one client factory for every SDK.

:class:`AlibabaCloudHook` is the base of one hook per service (``hooks/dlc.py``, ``paistudio.py``,
``vpc.py``, ``ecs.py``, ``ram.py``, ``nas.py``, ``aiworkspace.py``, ``cr.py``, ``cms.py``, ``oss.py``), as
apache-airflow-providers-amazon's AwsBaseHook is of its service hooks: the base holds the
connection, the credentials and the client factory; a subclass names its ``service`` (its client
is :attr:`AlibabaCloudHook.conn`) and exposes typed methods, sync and async side by side as the
databricks provider's are (``get_x`` / ``aget_x``). Each method is a call under the retry policy
(:meth:`~AlibabaCloudHook.call` / :meth:`~AlibabaCloudHook.acall`), reads every page of a list
(:meth:`~AlibabaCloudHook.call_pages`), and answers None for a thing that does not exist with one
rule for both twins (:meth:`~AlibabaCloudHook.call_or_none`). A container registry is not an
``alibaba_cloud`` service: ``hooks/container_registry.py`` is its hook, over a registry connection.

Extras (compatible with apache-airflow-providers-alibaba's ``access_key_id``/``access_key_secret``):

- ``access_key_id``, ``access_key_secret``: an AccessKey pair (a RAM user's, ideally);
- ``security_token``: with the pair, a fixed STS token (it cannot be renewed; prefer ``role_arn``);
- ``role_arn`` (+ ``role_session_name``, ``role_duration_seconds``): assume this RAM role through STS
  with the pair, or with the default chain when there is no pair; renewed during long waits;
- ``region``: e.g. ``cn-wulanchabu``;
- ``protocol``: ``https`` (default) or ``http``;
- ``endpoints``: service -> ``host[:port]`` for VPC endpoints or emulators; services are ``dlc``,
  ``paistudio``, ``aiworkspace``, ``vpc``, ``ecs``, ``nas``, ``cr``, ``cms``, ``oss``, ``sts``, ``ram``; a
  service it leaves out gets its public endpoint in the region (:data:`PUBLIC_ENDPOINTS`);
- ``retry``: ``{"max_attempts": 8, "base_delay": 0.5, "max_delay": 20}``;
- ``connect_timeout_ms``, ``read_timeout_ms``.

Every attempt of a call first takes a token from the process's rate limiter of its account and
action (``hooks/rate_limit.py``), which the triggers, the tasks' hooks and the reconciler of a
process share; the account is known from the extras (:attr:`AlibabaCloudHook.account_key`).

Without a key pair the alibabacloud-credentials default chain applies (environment variables,
ECS instance RAM role, OIDC role on ACK). Secrets are registered with Airflow's secret masker as
soon as they are read, and every credential any provider hands out (the default chain's included)
before it is used, so they never reach task logs, XCom or error messages.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk import BaseHook

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID, define_connection_fix
from aliyun_training.hooks.paging import NumberedPage, TokenPage, atoken_pages, numbered_pages, token_pages
from aliyun_training.hooks.rate_limit import TokenBucket, account_key, limiter
from aliyun_training.hooks.retry import AlibabaCloudApiError, RetryPolicy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

T = TypeVar("T")

#: How long a process keeps one hook per connection before reading the connection again.
SHARED_HOOK_MAX_AGE_SECONDS = 300.0

#: The public endpoint of each SDK service, as the product's "Endpoints" page of its API reference
#: lists it (docs/fidelity.md names the pages). Every client gets its endpoint from here rather than
#: from its SDK's own rule: RAM is one global service with no regional host, yet the RAM SDK composes
#: ``ram.<region>.aliyuncs.com``, which does not exist; other SDKs carry stale per-region maps. OSS
#: (no SDK client here; oss2 is given a bucket host) has its own in ``staging.oss.oss_endpoint``.
PUBLIC_ENDPOINTS = {
    "dlc": "pai-dlc.{region}.aliyuncs.com",
    "paistudio": "pai.{region}.aliyuncs.com",
    "aiworkspace": "aiworkspace.{region}.aliyuncs.com",
    "vpc": "vpc.{region}.aliyuncs.com",
    "ecs": "ecs.{region}.aliyuncs.com",
    "nas": "nas.{region}.aliyuncs.com",
    "cr": "cr.{region}.aliyuncs.com",
    "cms": "metrics.{region}.aliyuncs.com",
    "sts": "sts.{region}.aliyuncs.com",
    "ram": "ram.aliyuncs.com",
}
SERVICES = (*PUBLIC_ENDPOINTS, "oss")
_SECRET_EXTRAS = ("access_key_secret", "security_token")
#: Error codes about the caller's credentials, never about the resource a call asked for.
_CREDENTIAL_CODES = ("InvalidAccessKeyId", "InvalidSecurityToken", "SignatureDoesNotMatch")


class AlibabaCloudConnectionError(ValueError):
    """The connection's extras are unusable; the message names the extra and the fix."""


class AlibabaCloudHook(BaseHook):
    """Credentials and SDK clients for one ``alibaba_cloud`` connection; the base of the service hooks."""

    conn_name_attr = "alibaba_cloud_conn_id"
    default_conn_name = ALIBABA_CLOUD_DEFAULT_CONN_ID
    conn_type = "alibaba_cloud"
    hook_name = "Alibaba Cloud"
    #: The service (a key of :data:`SERVICES`) whose client :attr:`conn` is; set by each service hook.
    service: str | None = None

    def __init__(self, alibaba_cloud_conn_id: str = default_conn_name, region: str | None = None) -> None:
        super().__init__()
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self._region_override = region
        self._extras: dict[str, Any] | None = None
        self._credential_client: Any = None
        self._provider: Any = None
        self._clients: dict[str, Any] = {}

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The form's standard fields as ``provider_info`` declares them to Airflow, which reads them there.

        Airflow 3.2+ takes the form (this and the extra fields, ``conn-fields``) from the provider's
        metadata and no longer asks the hook; one declaration serves both.
        """
        from aliyun_training.provider_info import HIDDEN_FIELDS, PLACEHOLDERS

        return {"hidden_fields": list(HIDDEN_FIELDS), "relabeling": {}, "placeholders": dict(PLACEHOLDERS)}

    # -- connection ------------------------------------------------------------------------------

    @property
    def extras(self) -> dict[str, Any]:
        if self._extras is None:
            from airflow.sdk.exceptions import AirflowNotFoundException

            try:
                connection = self.get_connection(self.alibaba_cloud_conn_id)
            except AirflowNotFoundException:
                raise self._undefined() from None
            self.load_extras(connection.extra_dejson)
        return self._extras  # type: ignore[return-value]  # load_extras has set it

    async def aload(self) -> None:
        """Read the connection without blocking the event loop (triggers call this first)."""
        if self._extras is None:
            from airflow.sdk.exceptions import AirflowNotFoundException

            try:
                connection = await self.aget_connection(self.alibaba_cloud_conn_id)
            except AirflowNotFoundException:
                raise self._undefined() from None
            self.load_extras(connection.extra_dejson)

    def _undefined(self) -> AlibabaCloudConnectionError:
        """A connection that does not exist, named with the ways to define it: a preflight reports
        this as a failing finding and a task fails with it, instead of Airflow's bare lookup error."""
        name = self.alibaba_cloud_conn_id
        fix = define_connection_fix(name, repr(AlibabaCloudHook.hook_name), "alibaba_cloud_conn_id")
        return AlibabaCloudConnectionError(f"connection {name!r} is not defined (fix: {fix})")

    def load_extras(self, extras: dict[str, Any]) -> None:
        """Validate and keep the extras; register their secrets with the masker first.

        An extra that is null or empty counts as not set: Airflow's connection form writes every one
        of its fields, ``null`` where the field was left empty (``"protocol": null`` means https).
        """
        from airflow.sdk.log import mask_secret

        extras = {name: value for name, value in extras.items() if value is not None and value != ""}
        for name in _SECRET_EXTRAS:
            if extras.get(name):
                mask_secret(extras[name], name)
        if bool(extras.get("access_key_id")) != bool(extras.get("access_key_secret")):
            raise AlibabaCloudConnectionError(
                f"connection {self.alibaba_cloud_conn_id}: access_key_id and access_key_secret go together "
                "(fix: set both, or neither to use the default credential chain)"
            )
        if extras.get("security_token") and not extras.get("access_key_id"):
            raise AlibabaCloudConnectionError(
                f"connection {self.alibaba_cloud_conn_id}: security_token needs access_key_id and "
                "access_key_secret (fix: set the STS AccessKey pair that was issued with the token)"
            )
        unknown = sorted(set(extras.get("endpoints") or {}) - set(SERVICES))
        if unknown:
            raise AlibabaCloudConnectionError(
                f"connection {self.alibaba_cloud_conn_id}: endpoints has unknown services {unknown} "
                f"(fix: use any of {', '.join(SERVICES)})"
            )
        if extras.get("protocol", "https") not in ("http", "https"):
            raise AlibabaCloudConnectionError(
                f"connection {self.alibaba_cloud_conn_id}: protocol must be http or https "
                "(fix: use https, or http only for a local emulator or a trusted VPC endpoint)"
            )
        self._extras = extras

    @property
    def region(self) -> str:
        region = self._region_override or self.extras.get("region")
        if not region:
            raise AlibabaCloudConnectionError(
                f"connection {self.alibaba_cloud_conn_id}: no region (fix: set the extra region, "
                "e.g. cn-wulanchabu)"
            )
        return region

    def endpoint(self, service: str) -> str:
        """``host[:port]`` of ``service``: the connection's ``endpoints`` entry, else the public one."""
        return (self.extras.get("endpoints") or {}).get(service) or default_endpoint(service, self.region)

    @cached_property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy.from_extras(self.extras)

    @property
    def account_key(self) -> str:
        """Whose API quotas this connection's calls draw from (``rate_limit.account_key``)."""
        return account_key(self.extras, self.alibaba_cloud_conn_id)

    def rate_limiter(self, action: str) -> TokenBucket:
        """The process's bucket of ``action`` for this connection's account; the base hook, which
        serves no one service, counts its calls under ``openapi``."""
        return limiter(self.account_key, self.service or "openapi", action)

    # -- credentials -----------------------------------------------------------------------------

    def credential_client(self) -> Any:
        """One credentials client per hook, shared by all its SDK clients (so one refresh serves all)."""
        if self._credential_client is None:
            from alibabacloud_credentials.client import Client as CredentialClient

            self._provider = self._credentials_provider()
            self._credential_client = CredentialClient(provider=self._provider)
        return self._credential_client

    def _credentials_provider(self) -> Any:
        """The extras' credentials, or a role assumed with them; each layer masks what it hands out."""
        from airflow.sdk.log import mask_secret
        from alibabacloud_credentials.client import Client as CredentialClient

        from aliyun_training.hooks.credentials import AssumeRoleCredentialsProvider, MaskedCredentialsProvider

        extras = self.extras
        base = MaskedCredentialsProvider(self._base_provider(), mask_secret)
        if not extras.get("role_arn"):
            return base
        base_client = CredentialClient(provider=base)
        role = AssumeRoleCredentialsProvider(
            sts_client_factory=lambda: self._build_client("sts", base_client),
            role_arn=extras["role_arn"],
            session_name=extras.get("role_session_name", "airflow-aliyun-training"),
            duration_seconds=int(extras.get("role_duration_seconds", 3600)),
        )
        return MaskedCredentialsProvider(role, mask_secret)

    def _base_provider(self) -> Any:
        """A fixed STS token, the key pair, or (neither in the extras) the default chain."""
        from alibabacloud_credentials.provider import (
            DefaultCredentialsProvider,
            StaticAKCredentialsProvider,
            StaticSTSCredentialsProvider,
        )

        extras = self.extras
        if extras.get("security_token"):
            return StaticSTSCredentialsProvider(
                access_key_id=extras["access_key_id"],
                access_key_secret=extras["access_key_secret"],
                security_token=extras["security_token"],
            )
        if extras.get("access_key_id"):
            return StaticAKCredentialsProvider(
                access_key_id=extras["access_key_id"], access_key_secret=extras["access_key_secret"]
            )
        return DefaultCredentialsProvider()

    def refresh_credentials(self) -> None:
        """Drop a cached STS token after a service rejected it; the next call fetches a new one.

        Only an assumed role can be renewed; a fixed ``security_token`` extra cannot, and its expiry
        surfaces as the API error with a hint in ``AlibabaCloudApiError``.
        """
        if self._provider is not None:
            self._provider.invalidate()

    # -- clients ---------------------------------------------------------------------------------

    def client(self, service: str) -> Any:
        """The SDK client for ``service``, created once per hook with this connection's settings."""
        if service not in self._clients:
            self._clients[service] = self._build_client(service, self.credential_client())
        return self._clients[service]

    @property
    def conn(self) -> Any:
        """The SDK client of this hook's :attr:`service` (AwsBaseHook's ``conn``)."""
        if self.service is None:
            raise AlibabaCloudConnectionError(
                f"{type(self).__name__} serves no one service (fix: use a service hook, e.g. DlcHook)"
            )
        return self.client(self.service)

    def get_conn(self) -> Any:
        return self.conn

    def _build_client(self, service: str, credential: Any) -> Any:
        from alibabacloud_tea_openapi.utils_models import Config

        client_class = _client_class(service)
        config = Config(
            credential=credential,
            region_id=self.region,
            protocol=self.extras.get("protocol", "https"),
            endpoint=self.endpoint(service),
            connect_timeout=int(self.extras.get("connect_timeout_ms", 5000)),
            read_timeout=int(self.extras.get("read_timeout_ms", 10000)),
        )
        return client_class(config)

    # -- calls ---------------------------------------------------------------------------------

    def call(self, action: str, fn: Callable[[], T]) -> T:
        """Run one SDK call under the retry policy (refreshing an expired STS token once), each
        attempt after a token of the action's rate limit."""
        return self.retry_policy.call(action, self._limited(action, fn), refresh=self.refresh_credentials)

    async def acall(self, action: str, fn: Callable[[], Awaitable[T]]) -> T:
        """The async twin of :meth:`call`; reads the connection first without blocking the loop."""
        await self.aload()
        attempt = self._alimited(action, fn)
        return await self.retry_policy.acall(action, attempt, refresh=self.refresh_credentials)

    def call_once_only(self, action: str, fn: Callable[[], T]) -> T:
        """One attempt, no retries: for a look whose answer is information, not a decision (a queued
        job's place in its quota), which must not hold up the poll that asks it."""
        policy = replace(self.retry_policy, max_attempts=1)
        return policy.call(action, self._limited(action, fn), refresh=self.refresh_credentials)

    async def acall_once_only(self, action: str, fn: Callable[[], Awaitable[T]]) -> T:
        await self.aload()
        policy = replace(self.retry_policy, max_attempts=1)
        return await policy.acall(action, self._alimited(action, fn), refresh=self.refresh_credentials)

    def _limited(self, action: str, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` after a token of ``action``'s bucket, taken anew by every attempt: a retry is a
        request too. The bucket is looked up before the policy runs, so a bad rate setting raises its
        own error rather than one the policy would report as the API's."""
        bucket = self.rate_limiter(action)

        def attempt() -> T:
            bucket.acquire()
            return fn()

        return attempt

    def _alimited(self, action: str, fn: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """The async twin of :meth:`_limited`: waits for the token without blocking the loop."""
        bucket = self.rate_limiter(action)

        async def attempt() -> T:
            await bucket.aacquire()
            return await fn()

        return attempt

    def call_or_none(self, action: str, fn: Callable[[], T], missing: Callable[[str], bool]) -> T | None:
        """:meth:`call`, answering None where the error code says the thing asked for does not exist.

        A code about the caller's credentials (``InvalidAccessKeyId.NotFound``) is raised whatever
        ``missing`` says: an unknown AccessKey must not read as an unknown quota or role.
        """
        try:
            return self.call(action, fn)
        except AlibabaCloudApiError as exc:
            if _absent(exc.code, missing):
                return None
            raise

    async def acall_or_none(
        self, action: str, fn: Callable[[], Awaitable[T]], missing: Callable[[str], bool]
    ) -> T | None:
        """The async twin of :meth:`call_or_none`: the same codes mean "does not exist"."""
        try:
            return await self.acall(action, fn)
        except AlibabaCloudApiError as exc:
            if _absent(exc.code, missing):
                return None
            raise

    def call_once(self, action: str, create: Callable[[], T], find: Callable[[], T | None]) -> T:
        """``create`` under the retry policy, for a create API without an idempotency token.

        A create whose answer was lost (a dropped connection, a 503 after the commit) may have
        made the thing: each retry first asks ``find`` and answers what it finds instead of
        creating a second one.
        """
        attempts = 0

        def attempt() -> T:
            nonlocal attempts
            attempts += 1
            if attempts > 1 and (made := find()):
                return made
            return create()

        return self.call(action, attempt)

    def call_pages(
        self, action: str, fetch: Callable[[int], NumberedPage[T]], max_pages: int | None = None
    ) -> Iterator[T]:
        """Every item of a numbered listing (:func:`numbered_pages`), each page one retried call."""
        return numbered_pages(lambda number: self.call(action, lambda: fetch(number)), max_pages)

    def call_token_pages(self, action: str, fetch: Callable[[str | None], TokenPage[T]]) -> Iterator[T]:
        """Every item of a NextToken listing (:func:`token_pages`), each page one retried call."""
        return token_pages(lambda token: self.call(action, lambda: fetch(token)))

    def acall_token_pages(
        self, action: str, fetch: Callable[[str | None], Awaitable[TokenPage[T]]]
    ) -> AsyncIterator[T]:
        """The async twin of :meth:`call_token_pages`."""

        async def page(token: str | None) -> TokenPage[T]:
            return await self.acall(action, lambda: fetch(token))

        return atoken_pages(page)


H = TypeVar("H", bound=AlibabaCloudHook)
_shared: dict[tuple[type, str, str | None], tuple[float, AlibabaCloudHook]] = {}
_shared_lock = threading.Lock()


def shared_hook(cls: type[H], conn_id: str, region: str | None = None) -> H:
    """One hook per (hook class, connection, region) in a process, renewed every few minutes.

    A triggerer monitors hundreds of jobs of the same connection: sharing the hook means one
    connection lookup, one credentials client (one STS session) and one SDK client for all of them,
    instead of one each. Renewal picks up edits to the connection.
    """
    key = (cls, conn_id, region)
    with _shared_lock:
        created, hook = _shared.get(key, (0.0, None))
        if hook is None or time.monotonic() - created > SHARED_HOOK_MAX_AGE_SECONDS:
            hook = cls(conn_id, region=region)
            _shared[key] = (time.monotonic(), hook)
        return hook  # type: ignore[return-value]  # the key holds cls, so its hook is a cls


def forget_shared_hooks() -> None:
    """Drop every shared hook, so the next use reads its connection again."""
    with _shared_lock:
        _shared.clear()


def credential_error(code: str) -> bool:
    """Whether an error code is about the caller's credentials rather than what it asked for."""
    return code.startswith(_CREDENTIAL_CODES)


def _absent(code: str, missing: Callable[[str], bool]) -> bool:
    return missing(code) and not credential_error(code)


async def abody(call: Awaitable[Any]) -> Any:
    """The body of an async SDK call's answer: ``lambda: abody(client.x_async(request))``."""
    return (await call).body


def default_endpoint(service: str, region: str) -> str:
    """The public endpoint of ``service`` in ``region`` (:data:`PUBLIC_ENDPOINTS`)."""
    return PUBLIC_ENDPOINTS[service].format(region=region)


def _client_class(service: str) -> Any:
    """SDK client classes, imported only when a service is used (never at DAG parse time)."""
    if service == "dlc":
        from alibabacloud_pai_dlc20201203.client import Client
    elif service == "sts":
        from alibabacloud_sts20150401.client import Client
    elif service == "vpc":
        from alibabacloud_vpc20160428.client import Client
    elif service == "ecs":
        from alibabacloud_ecs20140526.client import Client
    elif service == "paistudio":
        from alibabacloud_paistudio20220112.client import Client
    elif service == "ram":
        from alibabacloud_ram20150501.client import Client
    elif service == "aiworkspace":
        from alibabacloud_aiworkspace20210204.client import Client
    elif service == "nas":
        from alibabacloud_nas20170626.client import Client
    elif service == "cr":
        from alibabacloud_cr20181201.client import Client
    elif service == "cms":
        from alibabacloud_cms20190101.client import Client
    else:
        raise AlibabaCloudConnectionError(f"no SDK client is wired for service {service!r}")
    return Client
