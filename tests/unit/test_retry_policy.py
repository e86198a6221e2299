"""The retry policy: which SDK errors are retried, how often, how long it waits, what it raises."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from alibabacloud_tea_openapi.exceptions import ClientException, ServerException
from darabonba.exceptions import UnretryableException
from darabonba.policy.retry import RetryPolicyContext

from aliyun_training.hooks.retry import AlibabaCloudApiError, RetryPolicy, classify

FAST = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.002)


def throttled(request_id: str = "THROTTLE-RID") -> ClientException:
    return ClientException(
        status_code=400,
        code="Throttling.User",
        message="Request was denied due to user flow control.",
        request_id=request_id,
    )


def unavailable() -> ServerException:
    return ServerException(
        status_code=503,
        code="ServiceUnavailable",
        message="The request has failed due to a temporary failure of the server.",
        request_id="UNAVAILABLE-RID",
    )


def forbidden() -> ClientException:
    return ClientException(
        status_code=403,
        code="Forbidden.RAM",
        message="User not authorized to operate on the specified resource.",
        request_id="FORBIDDEN-RID",
    )


def expired() -> ClientException:
    return ClientException(
        status_code=400,
        code="InvalidSecurityToken.Expired",
        message="Specified SecurityToken is expired.",
        request_id="EXPIRED-RID",
    )


def dropped_connection() -> UnretryableException:
    reset = ConnectionResetError(104, "Connection reset by peer")
    return UnretryableException(RetryPolicyContext(retries_attempted=0, exception=reset))


class Script:
    """A callable that raises the given errors in turn, then returns ``result``; counts its calls."""

    def __init__(self, *errors: BaseException, result: Any = "ok") -> None:
        self.errors = list(errors)
        self.result = result
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result

    async def run_async(self) -> Any:
        return self()


class Refresh:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


# --------------------------------------------------------------------------------- classify


def test_throttling_is_retryable_and_keeps_code_and_request_id() -> None:
    info = classify(throttled("RID-7"))
    assert (info.code, info.request_id, info.retryable, info.expired_token) == (
        "Throttling.User",
        "RID-7",
        True,
        False,
    )
    assert "flow control" in info.message


def test_service_unavailable_is_retryable() -> None:
    info = classify(unavailable())
    assert (info.code, info.retryable) == ("ServiceUnavailable", True)


@pytest.mark.parametrize("status", [500, 502, 504])
def test_any_5xx_is_retryable(status: int) -> None:
    error = ServerException(status_code=status, code="InternalError", message="boom", request_id="R")
    assert classify(error).retryable is True


def test_forbidden_is_not_retryable() -> None:
    info = classify(forbidden())
    assert (info.code, info.retryable, info.expired_token) == ("Forbidden.RAM", False, False)


def test_expired_security_token_is_flagged_and_not_plainly_retryable() -> None:
    info = classify(expired())
    assert (info.expired_token, info.retryable) == (True, False)


def test_request_id_falls_back_to_the_error_body() -> None:
    error = ClientException(
        status_code=404, code="JobNotFound", message="gone", data={"RequestId": "BODY-RID"}
    )
    assert classify(error).request_id == "BODY-RID"


def test_error_without_code_is_named_by_http_status() -> None:
    error = ServerException(status_code=502, message="bad gateway")
    assert classify(error).code == "HTTP502"


def test_dropped_connection_is_retryable_and_named_by_its_cause() -> None:
    info = classify(dropped_connection())
    assert (info.code, info.retryable, info.expired_token) == ("ConnectionResetError", True, False)
    assert "Connection reset by peer" in info.message


def test_plain_python_error_is_not_retryable() -> None:
    info = classify(ValueError("bad job spec"))
    assert (info.code, info.message, info.retryable) == ("ValueError", "bad job spec", False)


# --------------------------------------------------------------------------------- call


def test_call_retries_transient_errors_until_success() -> None:
    fn = Script(throttled(), unavailable(), dropped_connection(), result="job-1")
    assert FAST.call("GetJob", fn) == "job-1"
    assert fn.calls == 4


def test_call_gives_up_after_max_attempts_with_the_details_a_ticket_needs() -> None:
    fn = Script(*[throttled("LAST-RID")] * 10)
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001)
    with pytest.raises(AlibabaCloudApiError) as caught:
        policy.call("GetJob", fn)
    message = str(caught.value)
    assert fn.calls == 3
    for part in ("GetJob", "Throttling.User", "user flow control", "LAST-RID", "after 3 attempts"):
        assert part in message
    assert (caught.value.action, caught.value.code, caught.value.request_id) == (
        "GetJob",
        "Throttling.User",
        "LAST-RID",
    )
    assert isinstance(caught.value.__cause__, ClientException)


def test_call_raises_a_non_retryable_error_after_one_call() -> None:
    fn = Script(forbidden(), result="never")
    with pytest.raises(AlibabaCloudApiError) as caught:
        FAST.call("CreateJob", fn)
    assert fn.calls == 1
    assert "Forbidden.RAM" in str(caught.value) and "FORBIDDEN-RID" in str(caught.value)
    assert "attempts" not in str(caught.value)


def test_call_wraps_a_python_error_without_retrying() -> None:
    fn = Script(ValueError("bad job spec"))
    with pytest.raises(AlibabaCloudApiError, match="CreateJob failed: ValueError: bad job spec"):
        FAST.call("CreateJob", fn)
    assert fn.calls == 1


def test_expired_token_is_refreshed_once_then_the_call_repeated() -> None:
    fn, refresh = Script(expired(), result="job-1"), Refresh()
    assert FAST.call("GetJob", fn, refresh=refresh) == "job-1"
    assert (fn.calls, refresh.calls) == (2, 1)


def test_second_expired_token_is_not_refreshed_again() -> None:
    fn, refresh = Script(expired(), expired(), result="never"), Refresh()
    with pytest.raises(AlibabaCloudApiError, match=r"InvalidSecurityToken\.Expired"):
        FAST.call("GetJob", fn, refresh=refresh)
    assert (fn.calls, refresh.calls) == (2, 1)


def test_expired_token_without_a_refresh_fails_at_once() -> None:
    fn = Script(expired(), result="never")
    with pytest.raises(AlibabaCloudApiError, match=r"InvalidSecurityToken\.Expired"):
        FAST.call("GetJob", fn)
    assert fn.calls == 1


def test_expired_token_on_the_last_attempt_raises_the_api_error() -> None:
    """max_attempts counts every call: the last one returns or raises AlibabaCloudApiError."""
    fn, refresh = Script(throttled(), expired(), result="too late"), Refresh()
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)
    with pytest.raises(AlibabaCloudApiError, match=r"InvalidSecurityToken\.Expired"):
        policy.call("GetJob", fn, refresh=refresh)
    assert fn.calls == 2


# --------------------------------------------------------------------------------- delay


def test_delay_stays_within_the_capped_exponential_bound() -> None:
    policy = RetryPolicy(max_attempts=12, base_delay=0.5, max_delay=20.0)
    for attempt in range(1, 13):
        bound = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
        samples = [policy.delay(attempt) for _ in range(500)]
        assert all(0 <= s <= bound for s in samples), attempt
        assert max(samples) <= policy.max_delay


def test_delay_grows_with_attempts_until_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=20.0)
    largest = {n: max(policy.delay(n) for _ in range(500)) for n in range(1, 9)}
    for n in range(2, 7):  # caps 1, 2, 4, 8, 16: each beats the previous cap with near certainty
        assert largest[n] > policy.base_delay * 2 ** (n - 2), n
    assert largest[8] > 16.0  # capped at 20, not 64, yet still above the previous cap


# --------------------------------------------------------------------------------- acall


def test_acall_retries_transient_errors_until_success() -> None:
    fn = Script(throttled(), unavailable(), result="job-1")
    assert asyncio.run(FAST.acall("GetJob", fn.run_async)) == "job-1"
    assert fn.calls == 3


def test_acall_gives_up_after_max_attempts() -> None:
    fn = Script(*[unavailable()] * 10)
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001)
    with pytest.raises(AlibabaCloudApiError) as caught:
        asyncio.run(policy.acall("ListJobs", fn.run_async))
    assert fn.calls == 3
    for part in ("ListJobs", "ServiceUnavailable", "UNAVAILABLE-RID", "after 3 attempts"):
        assert part in str(caught.value)


def test_acall_raises_a_non_retryable_error_after_one_call() -> None:
    fn = Script(forbidden())
    with pytest.raises(AlibabaCloudApiError, match=r"Forbidden\.RAM"):
        asyncio.run(FAST.acall("StopJob", fn.run_async))
    assert fn.calls == 1


def test_acall_refreshes_an_expired_token_only_once() -> None:
    refresh = Refresh()
    once = Script(expired(), result="job-1")
    assert asyncio.run(FAST.acall("GetJob", once.run_async, refresh=refresh)) == "job-1"
    twice = Script(expired(), expired(), result="never")
    with pytest.raises(AlibabaCloudApiError, match=r"InvalidSecurityToken\.Expired"):
        asyncio.run(FAST.acall("GetJob", twice.run_async, refresh=refresh))
    assert (once.calls, twice.calls, refresh.calls) == (2, 2, 2)


def test_acall_backs_off_without_blocking_the_event_loop() -> None:
    ticks: list[int] = []
    seen_at_call: list[int] = []
    errors = Script(throttled(), throttled(), throttled())

    async def fn() -> str:
        seen_at_call.append(len(ticks))
        return errors()

    async def ticker() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0)

    async def main() -> str:
        task = asyncio.create_task(ticker())
        try:
            return await FAST.acall("GetJob", fn)
        finally:
            task.cancel()

    assert asyncio.run(main()) == "ok"
    assert len(seen_at_call) == 4 and seen_at_call[-1] > seen_at_call[0]


def test_acall_expired_token_on_the_last_attempt_raises_the_api_error() -> None:
    fn, refresh = Script(throttled(), expired(), result="too late"), Refresh()
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)
    with pytest.raises(AlibabaCloudApiError, match=r"InvalidSecurityToken\.Expired"):
        asyncio.run(policy.acall("GetJob", fn.run_async, refresh=refresh))
    assert fn.calls == 2


# --------------------------------------------------------------------------------- from_extras


def test_from_extras_converts_types_and_ignores_unknown_keys() -> None:
    policy = RetryPolicy.from_extras({"retry": {"max_attempts": "3", "base_delay": "0.1", "jitter": "full"}})
    assert policy == RetryPolicy(max_attempts=3, base_delay=0.1, max_delay=20.0)
    assert isinstance(policy.max_attempts, int) and isinstance(policy.base_delay, float)


def test_from_extras_without_retry_uses_defaults() -> None:
    assert RetryPolicy.from_extras({"region": "cn-wulanchabu"}) == RetryPolicy()


def test_from_extras_max_attempts_limits_calls() -> None:
    policy = RetryPolicy.from_extras({"retry": {"max_attempts": 2, "base_delay": 0.001, "max_delay": 0.001}})
    fn = Script(throttled(), throttled(), result="never")
    with pytest.raises(AlibabaCloudApiError, match="after 2 attempts"):
        policy.call("GetJob", fn)
    assert fn.calls == 2


# --------------------------------------------------------------------------------- nested calls


def test_an_api_error_of_a_call_made_inside_the_call_is_raised_as_it_is_sync_and_async() -> None:
    """A look-up inside a retried create (e.g. before repeating a CreateJob) spent its own retries:
    its error reaches the caller with its own action and code, and the outer call is not repeated."""
    inner = AlibabaCloudApiError("ListJobs", "Forbidden.RAM", "not authorized", "INNER-RID", 1)
    outer = Script(inner, inner)

    with pytest.raises(AlibabaCloudApiError) as sync_error:
        FAST.call("CreateJob", outer)
    with pytest.raises(AlibabaCloudApiError) as async_error:
        asyncio.run(FAST.acall("CreateJob", outer.run_async))

    assert sync_error.value is inner and async_error.value is inner
    assert (inner.action, inner.code, inner.request_id) == ("ListJobs", "Forbidden.RAM", "INNER-RID")
    assert outer.calls == 2, "one call each: an inner failure is not retried again"
