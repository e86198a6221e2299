"""The measuring side of the fleet benchmark (``trigger_scale.py --fleet``): a child process per mode.

A child talks to its parent in lines on stdout that start with ``fleet:`` and reads its go-ahead
from stdin, so that the parent creates the measured jobs only once the child has warmed up, and can
place the finishing jobs' ends inside the child's measurement window:

1. the child warms up on the spare jobs (imports, the shared hook, the log processors: what a
   running triggerer paid long ago), then says ``ready``;
2. the parent creates the jobs and answers with the path of the plan (every job's kind, the
   trigger's serialized kwargs the deferring task left in the database, what a bare loop needs);
3. the child starts one monitor per job, spread over one log interval as tasks defer at different
   times (so that the steady jobs' log reads are spread too, and a window holds as many as it
   would in a triggerer that has run for hours), waits until each has polled once (the lead-in)
   and says ``window <time.time()>``; the parent then re-times the finishing jobs to end inside
   the window;
4. after the window the child says ``window-end``, cancels every monitor still watching (as the
   triggerer cancels a trigger it no longer runs) and writes its result.

A restart child skips the warm-up and the window: it inflates every trigger at once in a fresh
process (no rate-limit bucket has filled yet) and reports when each had polled once.

What is counted, and how: every completed ``TrainingJobTrigger.poll`` (and every pass of a bare
loop) per job; each trigger's event and its time; when a shared listing first handed a trigger its
job's end (``Watch.next``) and how long each listing took (``alisted_statuses``). Those are thin
wrappers on the classes, installed in the child only, which record a time and call through.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trigger_scale import (
    CONN_ID,
    GcClock,
    bare_logs,
    configure_trigger_logging,
    current_rss_kib,
    peak_rss_kib,
    profiled,
    reset_peak_rss,
)

#: The prefix of every line a child writes for its parent.
PROTOCOL = "fleet:"
#: DLC statuses after which a job changes no more (the SDK's GetJob docstring lists them).
DLC_ENDED = frozenset({"Succeeded", "Failed", "Stopped"})
#: How long a child waits for every monitor's first poll before it gives up.
FIRST_POLLS_LIMIT_S = 120.0
#: How long a restart goes on once every trigger has polled: the requests then in flight arrive.
RESTART_TAIL_S = 1.0
#: A warm-up watches the spare jobs for this many poll intervals.
WARM_UP_POLLS = 2.5


def announce(message: str) -> None:
    """Tell the parent ``message`` (a line of its own on stdout, flushed at once)."""
    print(f"{PROTOCOL} {message}", flush=True)


@dataclass
class Tally:
    """What the monitors of one run did, recorded as they did it (``time.time()`` seconds)."""

    jobs: int
    polls: Counter[str] = field(default_factory=Counter)
    #: Per job: when its trigger fired (or its bare loop saw the end), and the outcome's status.
    events: dict[str, tuple[float, str]] = field(default_factory=dict)
    #: Per job: when its monitor first had a status that says the job ended.
    noticed: dict[str, float] = field(default_factory=dict)
    #: Every shared listing: (start, seconds).
    listings: list[tuple[float, float]] = field(default_factory=list)
    #: Per API action: when the process sent each request, its rate-limit token in hand.
    sent: dict[str, list[float]] = field(default_factory=dict)
    #: What the monitors share and must close once they are stopped (a bare loop's API client).
    closers: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)
    _started: set[str] = field(default_factory=set)
    _all_started: asyncio.Event = field(default_factory=asyncio.Event)

    def polled(self, job_id: str) -> None:
        self.polls[job_id] += 1
        self._start(job_id)

    def ended(self, job_id: str, status: str) -> None:
        self.events[job_id] = (time.time(), status)
        self._start(job_id)

    def notice(self, job_id: str) -> None:
        self.noticed.setdefault(job_id, time.time())

    def _start(self, job_id: str) -> None:
        self._started.add(job_id)
        if len(self._started) >= self.jobs:
            self._all_started.set()

    async def all_started(self) -> None:
        """Wait until every job's monitor has polled once (or seen its job end)."""
        await self._all_started.wait()


