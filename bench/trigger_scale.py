"""What monitoring N concurrent PAI-DLC jobs costs the triggerer, against a bare SDK polling loop.

A deferred training task costs the triggerer one ``TrainingJobTrigger`` for as long as the job runs,
so a thousand concurrent jobs are a thousand triggers sharing one process and one event loop. The
benchmark polls the same N jobs P times each, all jobs concurrently, in two modes:

- baseline: a bare asyncio loop that calls the SDK's ``get_job_async(job_id,
  GetJobRequest(need_detail=True))`` for every job through one shared SDK client, the least any
  monitor must do (``--running`` adds one ``get_pod_logs_async`` of the master pod per poll);
- trigger: N ``TrainingJobTrigger`` instances inflated from their JSON-serialized kwargs, the way the
  triggerer inflates them, each running its real ``run()``: it builds its own backend, hook,
  connection lookup and SDK client through ``get_backend`` and polls through ``JobMonitor.apoll()``,
  logging through structlog as JSON lines, as the triggerer's trigger-runner process does.

``run()`` loops until the job finishes, so the ``asyncio`` of the module holding the poll loop
(``triggers/base.py``) is replaced by a stand-in whose ``sleep`` counts the calling trigger's sleeps
and, at the P-th, raises a ``BaseException`` that the loop's ``except Exception`` lets pass. Each
trigger thus makes exactly P polls (P-1 real sleeps of ``--poll-interval``), as many as the baseline,
and nothing else of ``run()`` is replaced.

The jobs live in a DLC emulator (the one the integration tests use) served by this parent process;
each mode is measured in a fresh child process, so CPU time (the child's ``time.process_time()``)
never includes the emulator's work, and one mode's memory cannot hide in the other's. A child first
warms up on a spare job (imports, secrets backends, log processors: what a running triggerer paid long
ago), then measures: wall and CPU time, the CPU time of garbage collections within it, the RSS growth
with all N monitors idle after their last poll (what each job costs while it waits between polls)
and the peak RSS growth. Request counts come from the emulator, without creation and warm-up. Jobs
sit in Queuing for the whole run (with ``--running``: in Running, after writing a few log lines), so
every poll of a mode gets the same answer. Baseline and trigger take turns for ``--rounds`` rounds;
the table shows each mode's medians, and each ratio is the median of the rounds' trigger / baseline.

The trigger measured is today's per-job one: the children run with ``batched_status`` off (a
trigger batched into the shared listing of ``triggers/fleet.py`` never sleeps in the poll loop this
benchmark counts on), and under the process's API rate limits (``hooks/rate_limit.py``) set to
``BENCH_RATE_LIMITS``: the limiter's own work is the trigger's, and it paces the trigger mode's
wall time. A queued job in a quota is asked about in PAI Studio too (its queue position,
``ListQuotaWorkloads``, on every poll): the parent serves a PAI Studio emulator holding the quota
and the queued jobs, so that read is answered and counted rather than failing against an
unreachable endpoint.

Timings are machine-dependent, so the headline is the ratio trigger / baseline of CPU time per poll,
with the memory ratio per job next to it. Target: trigger CPU per poll <= 1.3 x baseline CPU per
poll. Exits 1 when the target fails.

``--fleet`` measures instead what a fleet of mixed jobs costs with and without the shared listing,
and a triggerer restart under the rate limits (``fleet_dlc.py``, ``fleet_ack.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import cProfile
import gc
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from project_env import PROJECT_ROOT, prepare_environment

if TYPE_CHECKING:
    from fakes.base import EmulatorServer
    from fakes.dlc import DlcEmulator, JobScript
    from fakes.paistudio import PaiStudioEmulator


CPU_RATIO_LIMIT = 1.3
#: Seconds between polls: baseline and trigger's (as fast as a loop allows), the fleet's (a tenth of
#: the trigger's default 10 s, with every other interval scaled alike).
POLL_INTERVAL = 0.01
FLEET_POLL_INTERVAL = 1.0
CONN_ID = "alibaba_cloud_default"
ACCESS_KEY_ID, ACCESS_KEY_SECRET = "LTAI-bench-access-key", "bench-secret-access-key-value"
REGION = "cn-wulanchabu"
#: Jobs created at once; creation is not measured, only kept from taking minutes.
CREATE_CONCURRENCY = 64
#: Bytes per KiB, the unit memory is reported in.
KIB = 1024
#: Actions whose requests the table reports per poll and job.
POLL_ACTIONS = ("GetJob", "GetPodLogs")
#: PAI Studio's action that answers a queued job's place in its quota's queue.
QUEUE_ACTION = "ListQuotaWorkloads"
#: The table's actions: a queued job's queue position is read beside its status.
TABLE_ACTIONS = (*POLL_ACTIONS, QUEUE_ACTION)
#: The provider's settings (as Airflow reads them from the environment) of today's per-job trigger.
BATCHED_STATUS_VARIABLE = "AIRFLOW__ALIYUN_TRAINING__BATCHED_STATUS"
RATE_LIMITS_VARIABLE = "AIRFLOW__ALIYUN_TRAINING__API_RATE_LIMITS"
#: The rate limits the measuring children run with: 1,000 requests a second per action, DLC's
#: published 100 a second as it is at a poll ten times faster than the default, and as much for PAI
#: Studio and a cluster, whose defaults (10 and 5 a second) would pace a per-job trigger to a poll
#: every minute or two. Not higher: the limiter makes a waiter that woke more than one slot (1/rate)
#: after its turn take a new one; a thousand triggers on one loop always wake more than 10 us late,
#: so at 100,000 a second they spin in it without sending (a lone waiter, at 1,000,000).
BENCH_RATE_LIMITS = json.dumps({"dlc": 1000, "paistudio": 1000, "kubernetes": 1000})


# -- environment -----------------------------------------------------------------------------------


def connection_json(endpoint: str, studio_endpoint: str | None = None) -> str:
    """The ``alibaba_cloud_default`` connection for the DLC emulator (and the PAI Studio one), as an
    ``AIRFLOW_CONN_*`` value.

    The same extras the integration tests use: plain HTTP to the emulator and a short retry policy.
    """
    endpoints = {"dlc": endpoint} | ({"paistudio": studio_endpoint} if studio_endpoint else {})
    extras = {
        "access_key_id": ACCESS_KEY_ID,
        "access_key_secret": ACCESS_KEY_SECRET,
        "region": REGION,
        "protocol": "http",
        "endpoints": endpoints,
        "retry": {"max_attempts": 10, "base_delay": 0.01, "max_delay": 0.05},
    }
    return json.dumps({"conn_type": "alibaba_cloud", "extra": extras})


# -- parent: the emulator and its jobs -------------------------------------------------------------


def job_script(running: bool) -> JobScript:
    """A lifecycle that stays non-terminal for an hour, far longer than any measurement.

    With ``running``, the job writes its log lines during a first one-second Running phase (the
    emulator spreads a script's lines over the first Running phase) and then stays Running and quiet:
    each trigger logs a few lines once and then polls the log without finding new lines.
    """
    from fakes.dlc import JobScript

    if not running:
        return JobScript(phases=[("Creating", 0.01), ("Queuing", 3600.0)], final="Succeeded")
    return JobScript(
        phases=[("Creating", 0.01), ("Running", 1.0), ("Running", 3600.0)],
        final="Succeeded",
        log_lines=[
            "Starting training: WORLD_SIZE=1 RANK=0",
            "epoch 1/3 loss=2.3026",
            "epoch 2/3 loss=1.8412",
            "epoch 3/3 loss=1.5107",
        ],
    )


def settle_seconds(running: bool) -> float:
    """How long after the last creation every job is in its steady state.

    Running jobs wait past the one-second log phase plus the backend's two-second log re-read
    window, so no poll re-reads a line and every poll of a mode sees the same answer.
    """
    return 3.5 if running else 0.5


def deepen_listen_backlog() -> None:
    """Let the emulator queue a thousand simultaneous connections.

    ``socketserver`` listens with a backlog of 5; a thousand clients connecting at once would then
    see dropped SYNs and one-second retransmits, and the SDK's connect timeout would turn waiting into
    errors. Only this parent process serves HTTP, so the class attribute is changed here alone.
    """
    http.server.ThreadingHTTPServer.request_queue_size = 4096


def start_emulator(running: bool) -> DlcEmulator:
    """The DLC emulator, serving from daemon threads of this process, with the benchmark's lifecycle."""
    from fakes.dlc import DlcEmulator

    deepen_listen_backlog()
    emulator = DlcEmulator({ACCESS_KEY_ID: ACCESS_KEY_SECRET}).start()
    emulator.default_script = job_script(running)
    return emulator


#: DLC's own settings of the benchmark's jobs: GU8TF nodes of a quota.
QUOTA_ID = "quota12345"
JOB_SETTINGS = {"quota_id": QUOTA_ID, "gpu_type": "GU8TF"}


def start_studio() -> PaiStudioEmulator:
    """PAI Studio, holding the jobs' quota: where a trigger reads a queued job's place in the queue."""
    from fakes.paistudio import PaiStudioEmulator

    studio = PaiStudioEmulator({ACCESS_KEY_ID: ACCESS_KEY_SECRET}).start()
    studio.add_quota(QUOTA_ID)
    return studio


def enqueue(studio: PaiStudioEmulator, job_ids: list[str]) -> None:
    """Put queued jobs in their quota's queue, as DLC does, so their queue position is known."""
    for job_id in job_ids:
        studio.add_workload(QUOTA_ID, job_id)


def job_spec() -> Any:
    """A one-node, eight-GPU PyTorch job (in the quota of ``JOB_SETTINGS``)."""
    from aliyun_training.spec import TrainingJobSpec

    return TrainingJobSpec(
        backend="dlc",
        gpus_per_node=8,
        cpu=96,
        memory_gib=800,
        image="registry.example.com/train/pytorch:2.13",
        command="torchrun --nproc_per_node=8 train.py",
    )


async def create_jobs(names: list[str]) -> list[str]:
    """Create a job of each name, ``CREATE_CONCURRENCY`` at a time, with the requests ``DlcBackend`` builds.

    ``DlcBackend.submit`` is synchronous and would create one job at a time; its request, sent through
    the async SDK, makes the same jobs in a fraction of the time. Returns the job ids.
    """
    from aliyun_training.backends.dlc.backend import DlcBackend

    backend, spec = DlcBackend(CONN_ID, job_settings=JOB_SETTINGS), job_spec()
    client = backend.hook.conn
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def create(name: str) -> str:
        request = backend.create_request(spec, name)
        async with gate:
            return (await client.create_job_async(request)).body.job_id

    return list(await asyncio.gather(*(create(name) for name in names)))


# -- child: all monitors idle at once --------------------------------------------------------------


def current_rss_kib() -> int:
    """Resident set size of this process now, in KiB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // KIB


def peak_rss_kib() -> int:
    """The process's peak RSS since the last ``reset_peak_rss``, in KiB (Linux's ``VmHWM``).

    Not ``ru_maxrss``: a child started from a parent that is larger keeps the parent's peak there.
    """
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def reset_peak_rss() -> None:
    """Start a new peak RSS at the current RSS, so the peak belongs to what runs next."""
    Path("/proc/self/clear_refs").write_text("5")


class AllIdle:
    """Holds every monitor after its last poll until all are there, and takes the RSS at that moment.

    Then every trigger sleeps between polls with its backend, hook and SDK client alive, as a thousand
    triggers of a triggerer do for most of their lives: the RSS growth per job is what each costs.
    """

    def __init__(self, monitors: int) -> None:
        self.outstanding = monitors
        self.released = asyncio.Event()
        self.rss_kib = 0

    def arrive(self) -> None:
        """One monitor is done; the last one takes the RSS and releases the others."""
        self.outstanding -= 1
        if self.outstanding == 0:
            self.rss_kib = current_rss_kib()
            self.released.set()

    async def wait(self) -> None:
        self.arrive()
        await self.released.wait()


_IDLE: contextvars.ContextVar[AllIdle] = contextvars.ContextVar("trigger_scale_idle")


# -- child: the trigger ----------------------------------------------------------------------------


class PollsDone(BaseException):
    """Ends a trigger after its polls; a BaseException, so ``run()``'s ``except Exception`` lets it pass."""


