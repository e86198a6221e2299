"""hooks.rate_limit: the token bucket every caller of a process shares, the ``api_rate_limits``
setting, whose quota a connection draws from, and the hooks taking a token before every request."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook

from aliyun_training.hooks import alibaba_cloud, kubernetes
from aliyun_training.hooks.alibaba_cloud import SERVICES, AlibabaCloudHook
from aliyun_training.hooks.dlc import DlcHook
from aliyun_training.hooks.rate_limit import (
    DEFAULT_RATES,
    LATE_SLOTS,
    SETTING_SERVICES,
    RateLimitSettingError,
    TokenBucket,
    account_key,
    burst_of,
    cluster_limiter,
    configured_rate,
    forget_limiters,
    limiter,
    rate_limits,
)
from aliyun_training.hooks.retry import RetryPolicy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

SETTING = "AIRFLOW__ALIYUN_TRAINING__API_RATE_LIMITS"
AK = "LTAI-rate-limit-unit"


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def fresh_limiters() -> Iterator[None]:
    forget_limiters()
    yield
    forget_limiters()


# -- the bucket ---------------------------------------------------------------------------------


def test_a_new_bucket_starts_empty_so_its_first_callers_wait_one_token_each() -> None:
    bucket = TokenBucket(rate=10, burst=10, clock=Clock())

    waits = [bucket.reserve() for _ in range(5)]

    assert waits == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_an_idle_bucket_fills_up_to_its_burst_and_no_further() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=10, burst=3, clock=clock)
    clock.now = 60.0

    waits = [bucket.reserve() for _ in range(5)]

    assert waits == pytest.approx([0, 0, 0, 0.1, 0.2])


def test_a_reservation_drives_the_count_below_zero_and_later_callers_wait_behind_it() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=10, burst=10, clock=clock)
    for _ in range(3):
        bucket.reserve()  # the tokens of 0.1, 0.2 and 0.3 s
    clock.now = 0.15  # 1.5 tokens paid back: 1.5 still owed

    assert bucket.reserve() == pytest.approx(0.25)


@pytest.mark.parametrize(("rate", "callers"), [(5, 1000), (100, 1000)])
def test_a_restart_with_1000_callers_at_once_never_exceeds_the_rate_in_any_second(
    rate: float, callers: int
) -> None:
    """A triggerer restart: every trigger asks in the same instant, and the empty bucket spreads
    them at the rate instead of letting a burst through first."""
    bucket = TokenBucket(rate=rate, burst=int(rate), clock=Clock())

    sends = sorted(bucket.reserve() for _ in range(callers))

    busiest = max(bisect.bisect_left(sends, start + 1 - 1e-9) - i for i, start in enumerate(sends))
    assert busiest == rate
    assert sends[0] > 0, "not even the first caller finds a token in a bucket just made"
    assert sends[-1] == pytest.approx(callers / rate)


def test_waiters_woken_late_by_a_stalled_loop_take_new_slots_instead_of_sending_together() -> None:
    """The loop stalls while 30 waiters are due: without the late check all of them would send the
    moment it resumes; with it, those past their slot take new ones, a slot apart."""
    rate = 100.0
    bucket = TokenBucket(rate=rate, burst=1)
    sent: list[float] = []

    async def waiter() -> None:
        await bucket.aacquire()
        sent.append(time.monotonic())

    async def run() -> float:
        tasks = [asyncio.create_task(waiter()) for _ in range(30)]
        await asyncio.sleep(0)  # every waiter has reserved its slot
        time.sleep(0.2)  # the loop stalls (blocking work) past 20 slots
        resumed = time.monotonic()
        await asyncio.gather(*tasks)
        return resumed

    resumed = asyncio.run(run())

    within_a_slot = [at for at in sent if at - resumed < 1 / rate]
    assert len(within_a_slot) <= LATE_SLOTS + 1, len(within_a_slot)
    ordered = sorted(sent)
    assert all(
        bisect.bisect_left(ordered, start + 0.1) - first <= 0.1 * rate + 1 + LATE_SLOTS
        for first, start in enumerate(ordered)
    )


def test_at_a_rate_whose_slots_are_shorter_than_a_wake_up_every_waiter_still_sends() -> None:
    """A slot of a microsecond is over before any task wakes: lateness counts only past
    LATE_SECONDS, or no waiter would ever send."""
    bucket = TokenBucket(rate=1_000_000, burst=1)

    async def run() -> None:
        await asyncio.wait_for(asyncio.gather(*(bucket.aacquire() for _ in range(1000))), timeout=5)

    asyncio.run(run())
    thread = threading.Thread(target=bucket.acquire)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_bucket_needs_a_rate_and_a_burst() -> None:
    with pytest.raises(ValueError, match="rate above 0"):
        TokenBucket(rate=0, burst=1)
    with pytest.raises(ValueError, match="burst of at least 1"):
        TokenBucket(rate=1, burst=0)


def test_threads_and_two_event_loops_share_one_bucket_at_its_rate() -> None:
    """4 threads and 2 event loops (each on a thread of its own, as the triggerer's loop beside the
    sync hooks) take 5 tokens each from one bucket: 30 at 100 per second take 0.3 s, and by any
    time t after the start no more than 100 t of them went."""
    rate, each = 100.0, 5
    start = time.monotonic()
    bucket = TokenBucket(rate=rate, burst=1)
    done: list[float] = []
    lock = threading.Lock()

    def note() -> None:
        with lock:
            done.append(time.monotonic() - start)

    def thread_caller() -> None:
        for _ in range(each):
            bucket.acquire()
            note()

    async def loop_caller() -> None:
        async def one() -> None:
            await bucket.aacquire()
            note()

        await asyncio.gather(*(one() for _ in range(each)))

    threads = [threading.Thread(target=thread_caller) for _ in range(4)]
    threads += [threading.Thread(target=asyncio.run, args=(loop_caller(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    done.sort()
    assert len(done) == 6 * each
    # The k-th token (k from 1) is due k/rate after the bucket was made, which is after `start`;
    # a sleep never ends early (1 ms for the clocks' rounding), however late a thread wakes.
    assert [t for k, t in enumerate(done, 1) if t < k / rate - 0.001] == []
    assert done[-1] < 6 * each / rate + 2.0, "every caller got its token, none was starved"


# -- the setting --------------------------------------------------------------------------------


def test_without_a_setting_the_published_quotas_and_client_go_defaults_apply() -> None:
    limits = rate_limits("")

    assert limits == {}
    assert configured_rate("dlc", "GetJob", limits) == 100  # PAI-DLC: every API 100/1 s
    assert configured_rate("dlc", "CreateJob", limits) == 150  # except CreateJob: 150/1 s
    assert configured_rate("vpc", "DescribeVpcs", limits) == 10  # ours: no published quota
    assert configured_rate("kubernetes", "*", limits) == 50  # ours (client-go's DefaultQPS is 5)
    assert configured_rate("openapi", "ListJobs", limits) == 10  # the base hook's calls: ours
    assert (burst_of("dlc", 100), burst_of("dlc", 0.5), burst_of("kubernetes", 5)) == (1, 1, 10)
    assert burst_of("kubernetes", 50) == 100, "client-go's ratio of burst to rate"


def test_the_more_specific_key_wins_and_a_service_key_covers_its_defaults_actions() -> None:
    limits = rate_limits('{"dlc": 50, "dlc.ListJobs": 20, "kubernetes": 20, "vpc": 2.5}')

    assert configured_rate("dlc", "ListJobs", limits) == 20
    assert configured_rate("dlc", "GetJob", limits) == 50
    assert configured_rate("dlc", "CreateJob", limits) == 50, "dlc lowers CreateJob's 150 too"
    assert configured_rate("kubernetes", "*", limits) == 20
    assert configured_rate("vpc", "DescribeVpcs", limits) == 2.5
    assert configured_rate("ecs", "DescribeInstances", limits) == 10


def test_the_setting_names_every_service_a_connection_has_and_kubernetes() -> None:
    assert set(SETTING_SERVICES) == {*SERVICES, "kubernetes"}
    assert DEFAULT_RATES["kubernetes"] == 50


@pytest.mark.parametrize(
    ("text", "problem", "fix"),
    [
        ('{"dlc": 50', "not JSON", "write a JSON object"),
        ("[50]", "not a JSON object", "write one"),
        ('{"pai": 5}', "unknown service 'pai'", "name one of dlc, paistudio"),
        ('{"dlc.": 5}', "neither service nor service.Action", "e.g."),
        ('{"kubernetes.list": 5}', "one rate for every request", 'use "kubernetes"'),
        ('{"dlc": 0}', "0 is not a rate", "give requests per second"),
        ('{"dlc": "fast"}', "'fast' is not a rate", "give requests per second"),
        ('{"dlc": true}', "True is not a rate", "give requests per second"),
    ],
)
def test_a_setting_that_cannot_be_read_is_refused_naming_the_option_and_the_fix(
    text: str, problem: str, fix: str
) -> None:
    with pytest.raises(RateLimitSettingError) as refused:
        rate_limits(text)

    message = str(refused.value)
    assert message.startswith(
        "[aliyun_training] api_rate_limits (AIRFLOW__ALIYUN_TRAINING__API_RATE_LIMITS): "
    )
    assert problem in message and f"(fix: {fix}" in message


def test_one_bucket_per_account_service_and_action_made_with_the_configured_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SETTING, '{"dlc.GetJob": 40}')

    bucket = limiter("account-1", "dlc", "GetJob")

    assert limiter("account-1", "dlc", "GetJob") is bucket
    assert limiter("account-2", "dlc", "GetJob") is not bucket
    assert limiter("account-1", "dlc", "ListJobs") is not bucket
    assert (bucket.rate, bucket.burst) == (40, 1)
    assert (limiter("account-1", "dlc", "ListJobs").rate, cluster_limiter("k").burst) == (100, 100)
    assert cluster_limiter("k") is limiter("kubernetes:k", "kubernetes", "*")


def test_a_bad_setting_fails_the_first_use_and_a_forgotten_bucket_reads_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SETTING, '{"dlc": 50}')
    before = limiter("account-1", "dlc", "GetJob")
    monkeypatch.setenv(SETTING, '{"dcl": 50}')

    assert limiter("account-1", "dlc", "GetJob") is before, "a bucket keeps the rate it was made with"
    with pytest.raises(RateLimitSettingError, match="unknown service 'dcl'"):
        limiter("account-1", "dlc", "ListJobs")
    forget_limiters()
    monkeypatch.setenv(SETTING, '{"dlc": 20}')
    assert limiter("account-1", "dlc", "GetJob").rate == 20


# -- whose quota --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extras", "key"),
    [
        (
            {"role_arn": "acs:ram::1234567890123456:role/pai-dlc-runner", "access_key_id": AK},
            "1234567890123456",
        ),
        ({"role_arn": "acs:ram::1234567890123456:role/pai-dlc-runner"}, "1234567890123456"),
        ({"access_key_id": AK, "access_key_secret": "s3cr3t"}, AK),
        ({"role_arn": "not-an-arn", "access_key_id": AK}, AK),
        ({}, "default-chain:team_a_cloud"),
    ],
    ids=["role-with-key-pair", "role-by-default-chain", "key-pair", "unreadable-role", "default-chain"],
)
def test_the_account_key_is_the_roles_account_else_the_access_key_else_the_connection(
    extras: dict[str, str], key: str
) -> None:
    assert account_key(extras, "team_a_cloud") == key


def test_no_secret_is_ever_part_of_an_account_key() -> None:
    extras = {"access_key_id": AK, "access_key_secret": "s3cr3t", "security_token": "t0ken"}

    assert "s3cr3t" not in account_key(extras, "c") and "t0ken" not in account_key(extras, "c")


# -- every request takes a token ----------------------------------------------------------------


class CountingBucket:
    """Stands in for a bucket: counts the tokens taken, sync and async."""

    def __init__(self) -> None:
        self.taken = 0

    def acquire(self) -> None:
        self.taken += 1

    async def aacquire(self) -> None:
        self.taken += 1


@pytest.fixture
def buckets(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str, str], CountingBucket]:
    """The buckets the Alibaba Cloud hooks ask for, by (account, service, action)."""
    made: dict[tuple[str, str, str], CountingBucket] = {}

    def counting(account: str, service: str, action: str) -> CountingBucket:
        return made.setdefault((account, service, action), CountingBucket())

    monkeypatch.setattr(alibaba_cloud, "limiter", counting)
    return made


def failing(times: int, answer: str = "ok") -> Any:
    """A call failing with a dropped connection ``times`` times, then answering."""
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise ConnectionResetError(104, "Connection reset by peer")
        return answer

    return call


def hook(hook_class: type[AlibabaCloudHook] = DlcHook) -> AlibabaCloudHook:
    made = hook_class("rate_limited_cloud")
    made.load_extras({"access_key_id": AK, "access_key_secret": "s3cr3t", "region": "cn-wulanchabu"})
    made.retry_policy = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.002)
    return made


def test_every_attempt_of_a_call_takes_a_token_of_its_account_and_action(
    buckets: dict[tuple[str, str, str], CountingBucket],
) -> None:
    dlc = hook()

    assert dlc.call("GetJob", failing(2)) == "ok"
    assert dlc.call_once_only("GetPodEvents", failing(0)) == "ok"

    assert {key: bucket.taken for key, bucket in buckets.items()} == {
        (AK, "dlc", "GetJob"): 3,  # two retries are two more requests
        (AK, "dlc", "GetPodEvents"): 1,
    }


async def test_every_attempt_of_an_async_call_takes_a_token_too(
    buckets: dict[tuple[str, str, str], CountingBucket],
) -> None:
    dlc, base = hook(), hook(AlibabaCloudHook)
    retried = failing(1)

    async def answer() -> str:
        return retried()

    assert await dlc.acall("GetJob", answer) == "ok"
    assert await base.acall_once_only("ListJobs", lambda: asyncio.sleep(0, "ok")) == "ok"

    assert {key: bucket.taken for key, bucket in buckets.items()} == {
        (AK, "dlc", "GetJob"): 2,
        (AK, "openapi", "ListJobs"): 1,  # the base hook serves no one service
    }


class FakeApiClient:
    """The generated client's ``call_api``: answers ``statuses`` in turn (401 raises, as the client does)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.configuration = self.rest_client = None

    def call_api(self, *args: Any, **kwargs: Any) -> str:
        from kubernetes.client.exceptions import ApiException

        if self.statuses.pop(0) == kubernetes.UNAUTHORIZED:
            raise ApiException(status=kubernetes.UNAUTHORIZED)
        return "answer"