#: The tally of the run in progress: the class wrappers below record into it.
_TALLY: list[Tally] = []


def tally() -> Tally:
    return _TALLY[-1]


def record_trigger_activity() -> None:
    """Wrap ``TrainingJobTrigger.poll``, ``Watch.next`` and the listings to record into the tally.

    Each wrapper awaits the real method and notes a count or a time; nothing else changes.
    """
    from aliyun_training.backends.ack.backend import AckBackend
    from aliyun_training.backends.dlc.backend import DlcBackend
    from aliyun_training.triggers.fleet import Watch
    from aliyun_training.triggers.training import TrainingJobTrigger

    poll, next_sighting = TrainingJobTrigger.poll, Watch.next

    async def counted_poll(self: TrainingJobTrigger) -> Any:
        outcome = await poll(self)
        tally().polled(self.handle["job_id"])
        return outcome

    async def noticing_next(self: Watch) -> Any:
        sighting = await next_sighting(self)
        if sighting is not None and sighting.state.is_terminal:
            tally().notice(self.handle.job_id)
        return sighting

    TrainingJobTrigger.poll = counted_poll  # type: ignore[method-assign]
    Watch.next = noticing_next  # type: ignore[method-assign]
    for backend in (DlcBackend, AckBackend):
        backend.alisted_statuses = timed_listing(backend.alisted_statuses)  # type: ignore[method-assign,assignment]


def record_sends() -> None:
    """Wrap ``AlibabaCloudHook.rate_limiter`` so that each token taken is noted with its action: the
    moment a request leaves the limiter for the wire, which the emulator's receive time follows."""
    from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook

    bucket_of = AlibabaCloudHook.rate_limiter

    def noting_limiter(self: AlibabaCloudHook, action: str) -> Any:
        return NotedBucket(bucket_of(self, action), action)

    AlibabaCloudHook.rate_limiter = noting_limiter  # type: ignore[method-assign]


@dataclass(frozen=True)
class NotedBucket:
    """A rate-limit bucket that notes when each of its waiters got its token."""

    bucket: Any
    action: str

    def acquire(self) -> None:
        self.bucket.acquire()
        tally().sent.setdefault(self.action, []).append(time.time())

    async def aacquire(self) -> None:
        await self.bucket.aacquire()
        tally().sent.setdefault(self.action, []).append(time.time())