@dataclass
class PollBudget:
    """How many polls the trigger of the current task may make, and how many it has made."""

    limit: int
    made: int = 0


_BUDGET: contextvars.ContextVar[PollBudget] = contextvars.ContextVar("trigger_scale_budget")


async def budgeted_sleep(delay: float) -> None:
    """``asyncio.sleep`` for the poll loop: ``run()`` sleeps once after every poll but the last.

    After the last poll the trigger waits, in the middle of ``run()``, until every trigger is there.
    """
    budget = _BUDGET.get()
    budget.made += 1
    if budget.made >= budget.limit:
        await _IDLE.get().wait()
        raise PollsDone
    await asyncio.sleep(delay)


class BudgetedAsyncio:
    """Stands in for ``asyncio`` inside the poll loop's module; everything but ``sleep`` is the real one."""

    sleep = staticmethod(budgeted_sleep)

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)


def install_poll_budget() -> None:
    """Swap the poll loop's ``asyncio`` for the budgeted stand-in (this child process only)."""
    from aliyun_training.triggers import base

    # A deliberate monkeypatch of the module's own (not re-exported) asyncio import.
    base.asyncio = BudgetedAsyncio()  # type: ignore[assignment,attr-defined]


def serialized_triggers(job_ids: list[str], poll_interval: float) -> list[tuple[str, str]]:
    """(classpath, JSON kwargs) per job: what the deferring task leaves in the database."""
    from aliyun_training.triggers.training import TrainingJobTrigger

    rows = []
    for job_id in job_ids:
        trigger = TrainingJobTrigger(
            backend="dlc",
            handle={"backend": "dlc", "job_id": job_id, "name": f"bench-{job_id}"},
            backend_config={"alibaba_cloud_conn_id": CONN_ID},
            poll_interval=poll_interval,
        )
        classpath, kwargs = trigger.serialize()
        rows.append((classpath, json.dumps(kwargs)))
    return rows