def test_every_kubernetes_request_takes_a_token_of_its_connection_a_repeat_after_401_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = CountingBucket()
    monkeypatch.setattr(kubernetes, "cluster_limiter", lambda conn_id: {"team_cluster": bucket}[conn_id])
    monkeypatch.setattr(KubernetesHook, "get_conn", lambda self: FakeApiClient(401, 200, 200))
    api = kubernetes.KubernetesHooks("team_cluster").sync.get_conn()

    assert api.call_api("/api/v1/pods", "GET") == "answer"  # 401, credentials reloaded, repeated
    assert api.call_api("/api/v1/pods", "GET", watch=True) == "answer"  # a watch is one request
    assert bucket.taken == 3


async def test_every_async_kubernetes_request_takes_a_token_of_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = CountingBucket()

    class FakeAsyncApiClient:
        async def call_api(self, *args: Any, **kwargs: Any) -> str:
            return "answer"

    @contextlib.asynccontextmanager
    async def opened(self: Any) -> AsyncIterator[Any]:
        yield FakeAsyncApiClient()

    monkeypatch.setattr(kubernetes, "cluster_limiter", lambda conn_id: {"team_cluster": bucket}[conn_id])
    monkeypatch.setattr(AsyncKubernetesHook, "get_conn", opened)

    async with kubernetes.KubernetesHooks("team_cluster").asynchronous.get_conn() as api:
        answers = [await api.call_api("/api/v1/pods", "GET") for _ in range(3)]

    assert answers == ["answer"] * 3 and bucket.taken == 3
