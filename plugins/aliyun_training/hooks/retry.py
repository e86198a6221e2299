"""The one retry policy for every Alibaba Cloud API call, sync and async.

The SDKs do not retry by themselves (one 503 is one failed call), and a training job is monitored
for hours, so transient failures are certain. Retried: throttling (``Throttling*``),
``ServiceUnavailable``, every 5xx, and transport failures (connection reset or refused, dropped
responses, timeouts) with capped exponential backoff and full jitter. An expired STS token is
refreshed once and the call repeated. Every other error fails at once as ``AlibabaCloudApiError``
with the API action, error code, message and RequestId, which is what a support ticket needs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

T = TypeVar("T")
log = logging.getLogger(__name__)

EXPIRED_TOKEN_CODES = frozenset({"InvalidSecurityToken.Expired", "SecurityTokenExpired"})


class AlibabaCloudApiError(RuntimeError):
    """A call failed for good; the message carries the action, code, message and RequestId."""

    def __init__(self, action: str, code: str, message: str, request_id: str | None, attempts: int) -> None:
        self.action = action
        self.code = code
        self.request_id = request_id
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"{action} failed{tries}: {code}: {message} (RequestId: {request_id or 'n/a'})")


@dataclass(frozen=True)
class ErrorInfo:
    code: str
    message: str
    request_id: str | None
    retryable: bool
    expired_token: bool


def classify(exc: BaseException) -> ErrorInfo:
    """What an SDK exception means for the caller: retry, refresh credentials, or give up."""
    from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
    from Tea.exceptions import UnretryableException

    if isinstance(exc, AlibabaCloudException):
        code = exc.code or f"HTTP{exc.status_code}"
        request_id = exc.request_id or (exc.data or {}).get("RequestId")
        retryable = (
            code.startswith("Throttling") or code == "ServiceUnavailable" or (exc.status_code or 0) >= 500
        )
        return ErrorInfo(code, exc.message or str(exc), request_id, retryable, code in EXPIRED_TOKEN_CODES)
    if isinstance(exc, UnretryableException | ConnectionError | TimeoutError | asyncio.TimeoutError):
        # Transport failures: the SDK wraps resets, refusals and dropped bodies in UnretryableException.
        inner = getattr(exc, "inner_exception", None) or exc
        return ErrorInfo(type(inner).__name__, str(inner) or repr(inner), None, True, False)
    return ErrorInfo(type(exc).__name__, str(exc), None, False, False)


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with full jitter; ``max_attempts`` counts the first call."""

    max_attempts: int = 8
    base_delay: float = 0.5
    max_delay: float = 20.0

    @classmethod
    def from_extras(cls, extras: dict[str, Any]) -> RetryPolicy:
        """Read the connection's optional ``retry`` extra: max_attempts, base_delay, max_delay."""
        settings = extras.get("retry") or {}
        return cls(
            **{k: type(getattr(cls, k))(v) for k, v in settings.items() if k in cls.__dataclass_fields__}
        )

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))

    def call(self, action: str, fn: Callable[[], T], refresh: Callable[[], None] | None = None) -> T:
        """Run ``fn`` until it succeeds, a non-retryable error occurs, or attempts run out."""
        refreshed = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn()
            except Exception as exc:
                if self._should_refresh(action, exc, attempt, refresh is not None and not refreshed):
                    # _should_refresh says yes only when it may (can_refresh): refresh is set then.
                    refresh()  # type: ignore[misc]
                    refreshed = True
                else:
                    time.sleep(self.delay(attempt))
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def acall(
        self,
        action: str,
        fn: Callable[[], Awaitable[T]],
        refresh: Callable[[], None] | None = None,
    ) -> T:
        """The async twin of ``call``; sleeps without blocking the event loop."""
        refreshed = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                return await fn()
            except Exception as exc:
                if self._should_refresh(action, exc, attempt, refresh is not None and not refreshed):
                    # _should_refresh says yes only when it may (can_refresh): refresh is set then.
                    refresh()  # type: ignore[misc]
                    refreshed = True
                else:
                    await asyncio.sleep(self.delay(attempt))
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _should_refresh(self, action: str, exc: Exception, attempt: int, can_refresh: bool) -> bool:
        """True: refresh credentials and call again. False: back off and retry. Else raise.

        An ``AlibabaCloudApiError`` is final as it is: a call made inside this one (a look-up
        before a repeated create) already spent its own retries, and its code must reach the caller.
        """
        if isinstance(exc, AlibabaCloudApiError):
            raise exc
        info = classify(exc)
        if info.expired_token and can_refresh and attempt < self.max_attempts:
            log.warning("%s: security token expired; refreshing credentials and retrying", action)
            return True
        if not info.retryable or attempt >= self.max_attempts:
            raise AlibabaCloudApiError(action, info.code, info.message, info.request_id, attempt) from exc
        log.warning(
            "%s: %s (RequestId: %s); retry %d of %d",
            action,
            info.code,
            info.request_id or "n/a",
            attempt,
            self.max_attempts - 1,
        )
        return False