async def drive_trigger(number: int, classpath: str, kwargs: str, polls: int, greenback: bool) -> str:
    """Inflate one trigger as the triggerer does and run it for ``polls`` polls; '' or what went wrong."""
    # airflow.sdk.module_loading is the public home of import_string; it re-exports it without __all__.
    from airflow.sdk.module_loading import import_string  # type: ignore[attr-defined]
    from structlog.contextvars import bind_contextvars

    if greenback:
        import greenback as portal

        await portal.ensure_portal()
    bind_contextvars(trigger_id=number)  # as the triggerer binds each trigger's id to its log lines
    _BUDGET.set(PollBudget(polls))
    trigger = import_string(classpath)(**json.loads(kwargs))
    try:
        async for event in trigger.run():
            outcome = f"trigger fired before its last poll: {event.payload}"
            break
        else:
            outcome = "trigger ended without an event"
    except PollsDone:
        return ""
    _IDLE.get().arrive()
    return outcome


async def run_triggers(rows: list[tuple[str, str]], polls: int, greenback: bool) -> tuple[list[str], int]:
    """All triggers concurrently on this loop, one task each, as the triggerer runs them.

    Returns each trigger's outcome and the RSS (KiB) while all of them were idle.
    """
    idle = AllIdle(len(rows))
    _IDLE.set(idle)
    tasks = [
        asyncio.create_task(drive_trigger(number, classpath, kwargs, polls, greenback))
        for number, (classpath, kwargs) in enumerate(rows)
    ]
    return list(await asyncio.gather(*tasks)), idle.rss_kib


