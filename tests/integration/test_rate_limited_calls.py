"""Rate limits as the cloud and the cluster see them: the real DLC SDK through DlcHook against the DLC
emulator, and the cncf.kubernetes hooks against the Kubernetes API fake, with ``api_rate_limits``
set. Many callers of one process (asyncio tasks and threads, through different hooks of one
account) start at once; the requests arrive no faster than the configured rate from the moment the
limiter is made (it starts empty), and a throttled answer is still retried."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import TYPE_CHECKING

import pytest

from aliyun_training.hooks.dlc import DlcHook
from aliyun_training.hooks.kubernetes import KubernetesHooks
from fakes.base import FaultPlan
from fakes.dlc import DlcEmulator
from fakes.kube import CONN_ID, NS, kubernetes_fake

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

AK, SK = "LTAI-rate-limited-calls", "rate-limited-calls-secret"
REGION = "cn-wulanchabu"
SETTING = "AIRFLOW__ALIYUN_TRAINING__API_RATE_LIMITS"
JOB_ID = "dlc-rate-limited"
#: How early a request may seem to arrive: the clocks' rounding, not the limiter's.
EARLY = 0.002


@pytest.fixture
def dlc(monkeypatch: pytest.MonkeyPatch) -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        emulator.replay({"name": "rate-limited", "job": {"JobId": JOB_ID, "Status": "Running"}})
        extras = {
            "access_key_id": AK,
            "access_key_secret": SK,
            "region": REGION,
            "protocol": "http",
            "endpoints": {"dlc": emulator.endpoint},
            "retry": {"max_attempts": 10, "base_delay": 0.001, "max_delay": 0.005},
        }
        monkeypatch.setenv(
            "AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", json.dumps({"conn_type": "alibaba_cloud", "extra": extras})
        )
        yield emulator
        assert emulator.internal_errors == []


def arrivals(emulator: DlcEmulator) -> list[float]:
    """When each request the emulator answered arrived (throttled ones included)."""
    return [request.at for request in emulator.requests]


def ahead_of_the_rate(times: list[float], start: float, rate: float) -> list[float]:
    """The times (seconds after ``start``) of requests that came before the rate allowed them: the
    k-th (from 1) is due k/rate after the limiter was made, after ``start``, as it starts empty.

    So no second from the start holds more than ``rate`` requests. Windows that begin later are
    not checked: a request sent late (here the first ones, while the SDK loads) goes out beside the
    next on time, as with any limiter; the bucket bounds those by rate + burst."""
    return [t - start for k, t in enumerate(sorted(times), 1) if t - start < k / rate - EARLY]


def test_concurrent_sync_and_async_calls_of_one_account_arrive_at_the_configured_rate(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """35 GetJob from asyncio tasks (a triggerer's) and 15 from threads, each thread with a hook of
    its own, share the account's GetJob bucket: 50 at 40 per second."""
    rate, from_loop, from_threads = 40, 35, 15
    monkeypatch.setenv(SETTING, json.dumps({"dlc.GetJob": rate}))
    answers: list[str] = []

    async def triggers() -> None:
        hook = DlcHook()
        bodies = await asyncio.gather(*(hook.aget_job(JOB_ID) for _ in range(from_loop)))
        answers.extend(body.status for body in bodies)

    def task() -> None:
        answers.append(DlcHook().get_job(JOB_ID).status)

    start = time.time()  # the emulator's arrival clock
    threads = [threading.Thread(target=asyncio.run, args=(triggers(),))]
    threads += [threading.Thread(target=task) for _ in range(from_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    requests = dlc.requests_for("GetJob")
    assert answers == ["Running"] * (from_loop + from_threads)
    assert [r.status for r in requests] == [200] * (from_loop + from_threads)
    assert ahead_of_the_rate(arrivals(dlc), start, rate) == []


def test_a_throttled_answer_is_retried_and_every_retry_waits_for_a_token(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    rate = 50
    monkeypatch.setenv(SETTING, json.dumps({"dlc": rate}))
    dlc.faults = FaultPlan(throttle_rate=0.5, seed=11, actions=frozenset({"GetJob"}))
    hook = DlcHook()
    start = time.time()  # the emulator's arrival clock

    statuses = [hook.get_job(JOB_ID).status for _ in range(8)]

    faults = [r.fault for r in dlc.requests_for("GetJob")]
    assert statuses == ["Running"] * 8
    assert faults.count("throttle") >= 3 and faults.count("") == 8
    assert ahead_of_the_rate(arrivals(dlc), start, rate) == [], "a retry is a request: it takes a token"


def test_kubernetes_requests_of_one_connection_arrive_at_its_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two owners' hooks of one connection, sync from threads and async on a loop, share one bucket."""
    rate, from_threads, from_loop = 40, 10, 10
    monkeypatch.setenv(SETTING, json.dumps({"kubernetes": rate}))
    done: list[float] = []
    lock = threading.Lock()

    def note() -> None:
        with lock:
            done.append(time.monotonic())

    def task() -> None:
        KubernetesHooks(CONN_ID).sync.core_v1_client.list_namespaced_pod(NS)
        note()

    async def triggers() -> None:
        async def one() -> None:
            async with KubernetesHooks(CONN_ID).asynchronous.get_conn() as api:
                from kubernetes_asyncio import client

                await client.CoreV1Api(api).list_namespaced_pod(NS)
            note()

        await asyncio.gather(*(one() for _ in range(from_loop)))

    with kubernetes_fake(tmp_path, monkeypatch) as fake:
        start = time.monotonic()
        threads = [threading.Thread(target=task) for _ in range(from_threads)]
        threads.append(threading.Thread(target=asyncio.run, args=(triggers(),)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

        assert fake.count("GET", f"/namespaces/{NS}/pods") == from_threads + from_loop
    assert len(done) == from_threads + from_loop
    assert ahead_of_the_rate(done, start, rate) == []