def timed_listing(listing: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def timed(self: Any, handles: Any) -> Any:
        started, clock = time.time(), time.perf_counter()
        statuses = await listing(self, handles)
        tally().listings.append((started, time.perf_counter() - clock))
        return statuses

    return timed


# -- monitors --------------------------------------------------------------------------------------


Jobs = list[dict[str, Any]]
#: Starts one monitor task per job on the running loop: (jobs, poll interval, spread of the starts).
Starter = Callable[[Jobs, float, float], Awaitable[list["asyncio.Task[None]"]]]
#: The golden ratio's fraction: job n starts at (n * it) mod 1 of the spread, so that the starts of
#: the jobs of every kind (the plan lists them kind by kind) cover the spread evenly.
GOLDEN = 0.6180339887498949


def start_delay(number: int, spread: float) -> float:
    return spread * (number * GOLDEN % 1.0)


async def drive_trigger(number: int, job: dict[str, Any], delay: float) -> None:
    """Inflate the job's trigger as the triggerer does, ``delay`` seconds from now, and run it until
    its event (or a cancel)."""
    # airflow.sdk.module_loading is the public home of import_string; it re-exports it without __all__.
    from airflow.sdk.module_loading import import_string  # type: ignore[attr-defined]
    from structlog.contextvars import bind_contextvars

    await asyncio.sleep(delay)
    bind_contextvars(trigger_id=number)  # as the triggerer binds each trigger's id to its log lines
    classpath, kwargs = job["trigger"]
    trigger = import_string(classpath)(**json.loads(kwargs))
    async for event in trigger.run():
        tally().ended(job["job_id"], event.payload["status"])
        return


async def start_triggers(jobs: Jobs, _interval: float, spread: float) -> list[asyncio.Task[None]]:
    return [
        asyncio.create_task(drive_trigger(number, job, start_delay(number, spread)))
        for number, job in enumerate(jobs)
    ]


async def bare_dlc(client: Any, job_id: str, interval: float, delay: float) -> None:
    """GetJob and the master pod's new lines every interval until the job ends: no Airflow at all."""
    from alibabacloud_pai_dlc20201203 import models

    request = models.GetJobRequest(need_detail=True)
    since: str | None = None
    await asyncio.sleep(delay)
    while True:
        job = (await client.get_job_async(job_id, request)).body
        ended = job.status in DLC_ENDED
        if ended:
            tally().notice(job_id)
        since = await bare_logs(client, job, since)
        tally().polled(job_id)
        if ended:
            tally().ended(job_id, job.status.lower())
            return
        await asyncio.sleep(interval)


async def start_bare_dlc(jobs: Jobs, interval: float, spread: float) -> list[asyncio.Task[None]]:
    """One bare loop per job through one SDK client, built once as a backend builds its own."""
    from aliyun_training.hooks.dlc import DlcHook

    hook = DlcHook(CONN_ID)
    await hook.aload()
    return [
        asyncio.create_task(bare_dlc(hook.conn, job["job_id"], interval, start_delay(number, spread)))
        for number, job in enumerate(jobs)
    ]


#: Kubeflow's training-operator API group and the conditions that end a job (``JobConditionType``).
KUBEFLOW_GROUP = "kubeflow.org"
KUBEFLOW_ENDED = frozenset({"Succeeded", "Failed"})
#: Pod phases whose containers have started, so that their log can be read.
STARTED_PHASES = frozenset({"Running", "Succeeded", "Failed"})


async def bare_ack(core: Any, custom: Any, job: dict[str, Any], interval: float, delay: float) -> None:
    """GET the CR, list its pods by arena's ``release`` label and read the first started pod's new
    lines, every interval until the CR's conditions say the job ended: kubernetes_asyncio alone."""
    job_id, bare = job["job_id"], job["bare"]
    namespace, name = bare["namespace"], bare["name"]
    since: float | None = None
    await asyncio.sleep(delay)
    while True:
        cr = await custom.get_namespaced_custom_object(
            KUBEFLOW_GROUP, bare["version"], namespace, bare["plural"], name
        )
        pods = await core.list_namespaced_pod(namespace, label_selector=f"release={name}")
        conditions = (cr.get("status") or {}).get("conditions") or []
        ended = [
            c["type"] for c in conditions if c.get("type") in KUBEFLOW_ENDED and c.get("status") == "True"
        ]
        if ended:
            tally().notice(job_id)
        started = [pod for pod in pods.items if pod.status.phase in STARTED_PHASES]
        if started:
            asked = time.time()
            back = {"since_seconds": max(1, math.ceil(asked - since) + 1)} if since is not None else {}
            await core.read_namespaced_pod_log(started[0].metadata.name, namespace, timestamps=True, **back)
            since = asked
        tally().polled(job_id)
        if ended:
            tally().ended(job_id, ended[0].lower())
            return
        await asyncio.sleep(interval)


async def start_bare_ack(jobs: Jobs, interval: float, spread: float) -> list[asyncio.Task[None]]:
    """One bare loop per job through one API client of the connection's kubeconfig."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=jobs[0]["bare"]["kubeconfig"], client_configuration=configuration
    )
    api = client.ApiClient(configuration)
    tally().closers.append(api.close)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    return [
        asyncio.create_task(bare_ack(core, custom, job, interval, start_delay(number, spread)))
        for number, job in enumerate(jobs)
    ]


def starter(mode: str) -> Starter:
    return {"bare-dlc": start_bare_dlc, "bare-ack": start_bare_ack}.get(mode, start_triggers)


# -- runs ------------------------------------------------------------------------------------------


async def stop_all(tasks: list[asyncio.Task[None]]) -> list[str]:
    """Cancel every monitor still watching and wait for them; what went wrong in any, as text."""
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for close in tally().closers:
        await close()
    return [
        f"{type(outcome).__name__}: {outcome}"
        for outcome in outcomes
        if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError)
    ]


@dataclass
class Clocks:
    """Wall, CPU and garbage-collection seconds at one moment, and the polls made by then."""

    wall: float
    cpu: float
    gc: float
    polls: Counter[str]

    @classmethod
    def now(cls, collector: GcClock) -> Clocks:
        return cls(time.time(), time.process_time(), collector.seconds, Counter(tally().polls))


@dataclass(frozen=True)
class Window:
    """How long a run is measured (after its lead-in), over how long its monitors start, and whether
    the parent hears of it."""

    interval: float
    seconds: float
    spread: float = 0.0
    profile: Path | None = None
    announced: bool = True

    def say(self, message: str) -> None:
        if self.announced:
            announce(message)


async def observe(start: Starter, jobs: Jobs, window: Window, collector: GcClock) -> dict[str, Any]:
    """Start every monitor, wait for the lead-in, measure the window, then stop them."""
    started = time.time()
    tasks = await start(jobs, window.interval, window.spread)
    await first_polls(tasks)
    before = Clocks.now(collector)
    window.say(f"window {before.wall!r}")
    with profiled(window.profile):
        await asyncio.sleep(window.seconds)
    after = Clocks.now(collector)
    rss_kib = current_rss_kib()
    window.say("window-end")
    errors = await stop_all(tasks)
    return {
        "lead_in_s": before.wall - started,
        "window": {"start": before.wall, "end": after.wall},
        "wall_s": after.wall - before.wall,
        "cpu_s": after.cpu - before.cpu,
        "gc_s": after.gc - before.gc,
        "polls": dict(after.polls - before.polls),
        "rss_kib": rss_kib,
        "errors": errors,
    }


async def first_polls(tasks: list[asyncio.Task[None]]) -> None:
    """Wait until every monitor has polled once; a monitor that failed before its first poll, or a
    wait of ``FIRST_POLLS_LIMIT_S``, ends the child with what went wrong."""
    try:
        await asyncio.wait_for(tally().all_started(), FIRST_POLLS_LIMIT_S)
    except TimeoutError:
        failed = [task.exception() for task in tasks if task.done() and not task.cancelled()]
        failure = next((repr(exc) for exc in failed if exc is not None), "none failed")
        raise SystemExit(f"not every monitor polled within {FIRST_POLLS_LIMIT_S:g} s ({failure})") from None


async def restart(jobs: Jobs, interval: float) -> dict[str, Any]:
    """Every trigger at once, as a restarted triggerer inflates the ones it took over; when each had
    polled once, and ``RESTART_TAIL_S`` more before they are stopped."""
    started = time.time()
    tasks = await start_triggers(jobs, interval, 0.0)
    await first_polls(tasks)
    all_polled = time.time()
    await asyncio.sleep(RESTART_TAIL_S)
    return {
        "window": {"start": started, "end": time.time()},
        "all_polled_s": all_polled - started,
        "errors": await stop_all(tasks),
    }


async def reads_alone(jobs: Jobs) -> dict[str, float]:
    """How long one page of the shared listing (ListJobs of 100 ids, interpreted) and one finished
    job's final reads (GetJob with its details, then its log) take on their own, before the run:
    the median of three of each, in seconds."""
    from aliyun_training.backends.base import JobHandle
    from aliyun_training.backends.dlc.backend import DlcBackend
    from aliyun_training.hooks.dlc import LIST_JOBS_PAGE_SIZE

    backend = DlcBackend(CONN_ID)
    handles = [JobHandle(backend="dlc", job_id=job["job_id"], name=job["job_id"]) for job in jobs]
    page = handles[:LIST_JOBS_PAGE_SIZE]
    steady = next(handle for handle, job in zip(handles, jobs, strict=True) if job["kind"] == "steady")
    pages, finals = [], []
    for _ in range(3):
        clock = time.perf_counter()
        await backend.alisted_statuses(page)
        pages.append(time.perf_counter() - clock)
        clock = time.perf_counter()
        backend.forget(steady)
        await backend.astatus(steady)
        await backend.alogs(steady, None)
        finals.append(time.perf_counter() - clock)
    return {"page_read_s": statistics.median(pages), "final_reads_s": statistics.median(finals)}


def await_plan() -> Jobs:
    """The parent's go-ahead: a line with the path of the plan (the jobs, as it created them)."""
    line = sys.stdin.readline().strip()
    if not line:
        raise SystemExit("the parent went away before it sent the plan")
    plan: Jobs = json.loads(Path(line).read_text())["jobs"]
    return plan


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, say ready, take the plan and measure it: the child's whole life."""
    start = starter(args.mode)
    with GcClock() as collector:
        if args.mode != "restart":
            warm_up = json.loads(args.warm_up.read_text())["jobs"]
            _TALLY.append(Tally(len(warm_up)))
            warming = Window(args.poll_interval, WARM_UP_POLLS * args.poll_interval, announced=False)
            warmed = asyncio.run(observe(start, warm_up, warming, collector))
            if warmed["errors"]:
                raise SystemExit(f"warm-up failed: {warmed['errors'][0]}")
        announce("ready")
        jobs = await_plan()
        alone = asyncio.run(reads_alone(jobs)) if args.reads_alone else {}
        _TALLY.append(Tally(len(jobs)))
        gc.collect()
        reset_peak_rss()
        rss_before = current_rss_kib()
        if args.mode == "restart":
            result = asyncio.run(restart(jobs, args.poll_interval))
        else:
            window_s = args.window_polls * args.poll_interval
            window = Window(args.poll_interval, window_s, args.start_spread, args.profile)
            result = asyncio.run(observe(start, jobs, window, collector))
            result["rss_growth_kib"] = result.pop("rss_kib") - rss_before
    run = tally()
    return {
        **result,
        **alone,
        "mode": args.mode,
        "jobs": len(jobs),
        "peak_rss_growth_kib": peak_rss_kib() - rss_before,
        "events": run.events,
        "noticed": run.noticed,
        "listings": run.listings,
        "sent": run.sent,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A measuring child of trigger_scale.py --fleet.")
    parser.add_argument("--mode", choices=("bare-dlc", "bare-ack", "triggers", "restart"), required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--warm-up", type=Path, help="the spare jobs' plan (not for a restart)")
    parser.add_argument("--poll-interval", type=float, required=True)
    parser.add_argument("--window-polls", type=int, required=True)
    parser.add_argument("--start-spread", type=float, default=0.0, help="seconds over which monitors start")
    parser.add_argument("--reads-alone", action="store_true", help="time a page and a job's final reads")
    parser.add_argument("--profile", type=Path)
    return parser.parse_args(argv)


def child_main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stream = configure_trigger_logging(args.result.with_suffix(".log"))
    if args.mode in ("triggers", "restart"):
        record_trigger_activity()
    if args.mode == "restart":
        record_sends()
    result = measure(args)
    stream.close()
    args.result.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    from project_env import prepare_environment

    prepare_environment()
    sys.exit(child_main())
