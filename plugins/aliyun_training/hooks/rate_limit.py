"""One client-side rate limiter per account and API, shared by everything in a process.

Alibaba Cloud throttles each API operation per account: a quota is a number of requests in a time
window ("Request Rate: 5/1 s", OpenAPI "Throttling and quota management"). A triggerer monitoring
hundreds of jobs, the hooks of the tasks it runs beside and the reconciler all call the same
operations of one account; each pacing itself alone would let a process send as many requests as
it has callers. So every attempt of a hook's call (a retry is a request too) first takes a token
from the one bucket of its (account, service, action) in the process (:func:`limiter`), and a
Kubernetes request one from its cluster connection's (:func:`cluster_limiter`). Throttling answers
that still come back are retried with backoff as before (``hooks/retry.py``).

The buckets reserve like golang.org/x/time/rate's ``Reserve``: a caller takes its token at once,
driving the count below zero if it must, and waits until the token would have been there, so
callers are served in the order they asked and a thread and any number of event loops share one
bucket under one lock. A caller that wakes well after its time (a stalled event loop) takes a new
token rather than send with every other late one at once.

Limits (requests per second) come from the ``api_rate_limits`` option of the ``aliyun_training``
section, else :data:`DEFAULT_RATES`; :func:`rate_limits` documents the setting.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from aliyun_training.provider_info import CONFIG_SECTION, RATE_LIMITS_OPTION

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: Our default for the actions of a service whose quota is not published: not Alibaba's number.
OUR_DEFAULT_RATE = 10.0
#: The service of Kubernetes API requests, and the one action its bucket is kept under.
KUBERNETES = "kubernetes"
ALL_ACTIONS = "*"
#: Ours, for one cluster connection, whatever the verb, as client-go keeps one limiter per
#: ``rest.Config``: 50 requests a second, in bursts of twice the rate as client-go's. client-go's
#: own defaults (``k8s.io/client-go/rest/config.go``: DefaultQPS 5, DefaultBurst 10) are its floor
#: for a single controller, which projects that watch many objects raise (kuberay, gardener: 50
#: and 100); the API server's Priority and Fairness still guards the cluster.
KUBERNETES_RATE = 50.0
KUBERNETES_BURST_FACTOR = 2

#: Requests per second of an action (``service.Action``) or every action of a service (``service``)
#: where the setting names none. ``dlc``: PAI-DLC 2020-12-03's published "Flow control
#: information" (every API 100/1 s, CreateJob 150/1 s). ``cms``: CloudMonitor's DescribeMetricList
#: reference ("You can call each API operation up to 50 times per second"). ``kubernetes``:
#: :data:`KUBERNETES_RATE`.
#: Every other service publishes no quota this table could cite: :data:`OUR_DEFAULT_RATE`. Its
#: services are the ones the setting may name.
DEFAULT_RATES: dict[str, float] = {
    "dlc": 100.0,
    "dlc.CreateJob": 150.0,
    **dict.fromkeys(
        ("paistudio", "aiworkspace", "vpc", "ecs", "nas", "cr", "oss", "sts", "ram"), OUR_DEFAULT_RATE
    ),
    "cms": 50.0,
    KUBERNETES: KUBERNETES_RATE,
}
SETTING_SERVICES = tuple(dict.fromkeys(key.partition(".")[0] for key in DEFAULT_RATES))

_KEY = re.compile(r"(?P<service>[a-z]+)(?:\.(?P<action>[A-Za-z0-9]+))?")
_ROLE_ARN = re.compile(r"acs:ram::(?P<account>\d+):role/", re.IGNORECASE)
_EXAMPLE = '{"dlc": 50, "dlc.ListJobs": 20, "kubernetes": 20}'


class RateLimitSettingError(ValueError):
    """The ``api_rate_limits`` option cannot be read; the message names it and the fix."""


class TokenBucket:
    """``rate`` requests per second with bursts of up to ``burst``, reserved one at a time.

    The bucket starts empty, not full: a process that just started (a triggerer restart inflating
    1,000 triggers at once) then ramps up at ``rate`` instead of spending a whole burst in its first
    instant, on top of whatever the process it replaces sent just before it stopped. It fills while
    idle, up to ``burst``: with a burst of 1, no window of ``t`` seconds ever holds more than
    ``1 + rate * t`` of its requests.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0 or burst < 1:
            raise ValueError(
                f"a token bucket needs a rate above 0 and a burst of at least 1, not {rate}/{burst}"
            )
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = 0.0
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token now; the seconds the caller must wait before sending (0: at once).

        The token may be one not there yet: the count goes below zero and the wait is the time the
        rate takes to pay that debt, so the next caller waits behind this one.
        """
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= 1.0
            return max(0.0, -self._tokens / self.rate)

    def _late(self, due: float) -> bool:
        """Whether a caller due at ``due`` woke more than ``LATE_SLOTS`` of its slots late (and more
        than ``LATE_SECONDS``): after a stall (a busy event loop, a paused process) every waiter due
        meanwhile would send at once."""
        return self._clock() - due > max(LATE_SLOTS / self.rate, LATE_SECONDS)

    def acquire(self) -> None:
        """Wait for a token (a thread's way); one that woke too late takes a later one."""
        due = self._clock() + self.reserve()
        while True:
            time.sleep(max(0.0, due - self._clock()))
            if not self._late(due):
                return
            due = self._clock() + self.reserve()

    async def aacquire(self) -> None:
        """Wait for a token without blocking the event loop; one that woke too late takes a later
        one. A waiter cancelled keeps its reservation: the rate stays a bound on what is sent."""
        due = self._clock() + self.reserve()
        while True:
            await asyncio.sleep(max(0.0, due - self._clock()))
            if not self._late(due):
                return
            due = self._clock() + self.reserve()


#: How many of its slots (1/rate seconds each) a waiter may wake after its own and still send.
#: Beyond that its slot has passed while it could not run, and the waiters due meanwhile would all
#: send together; it takes a new slot instead, and the one it missed goes unused.
LATE_SLOTS = 1
#: The least lateness that counts, whatever the rate: a thread or a task wakes a few milliseconds
#: after its time on any busy machine, and at a high rate a slot is shorter than that, so a waiter
#: held to its slot would never send, burning a token each time it tried.
LATE_SECONDS = 0.01


_buckets: dict[tuple[str, str, str], TokenBucket] = {}
_buckets_lock = threading.Lock()


def limiter(account: str, service: str, action: str) -> TokenBucket:
    """The process's bucket of ``action`` of ``service`` for ``account``, made on first use.

    Its rate is read from the setting when the bucket is made (:func:`configured_rate`), so a
    process reads the option once per bucket and never at import.
    """
    key = (account, service, action)
    with _buckets_lock:
        bucket = _buckets.get(key)
        if bucket is None:
            rate = configured_rate(service, action, rate_limits(_setting()))
            bucket = _buckets[key] = TokenBucket(rate, burst_of(service, rate))
        return bucket


def cluster_limiter(conn_id: str) -> TokenBucket:
    """The one bucket of every request through the Kubernetes connection ``conn_id``, whatever its
    verb: client-go keeps one limiter per ``rest.Config``, and a watch or log stream is one request."""
    return limiter(f"{KUBERNETES}:{conn_id}", KUBERNETES, ALL_ACTIONS)


def forget_limiters() -> None:
    """Drop every bucket, so the next use makes a new (empty) one with the setting read again."""
    with _buckets_lock:
        _buckets.clear()


def configured_rate(service: str, action: str, limits: Mapping[str, float]) -> float:
    """Requests per second of ``action``: the setting's ``service.Action``, then its ``service``,
    then :data:`DEFAULT_RATES` likewise; a service outside it (the base hook's ``openapi``, which
    serves no one service) gets :data:`OUR_DEFAULT_RATE`."""
    for table in (limits, DEFAULT_RATES):
        for key in (f"{service}.{action}", service):
            if key in table:
                return table[key]
    return OUR_DEFAULT_RATE


def burst_of(service: str, rate: float) -> int:
    """How many requests a bucket that has filled may send at once. One for an Alibaba Cloud API:
    its quota counts requests per second, and a burst on top of a second's rate could exceed it in
    that second; spacing requests 1/rate apart delays a sporadic caller by milliseconds at most.
    Two seconds' worth for Kubernetes, client-go's ratio of DefaultBurst to DefaultQPS."""
    return max(1, math.floor(rate * KUBERNETES_BURST_FACTOR)) if service == KUBERNETES else 1


def rate_limits(text: str) -> dict[str, float]:
    """The ``api_rate_limits`` option: a JSON object of ``service`` or ``service.Action`` to requests
    per second, e.g. ``{"dlc": 50, "dlc.ListJobs": 20, "kubernetes": 20}``; empty: the defaults.

    A more specific key wins (``dlc.ListJobs`` over ``dlc``); a service key also bounds the actions
    the defaults list apart (``dlc`` sets CreateJob too). An account's quota is shared by every
    deployment and team of the account, and each process of a deployment keeps its own buckets: an
    administrator whose account runs several deployments (or several triggerers) sets their share.
    ``kubernetes`` is one rate for every request of a cluster connection, so it takes no action.
    """
    if not text.strip():
        return {}
    try:
        limits = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _setting_error(f"not JSON ({exc})", f"write a JSON object, e.g. {_EXAMPLE}") from None
    if not isinstance(limits, dict):
        raise _setting_error(f"{text.strip()!r} is not a JSON object", f"write one, e.g. {_EXAMPLE}")
    for key, rate in limits.items():
        _check_entry(key, rate)
    return {key: float(rate) for key, rate in limits.items()}


def _check_entry(key: str, rate: Any) -> None:
    match = _KEY.fullmatch(key)
    if match is None:
        raise _setting_error(f"key {key!r} is neither service nor service.Action", f"e.g. {_EXAMPLE}")
    if match["service"] not in SETTING_SERVICES:
        raise _setting_error(
            f"unknown service {match['service']!r}", f"name one of {', '.join(SETTING_SERVICES)}"
        )
    if match["service"] == KUBERNETES and match["action"]:
        raise _setting_error(
            f"{key!r}: Kubernetes has one rate for every request of a connection", f'use "{KUBERNETES}"'
        )
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf:
        raise _setting_error(f"{key!r}: {rate!r} is not a rate", "give requests per second, a number above 0")


def _setting_error(problem: str, fix: str) -> RateLimitSettingError:
    variable = f"AIRFLOW__{CONFIG_SECTION.upper()}__{RATE_LIMITS_OPTION.upper()}"
    return RateLimitSettingError(
        f"[{CONFIG_SECTION}] {RATE_LIMITS_OPTION} ({variable}): {problem} (fix: {fix})"
    )


def _setting() -> str:
    from airflow.providers.common.compat.sdk import conf

    return conf.get(CONFIG_SECTION, RATE_LIMITS_OPTION, fallback="") or ""


def account_key(extras: Mapping[str, Any], conn_id: str) -> str:
    """Whose quota a connection's calls draw from, known from its extras without a call.

    Quotas count per Alibaba Cloud account. An assumed role's ARN names its account
    (``acs:ram::<account-id>:role/<name>``); a key pair's account is not known without asking, so
    its AccessKey ID (not a secret; the AccessKey secret is) stands for it, and two pairs of one
    account get a bucket each; the default chain's credentials are not known before they are read,
    so each connection using them gets its own. Connections of one key share buckets.
    """
    role = _ROLE_ARN.match(str(extras.get("role_arn") or ""))
    if role is not None:
        return role["account"]
    if extras.get("access_key_id"):
        return str(extras["access_key_id"])
    return f"default-chain:{conn_id}"