# -- child: the baseline ---------------------------------------------------------------------------


def iso_now() -> str:
    """A ``StartTime`` for GetPodLogs: now, in the form DLC accepts."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def bare_logs(client: Any, job: Any, since: str | None) -> str:
    """Ask for the master pod's lines since ``since`` (the tail when None); returns the next ``since``."""
    from alibabacloud_pai_dlc20201203 import models

    asked = iso_now()
    if job.pods:
        request = models.GetPodLogsRequest(max_lines=500, start_time=since)
        await client.get_pod_logs_async(job.job_id, job.pods[0].pod_id, request)
    return asked


async def bare_monitor(client: Any, job_id: str, polls: int, interval: float, running: bool) -> str:
    """One job polled ``polls`` times with nothing but SDK calls; '' or what went wrong."""
    from alibabacloud_pai_dlc20201203 import models

    request = models.GetJobRequest(need_detail=True)
    since: str | None = None
    try:
        for poll in range(polls):
            if poll:
                await asyncio.sleep(interval)
            job = (await client.get_job_async(job_id, request)).body
            if running:
                since = await bare_logs(client, job, since)
    except Exception as exc:
        _IDLE.get().arrive()
        return f"{type(exc).__name__}: {exc}"
    await _IDLE.get().wait()
    return ""


