"""Credentials that stay valid through hours-long waits and never reach a log.

:class:`AssumeRoleCredentialsProvider` assumes a RAM role through STS and renews it. The
alibabacloud-credentials RAM-role provider always talks HTTPS to the public STS endpoint; this one
uses the STS SDK through the same client factory as every other service, so it honours the
connection's ``endpoints``/``protocol`` (VPC endpoints, test emulators) and its retry policy.
Tokens are renewed ``refresh_margin`` seconds before they expire, or at once after a service
rejected one as expired (clock skew, revoked sessions).

:class:`MaskedCredentialsProvider` wraps any provider so that every secret it hands out is known to
the secret masker before anything can use (and so log) it.
"""

from __future__ import annotations

import asyncio
import calendar
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

#: AssumeRole's own minimum session length.
MIN_DURATION_SECONDS = 900


class AssumeRoleCredentialsProvider:
    """An alibabacloud-credentials provider that assumes ``role_arn`` with the base credentials."""

    def __init__(
        self,
        *,
        sts_client_factory: Callable[[], Any],
        role_arn: str,
        session_name: str = "airflow-aliyun-training",
        duration_seconds: int = 3600,
        refresh_margin: float = 300.0,
    ) -> None:
        self._sts = sts_client_factory
        self.role_arn = role_arn
        self.session_name = session_name
        self.duration_seconds = max(duration_seconds, MIN_DURATION_SECONDS)
        self.refresh_margin = refresh_margin
        self._cached: Any = None
        self._lock = threading.Lock()
        self._async_lock: asyncio.Lock | None = None

    def get_provider_name(self) -> str:
        return "ram_role_arn"

    def invalidate(self) -> None:
        """Forget the cached token: the next call assumes the role again."""
        self._cached = None

    def _fresh(self) -> bool:
        return self._cached is not None and self._cached.get_expiration() - time.time() > self.refresh_margin

    def _request(self) -> Any:
        from alibabacloud_sts20150401.models import AssumeRoleRequest

        return AssumeRoleRequest(
            role_arn=self.role_arn,
            role_session_name=self.session_name,
            duration_seconds=self.duration_seconds,
        )

    def _store(self, response: Any) -> Any:
        from alibabacloud_credentials.provider.refreshable import Credentials

        issued = response.body.credentials
        expiration = calendar.timegm(time.strptime(issued.expiration, "%Y-%m-%dT%H:%M:%SZ"))
        self._cached = Credentials(
            access_key_id=issued.access_key_id,
            access_key_secret=issued.access_key_secret,
            security_token=issued.security_token,
            expiration=expiration,
            provider_name=self.get_provider_name(),
        )
        return self._cached

    def get_credentials(self) -> Any:
        with self._lock:
            if not self._fresh():
                self._store(self._sts().assume_role(self._request()))
            return self._cached

    async def get_credentials_async(self) -> Any:
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        async with self._async_lock:
            if not self._fresh():
                self._store(await self._sts().assume_role_async(self._request()))
            return self._cached


class MaskedCredentialsProvider:
    """Registers the secret and the STS token of every credential ``provider`` hands out with ``mask``.

    Whatever the provider (the connection's key pair or fixed token, an assumed role, or the default
    chain: environment variables, the ECS instance role, the OIDC role of an ACK pod), a credential
    is masked before an SDK can sign, log or raise with it. ``mask`` is told only when the
    credentials change: the SDKs ask for them on every request, and inside a task each registration
    is also a message to the supervisor.
    """

    def __init__(self, provider: Any, mask: Callable[[str, str], None]) -> None:
        self._provider = provider
        self._mask = mask
        self._masked: tuple[str | None, str | None] = (None, None)

    def get_provider_name(self) -> str:
        return self._provider.get_provider_name()

    def invalidate(self) -> None:
        """Pass a forced renewal on to a provider that can renew (an assumed role); others ignore it."""
        if hasattr(self._provider, "invalidate"):
            self._provider.invalidate()

    def get_credentials(self) -> Any:
        return self._register(self._provider.get_credentials())

    async def get_credentials_async(self) -> Any:
        return self._register(await self._provider.get_credentials_async())

    def _register(self, credentials: Any) -> Any:
        secrets = (credentials.get_access_key_secret(), credentials.get_security_token())
        if secrets != self._masked:
            for name, value in zip(("access_key_secret", "security_token"), secrets, strict=True):
                if value:
                    self._mask(value, name)
            self._masked = secrets
        return credentials