async def run_baseline(
    job_ids: list[str], polls: int, interval: float, running: bool
) -> tuple[list[str], int]:
    """Every job polled concurrently through one SDK client, built once as a backend builds its own.

    Returns each job's outcome and the RSS (KiB) while all of them were idle.
    """
    from aliyun_training.hooks.dlc import DlcHook

    idle = AllIdle(len(job_ids))
    _IDLE.set(idle)
    hook = DlcHook(CONN_ID)
    await hook.aload()
    client = hook.conn
    outcomes = await asyncio.gather(
        *(bare_monitor(client, job_id, polls, interval, running) for job_id in job_ids)
    )
    return list(outcomes), idle.rss_kib


# -- child: measuring ------------------------------------------------------------------------------


def configure_trigger_logging(path: Path) -> BinaryIO:
    """Log as the triggerer's trigger-runner process does: structlog JSON lines to one stream.

    There the stream is a socket to the supervisor; here it is a file, so the trigger pays for
    rendering and writing every line it logs, and the terminal stays quiet.
    """
    from airflow.sdk.log import configure_logging

    stream = path.open("wb")
    configure_logging(json_output=True, output=stream, sending_to_supervisor=True)
    return stream


Monitoring = Callable[[], Coroutine[Any, Any, tuple[list[str], int]]]


def monitoring(mode: str, job_ids: list[str], polls: int, args: argparse.Namespace) -> Monitoring:
    """The coroutine function that monitors ``job_ids`` for ``polls`` polls each in ``mode``.

    The triggers' serialized kwargs are made here, before any clock starts: the database holds them.
    """
    if mode == "trigger":
        rows = serialized_triggers(job_ids, args.poll_interval)
        return lambda: run_triggers(rows, polls, args.greenback)
    return lambda: run_baseline(job_ids, polls, args.poll_interval, args.running)


class GcClock:
    """CPU seconds spent in the cyclic garbage collector while it is entered, through ``gc.callbacks``.

    A thousand monitors keep many objects alive and make many short-lived ones, so collections take a
    large share of the CPU time, and more in the mode that keeps more objects; the table shows that
    share so it is not mistaken for the monitors' own code.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._on_collection)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started


@contextlib.contextmanager
def profiled(path: Path | None) -> Iterator[None]:
    """Run the body under cProfile and write its stats to ``path``; without a path, just run it."""
    if path is None:
        yield
        return
    profiler = cProfile.Profile()
    with profiler:
        yield
    profiler.dump_stats(path)


def timed(monitor: Monitoring, profile: Path | None = None) -> dict[str, Any]:
    """Monitor on a fresh loop: wall, CPU and GC seconds, RSS growth (peak, all idle) and the errors.

    Garbage from the setup is collected first, so that it is not charged to the run and both modes
    start with empty collector generations.
    """
    gc.collect()
    reset_peak_rss()
    rss_before = current_rss_kib()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    with GcClock() as collector, profiled(profile):
        outcomes, idle_rss = asyncio.run(monitor())
    cpu_s, wall_s = time.process_time() - cpu_start, time.perf_counter() - wall_start
    errors = [outcome for outcome in outcomes if outcome]
    return {
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "gc_s": collector.seconds,
        "peak_rss_growth_kib": peak_rss_kib() - rss_before,
        "idle_rss_growth_kib": idle_rss - rss_before,
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
    }


def run_child(args: argparse.Namespace) -> None:
    """Child entry point: warm up on the spare job, then measure one mode on the others.

    The warm-up pays once what a running triggerer paid long ago (imports, the secrets backends, the
    log processors); the parent leaves the spare job's requests out of the counts.
    """
    *job_ids, spare = json.loads(args.job_ids.read_text())
    stream = configure_trigger_logging(args.result.with_suffix(".log"))
    if args.child == "trigger":
        install_poll_budget()
    warm_up = timed(monitoring(args.child, [spare], 2, args))
    if warm_up["errors"]:
        raise SystemExit(f"warm-up failed: {warm_up['first_error']}")
    result = timed(monitoring(args.child, job_ids, args.polls, args), args.profile)
    stream.close()
    args.result.write_text(json.dumps({"mode": args.child, **result}))


# -- parent: orchestration -------------------------------------------------------------------------


def child_command(mode: str, job_ids: Path, result: Path, args: argparse.Namespace, round_: int) -> list[str]:
    """The command line of one measuring child, carrying the parent's run settings."""
    command = [sys.executable, __file__, "--child", mode, "--job-ids", str(job_ids), "--result", str(result)]
    command += ["--polls", str(args.polls), "--poll-interval", str(args.poll_interval)]
    command += ["--running"] if args.running else []
    command += ["--greenback"] if args.greenback else []
    if args.profile_dir is not None and round_ == 0:
        command += ["--profile", str(args.profile_dir / f"{mode}.prof")]
    return command


def request_counts(emulators: list[EmulatorServer], since: list[int], spare_job: str) -> dict[str, int]:
    """Requests per action among those each emulator served after its first ``since``, leaving out
    the spare job's (named in the path, or in the query as PAI Studio's ``WorkloadIds``)."""
    counts: dict[str, int] = {}
    for emulator, first in zip(emulators, since, strict=True):
        for request in emulator.requests[first:]:
            if spare_job not in request.path and spare_job not in request.query.values():
                counts[request.action] = counts.get(request.action, 0) + 1
    return counts


def measure_in_subprocess(
    mode: str, emulators: list[EmulatorServer], job_ids: Path, args: argparse.Namespace, round_: int
) -> dict[str, Any]:
    """Measure one mode in a fresh interpreter; the requests the emulators served meanwhile are its own."""
    result_path = job_ids.parent / f"{mode}-{round_}.json"
    served_before = [len(emulator.requests) for emulator in emulators]
    command = child_command(mode, job_ids, result_path, args, round_)
    completed = subprocess.run(command, cwd=PROJECT_ROOT, env=os.environ, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"measuring {mode} failed (exit {completed.returncode}), see above")
    result = json.loads(result_path.read_text())
    if result["errors"]:
        raise SystemExit(f"{mode}: {result['errors']} jobs failed, e.g. {result['first_error']}")
    spare_job = json.loads(job_ids.read_text())[-1]
    return {**result, "requests": request_counts(emulators, served_before, spare_job)}


def per_poll(result: dict[str, Any], jobs: int, polls: int) -> dict[str, Any]:
    """Per-poll and per-job figures derived from one run's totals."""
    return {
        **result,
        "cpu_ms_per_poll": result["cpu_s"] * 1000 / (jobs * polls),
        "gc_ms_per_poll": result["gc_s"] * 1000 / (jobs * polls),
        "requests_per_poll": {
            action: result["requests"].get(action, 0) / (jobs * polls) for action in TABLE_ACTIONS
        },
        "peak_rss_kib_per_job": result["peak_rss_growth_kib"] / jobs,
        "idle_rss_kib_per_job": result["idle_rss_growth_kib"] / jobs,
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every number over the rounds of one mode; the rounds themselves are kept too."""
    numbers = [key for key, value in runs[0].items() if isinstance(value, int | float)]
    return {
        "mode": runs[0]["mode"],
        "requests_per_poll": {
            action: statistics.median(run["requests_per_poll"][action] for run in runs)
            for action in TABLE_ACTIONS
        },
        **{key: statistics.median(run[key] for run in runs) for key in numbers},
        "rounds": runs,
    }


def paired_ratio(baseline: dict[str, Any], trigger: dict[str, Any], key: str) -> float | None:
    """Median over the rounds of trigger / baseline for ``key``; None where the baseline grew by nothing.

    Each round's trigger run follows its baseline run within seconds, so pairing them cancels much of
    the drift in machine load that separate medians of the two modes would keep.
    """
    pairs = zip(baseline["rounds"], trigger["rounds"], strict=True)
    ratios = [t[key] / b[key] for b, t in pairs if b[key] > 0]
    return statistics.median(ratios) if ratios else None


def verdict(baseline: dict[str, Any], trigger: dict[str, Any]) -> dict[str, Any]:
    """The ratios trigger / baseline and the PASS/FAIL of the CPU target."""
    cpu_ratio = paired_ratio(baseline, trigger, "cpu_ms_per_poll")
    assert cpu_ratio is not None  # every run takes CPU time
    return {
        "cpu_ratio": cpu_ratio,
        "idle_memory_ratio": paired_ratio(baseline, trigger, "idle_rss_kib_per_job"),
        "peak_memory_ratio": paired_ratio(baseline, trigger, "peak_rss_kib_per_job"),
        "target": f"trigger CPU per poll <= {CPU_RATIO_LIMIT:g} x baseline CPU per poll",
        "passed": cpu_ratio <= CPU_RATIO_LIMIT,
    }


def format_table(results: list[dict[str, Any]]) -> str:
    """One row per mode (medians over the rounds): totals, then the figures the ratios use."""
    header = (
        f"{'mode':<9} {'wall s':>7} {'CPU s':>6} {'CPU ms/poll':>11} {'of it GC':>8} {'GetJob/poll':>11} "
        f"{'GetPodLogs/poll':>15} {'QueueInfo/poll':>14} {'idle RSS KiB/job':>16} {'peak RSS KiB/job':>16}"
    )
    rows = [
        f"{r['mode']:<9} {r['wall_s']:>7.2f} {r['cpu_s']:>6.2f} {r['cpu_ms_per_poll']:>11.3f} "
        f"{r['gc_ms_per_poll']:>8.3f} "
        f"{r['requests_per_poll']['GetJob']:>11.2f} {r['requests_per_poll']['GetPodLogs']:>15.2f} "
        f"{r['requests_per_poll'][QUEUE_ACTION]:>14.2f} "
        f"{r['idle_rss_kib_per_job']:>16.1f} {r['peak_rss_kib_per_job']:>16.1f}"
        for r in results
    ]
    return "\n".join([header, "-" * len(header), *rows])


def format_verdict(outcome: dict[str, Any]) -> str:
    """The ratios and the target's verdict."""

    def times(value: float | None) -> str:
        return f"{value:.3f} x" if value is not None else "n/a (the baseline did not grow)"

    return (
        f"CPU per poll, trigger / baseline (median of the rounds): {times(outcome['cpu_ratio'])}\n"
        f"RSS per job with all monitors idle, trigger / baseline: {times(outcome['idle_memory_ratio'])}\n"
        f"peak RSS growth per job, trigger / baseline: {times(outcome['peak_memory_ratio'])}\n"
        f"{'PASS' if outcome['passed'] else 'FAIL'}  {outcome['target']}"
    )


def quiet_parent_logging() -> None:
    """Keep the parent's own Airflow log lines (e.g. about masking the connection) off the terminal."""
    from airflow.sdk.log import configure_logging

    configure_logging(log_level="ERROR")


def run_parent(args: argparse.Namespace) -> dict[str, Any]:
    """Serve the emulators, create the jobs and one spare, then measure baseline and trigger by turns.

    The children inherit today's per-job trigger (``batched_status`` off) and the lifted rate limits.
    """
    quiet_parent_logging()
    os.environ[BATCHED_STATUS_VARIABLE] = "False"
    os.environ[RATE_LIMITS_VARIABLE] = BENCH_RATE_LIMITS
    emulator, studio = start_emulator(args.running), start_studio()
    try:
        os.environ["AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT"] = connection_json(emulator.endpoint, studio.endpoint)
        started = time.perf_counter()
        job_ids = asyncio.run(create_jobs([f"bench-trigger-{index:05d}" for index in range(args.jobs + 1)]))
        print(f"created {len(job_ids)} jobs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        if not args.running:
            enqueue(studio, job_ids)
        time.sleep(settle_seconds(args.running))
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "trigger": []}
        with tempfile.TemporaryDirectory(prefix="trigger-scale-") as tmp:
            ids_path = Path(tmp) / "job_ids.json"
            ids_path.write_text(json.dumps(job_ids))
            for round_ in range(args.rounds):
                for mode, results in runs.items():
                    result = measure_in_subprocess(mode, [emulator, studio], ids_path, args, round_)
                    results.append(per_poll(result, args.jobs, args.polls))
        failures = emulator.internal_errors + studio.internal_errors
        if failures:
            raise SystemExit(f"the emulators failed: {failures[:3]}")
    finally:
        emulator.stop()
        studio.stop()
    medians = [median_run(results) for results in runs.values()]
    return {"results": medians, **verdict(*medians)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line; --child, --job-ids, --result and --profile are the children's, hidden from --help."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="concurrent (DLC) jobs (default 1000)")
    parser.add_argument("--polls", type=int, default=5, help="status polls per job (default 5)")
    parser.add_argument(
        "--poll-interval",
        type=float,
        help="seconds between polls, every mode (default 0.01; with --fleet 1, a tenth of the default 10)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="baseline/trigger pairs, medians (default 5)")
    parser.add_argument("--running", action="store_true", help="jobs sit in Running with a few log lines")
    parser.add_argument(
        "--greenback",
        action="store_true",
        help="wrap each trigger in a greenback portal as the triggerer does",
    )
    parser.add_argument(
        "--profile-dir", type=Path, help="write cProfile stats of each mode's first round to this folder"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    fleet = parser.add_argument_group(
        "fleet", "--fleet: mixed DLC and ACK fleets, batched and not (fleet_dlc.py)"
    )
    fleet.add_argument("--fleet", action="store_true", help="measure the fleet modes and the restart")
    fleet.add_argument("--ack-jobs", type=int, default=300, help="concurrent ACK jobs (default 300)")
    fleet.add_argument(
        "--window-polls", type=int, default=18, help="poll intervals each mode is measured over (default 18)"
    )
    fleet.add_argument(
        "--restart-rate-limits",
        metavar="JSON",
        help="the restart's api_rate_limits setting, e.g. {\"dlc\": 50} (default: the provider's defaults)",
    )
    fleet.add_argument("--only", choices=("dlc", "ack"), help="measure one platform's fleet only")
    parser.add_argument("--child", choices=("baseline", "trigger"), help=argparse.SUPPRESS)
    parser.add_argument("--job-ids", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.poll_interval is None:
        args.poll_interval = FLEET_POLL_INTERVAL if args.fleet else POLL_INTERVAL
    if min(args.jobs, args.polls, args.rounds, args.ack_jobs) < 1:
        parser.error("--jobs, --ack-jobs, --polls and --rounds must be at least 1")
    if args.fleet and args.window_polls < 6:
        parser.error("--window-polls must be at least 6: the finishing jobs end 1.5 to 2.5 polls in")
    return args


def run_fleet(args: argparse.Namespace) -> int:
    """The fleet benchmark: DLC's three modes and the restart, then ACK's three modes; 1 when one of
    the DLC targets fails (ACK's are reported only)."""
    import fleet_ack
    import fleet_dlc
    from fleet_harness import quiet_dropped_connections

    quiet_parent_logging()
    quiet_dropped_connections()
    os.environ[RATE_LIMITS_VARIABLE] = BENCH_RATE_LIMITS  # the parent's own calls: creating the jobs
    outcome: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
        if args.only != "ack":
            outcome["dlc"] = fleet_dlc.run(args, Path(tmp))
        if args.only != "dlc":
            outcome["ack"] = fleet_ack.run(args, Path(tmp))
    settings = {"jobs": args.jobs, "ack_jobs": args.ack_jobs, "poll_interval": args.poll_interval}
    settings |= {"window_polls": args.window_polls, "steady_log_seconds": 9 * args.poll_interval}
    print(", ".join(f"{name}={value:g}" for name, value in settings.items()))
    if "dlc" in outcome:
        print(f"\nDLC, {args.jobs:,} jobs\n\n{fleet_dlc.report(outcome['dlc'])}")
    if "ack" in outcome:
        print(f"\nACK, {args.ack_jobs:,} jobs\n\n{fleet_ack.report(outcome['ack'])}")
    if args.json is not None:
        args.json.write_text(json.dumps({**settings, **outcome}, indent=2) + "\n")
    return 0 if outcome.get("dlc", {}).get("passed", True) else 1


def main(argv: list[str] | None = None) -> int:
    """Measure both modes, print the table and the verdict; 1 when the target fails."""
    args = parse_args(argv)
    prepare_environment()
    if args.child is not None:
        run_child(args)
        return 0
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    if args.fleet:
        return run_fleet(args)
    report = run_parent(args)
    settings = {"jobs": args.jobs, "polls": args.polls, "poll_interval": args.poll_interval}
    settings |= {"rounds": args.rounds, "running": args.running, "greenback": args.greenback}
    print(", ".join(f"{name}={value}" for name, value in settings.items()))
    print(format_table(report["results"]))
    print()
    print(format_verdict(report))
    if args.json is not None:
        args.json.write_text(json.dumps({**settings, **report}, indent=2) + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
