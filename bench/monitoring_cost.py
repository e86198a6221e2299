"""What watching N concurrent PAI-DLC jobs costs a real deployment: deferred, or polled from worker slots.

A deferrable ``TrainingJobOperator`` submits its job from a worker slot, hands the job to a
``TrainingJobTrigger`` and gives the slot back; the triggerer polls the job until it ends. With
``deferrable=False`` the task polls from its slot instead, and the slot (a Celery pool process and
the task process it forks) stays taken for as long as the job runs. ``bench/trigger_scale.py``
prices a trigger against a bare SDK loop inside one process; this benchmark prices the two ways of
waiting in the deployment users run: api-server, scheduler, dag-processor, triggerer and Celery
worker (``fakes/deployment.py``, on PostgreSQL and Redis when they answer on 127.0.0.1), each a
process tree of its own, against the DLC emulator of the integration tests served from this process.
Its jobs stay Running for an hour after writing four log lines, far longer than a run of this script.

Each mode gets a fresh deployment whose DAGs are ``bench/dags/monitoring_cost.py``:

- deferred: ``monitoring_cost_deferred`` maps ``--jobs`` (200) deferrable tasks on a worker with
  ``DEFERRED_WORKER_SLOTS`` slots, which only start the tasks. Once all are deferred, the window
  measures the triggerer.
- sync: ``monitoring_cost_sync`` maps ``--sync-jobs`` (20) tasks with ``deferrable=False`` on a
  worker with exactly that many slots. Every slot is two Airflow processes of about 200 MiB each, so
  200 would not fit a small machine; the per-slot figures are measured on as many as fit, and the
  report scales them to ``--jobs`` slots. Once all tasks run, the window measures the slots.

Both poll every ``--poll-interval`` seconds (the operator's default, 10 s). After every monitor has
polled twice (first-poll work such as reading the log lines is done), a window of ``--window``
seconds samples every process tree every few seconds. Processes are found by parent pid, not process
group: the task supervisor puts each task process in a group of its own. Per mode:

- memory per job: deferred, the triggerer tree's RSS (and PSS) growth from before the run was
  triggered to the window's mean, over N; sync, the window's mean RSS (PSS) of the slot processes
  (each pool process running a task, and its task process), over the slots. PSS splits pages a
  forked process still shares with its parent, so it is the fairer sum; RSS counts them once per
  process.
- CPU per job per minute: the CPU time (utime + stime) the triggerer tree, or the slot processes,
  used in the window, over jobs and minutes. The triggerer's idle cost is charged to its jobs and
  the worker's main process is not charged to the slots, so the ratio errs in favour of polling.
- GetJob and GetPodLogs requests per job per minute, from the emulator: both modes should poll alike.
- worker slots held: the most task instances in state ``running`` (REST API) and the most task
  processes under the worker in any sample; 0 expected for deferred jobs.

Prints a table of both modes, the services' CPU and memory in each window for context, and the
headline ratios sync / deferred per job. Exits 1 when a deferred job held a worker slot during the
window or not all N tasks were deferred through it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from project_env import PROJECT_ROOT, prepare_environment
from trigger_scale import KIB, POLL_ACTIONS, connection_json, start_emulator

if TYPE_CHECKING:
    from fakes.deployment import Deployment
    from fakes.dlc import DlcEmulator

DAGS_FOLDER = PROJECT_ROOT / "bench" / "dags"
DAG_IDS = {"deferred": "monitoring_cost_deferred", "sync": "monitoring_cost_sync"}
#: The state a monitoring task waits in, per mode.
WAITING_STATE = {"deferred": "deferred", "sync": "running"}
#: Slots that start the deferred tasks (the deployment's default); a deferred task gives its slot back.
DEFERRED_WORKER_SLOTS = 8
#: Services whose process trees are measured.
SERVICES = ("triggerer", "worker", "scheduler", "api-server")
#: What the tables show: the services and "worker slots", the part of the worker's tree running tasks.
GROUPS = (*SERVICES, "worker slots")
#: Which group monitors the jobs in each mode.
MONITOR = {"deferred": "triggerer", "sync": "worker slots"}
SAMPLE_SECONDS = 5.0
#: How long all tasks may take to reach their waiting state: this much plus as much again per job.
#: Generous: 200 deferred tasks took 107-167 s on two cores.
RAMP_BASE_S, RAMP_PER_JOB_S = 300.0, 6.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MIB = 1024 * KIB
FAILED_STATES = ("failed", "upstream_failed", "up_for_retry")


# -- processes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """One process of a service's tree: depth below the service, parent, memory (KiB), CPU time (s)."""

    depth: int
    parent: int
    rss_kib: int
    pss_kib: int
    cpu_s: float


Tree = dict[int, Usage]


def stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` from the state field on: the command name before it may contain spaces."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def kib_field(text: str, name: str) -> int:
    """The KiB value of the ``name:`` line of a /proc status-like file; 0 where there is none."""
    return int(next((line.split()[1] for line in text.splitlines() if line.startswith(f"{name}:")), 0))


def tree(leader: int, parent_of: dict[int, int]) -> Tree:
    """The leader and every process below it, however they are grouped; gone ones are left out."""
    from fakes.deployment import process_tree

    usage = {}
    for pid, level in process_tree(leader, parent_of).items():
        with contextlib.suppress(OSError):
            fields = stat_fields(pid)
            status = Path(f"/proc/{pid}/status").read_text()
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            usage[pid] = Usage(
                level, parent_of[pid], kib_field(status, "VmRSS"), kib_field(rollup, "Pss"), cpu_s
            )
    return usage


def task_processes(worker: Tree) -> list[int]:
    """Processes below a Celery pool process: the task processes its task supervisors forked."""
    return [pid for pid, usage in worker.items() if usage.depth >= 2]


def snapshot(airflow: Deployment) -> dict[str, Tree]:
    """Every measured group's processes now; "worker slots": the task processes and their pool processes."""
    from fakes.deployment import parent_pids

    parent_of = parent_pids()
    groups = {name: tree(airflow.processes[name].pid, parent_of) for name in SERVICES}
    tasks = task_processes(groups["worker"])
    slots = {*tasks, *(groups["worker"][pid].parent for pid in tasks)}
    groups["worker slots"] = {pid: usage for pid, usage in groups["worker"].items() if pid in slots}
    return groups


def memory(groups: dict[str, Tree]) -> dict[str, dict[str, int]]:
    """RSS and PSS (KiB) summed over each group."""
    return {
        name: {
            "rss_kib": sum(u.rss_kib for u in procs.values()),
            "pss_kib": sum(u.pss_kib for u in procs.values()),
        }
        for name, procs in groups.items()
    }


def cpu_between(start: Tree, end: Tree) -> float:
    """CPU seconds the group's processes at ``end`` used since ``start`` (all of it for newer ones)."""
    return sum(usage.cpu_s - (start[pid].cpu_s if pid in start else 0.0) for pid, usage in end.items())


# -- the deployment --------------------------------------------------------------------------------


def count_tis(airflow: Deployment, dag_id: str, run_id: str, *states: str) -> int:
    """Task instances of the run in any of ``states``, counted by the REST API."""
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    return airflow.ok("GET", path, params={"state": list(states), "limit": 1})["total_entries"]


def wait_for_all(airflow: Deployment, mode: str, run_id: str, jobs: int) -> float:
    """Wait until all ``jobs`` task instances wait in the mode's state; seconds it took.

    Prints progress with the monitoring group's RSS, which shows how memory grows with the jobs.
    """
    dag_id, state = DAG_IDS[mode], WAITING_STATE[mode]
    started = time.monotonic()
    deadline = started + RAMP_BASE_S + RAMP_PER_JOB_S * jobs
    while (waiting := count_tis(airflow, dag_id, run_id, state)) < jobs:
        failed = count_tis(airflow, dag_id, run_id, *FAILED_STATES)
        if failed or time.monotonic() > deadline:
            raise SystemExit(
                f"{mode}: {waiting} of {jobs} tasks {state}, {failed} failed after "
                f"{time.monotonic() - started:.0f} s; logs in {airflow.root}"
            )
        rss = memory(snapshot(airflow))[MONITOR[mode]]["rss_kib"]
        print(
            f"{mode}: {time.monotonic() - started:5.0f} s, {waiting:4d} of {jobs} {state}, "
            f"{MONITOR[mode]} RSS {rss / KIB:.0f} MiB",
            file=sys.stderr,
        )
        time.sleep(SAMPLE_SECONDS)
    return time.monotonic() - started


def measure_window(
    airflow: Deployment, emulator: DlcEmulator, mode: str, run_id: str, window: float
) -> dict[str, Any]:
    """Sample the groups every ``SAMPLE_SECONDS`` for ``window`` seconds; CPU is the ends' difference."""
    dag_id = DAG_IDS[mode]
    served = len(emulator.requests)
    first = snapshot(airflow)
    began = time.monotonic()
    samples: list[dict[str, Any]] = []
    while True:
        groups = snapshot(airflow)
        samples.append(
            {
                "memory": memory(groups),
                "running_tis": count_tis(airflow, dag_id, run_id, "running"),
                "task_processes": len(task_processes(groups["worker"])),
                "worker_processes": len(groups["worker"]),
            }
        )
        left = window - (time.monotonic() - began)
        if left <= 0:
            break
        time.sleep(min(SAMPLE_SECONDS, left))
    minutes = (time.monotonic() - began) / 60
    requests: dict[str, int] = defaultdict(int)
    for request in emulator.requests[served:]:
        requests[request.action] += 1
    return {
        "minutes": minutes,
        "samples": len(samples),
        "groups": {
            name: {
                "cpu_s": cpu_between(first[name], groups[name]),
                **{
                    key: statistics.fmean(sample["memory"][name][key] for sample in samples)
                    for key in ("rss_kib", "pss_kib")
                },
            }
            for name in GROUPS
        },
        "requests": dict(requests),
        **{
            key: max(sample[key] for sample in samples)
            for key in ("running_tis", "task_processes", "worker_processes")
        },
    }


def run_mode(
    mode: str, jobs: int, emulator: DlcEmulator, args: argparse.Namespace, root: Path
) -> dict[str, Any]:
    """One fresh deployment: trigger the mode's DAG, wait for all jobs to be monitored, measure."""
    from fakes.deployment import deployment

    env = {
        "AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT": connection_json(emulator.endpoint),
        "MONITORING_COST_JOBS": str(jobs),
        "MONITORING_COST_POLL_INTERVAL": str(args.poll_interval),
    }
    slots = DEFERRED_WORKER_SLOTS if mode == "deferred" else jobs
    dag_id = DAG_IDS[mode]
    with deployment(root / mode, env, {}, dags_folder=DAGS_FOLDER, worker_concurrency=slots) as airflow:
        if airflow.backing.executor != "CeleryExecutor":
            raise SystemExit(f"{airflow.backing.description}: worker slots need the Celery worker")
        airflow.wait_for_dag(dag_id)
        airflow.unpause(dag_id)
        before = memory(snapshot(airflow))
        run_id = airflow.trigger(dag_id, {}, datetime.now(UTC).isoformat())
        ramp_s = wait_for_all(airflow, mode, run_id, jobs)
        time.sleep(2 * args.poll_interval)
        window = measure_window(airflow, emulator, mode, run_id, args.window)
        waiting_after = count_tis(airflow, dag_id, run_id, WAITING_STATE[mode])
    return {
        "mode": mode,
        "jobs": jobs,
        "slots": slots,
        "ramp_s": ramp_s,
        "before": before,
        **window,
        "waiting_after": waiting_after,
    }


# -- results ---------------------------------------------------------------------------------------


def per_job(result: dict[str, Any]) -> dict[str, Any]:
    """The monitoring group's memory and CPU per job, and the requests per job per minute."""
    mode, jobs, minutes = result["mode"], result["jobs"], result["minutes"]
    monitor = result["groups"][MONITOR[mode]]
    base = result["before"][MONITOR[mode]] if mode == "deferred" else {"rss_kib": 0, "pss_kib": 0}
    return {
        **result,
        "rss_kib_per_job": (monitor["rss_kib"] - base["rss_kib"]) / jobs,
        "pss_kib_per_job": (monitor["pss_kib"] - base["pss_kib"]) / jobs,
        "cpu_ms_per_job_minute": monitor["cpu_s"] * 1000 / jobs / minutes,
        "requests_per_job_minute": {
            action: result["requests"].get(action, 0) / jobs / minutes for action in POLL_ACTIONS
        },
    }


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``; None where the deferred figure did not grow (no ratio to speak of)."""
    return numerator / denominator if denominator > 0 else None


def verdict(deferred: dict[str, Any], sync: dict[str, Any]) -> dict[str, Any]:
    """The ratios sync / deferred per job, the memory N sync slots would take, and the deferred check."""
    jobs = deferred["jobs"]
    held = max(deferred["running_tis"], deferred["task_processes"])
    return {
        "rss_ratio": ratio(sync["rss_kib_per_job"], deferred["rss_kib_per_job"]),
        "pss_ratio": ratio(sync["pss_kib_per_job"], deferred["pss_kib_per_job"]),
        "cpu_ratio": ratio(sync["cpu_ms_per_job_minute"], deferred["cpu_ms_per_job_minute"]),
        "sync_rss_gib_for_all": sync["rss_kib_per_job"] * jobs / MIB,
        "sync_pss_gib_for_all": sync["pss_kib_per_job"] * jobs / MIB,
        "deferred_slots_held": held,
        "target": f"no worker slot held by the {jobs} deferred jobs, all {jobs} deferred through the window",
        "passed": held == 0 and deferred["waiting_after"] == jobs,
    }


def format_table(results: list[dict[str, Any]]) -> str:
    """One row per mode: what the monitoring group costs per job, the polls, the worker slots held."""
    header = (
        f"{'mode':<9} {'jobs':>4} {'monitor':<12} {'ramp s':>6} {'RSS MiB before':>14} {'during':>6} "
        f"{'RSS KiB/job':>11} {'PSS KiB/job':>11} {'CPU s':>6} {'CPU ms/job/min':>14} "
        f"{'GetJob/job/min':>14} {'GetPodLogs/job/min':>18} {'running TIs':>11} {'task procs':>10} "
        f"{'worker procs':>12}"
    )
    rows = []
    for r in results:
        monitor = MONITOR[r["mode"]]
        group = r["groups"][monitor]
        rows.append(
            f"{r['mode']:<9} {r['jobs']:>4} {monitor:<12} {r['ramp_s']:>6.0f} "
            f"{r['before'][monitor]['rss_kib'] / KIB:>14.0f} {group['rss_kib'] / KIB:>6.0f} "
            f"{r['rss_kib_per_job']:>11.1f} {r['pss_kib_per_job']:>11.1f} {group['cpu_s']:>6.2f} "
            f"{r['cpu_ms_per_job_minute']:>14.2f} {r['requests_per_job_minute']['GetJob']:>14.2f} "
            f"{r['requests_per_job_minute']['GetPodLogs']:>18.2f} {r['running_tis']:>11} "
            f"{r['task_processes']:>10} {r['worker_processes']:>12}"
        )
    return "\n".join([header, "-" * len(header), *rows])


def format_services(results: list[dict[str, Any]]) -> str:
    """Every measured group in each mode's window: CPU seconds and mean RSS / PSS, for context."""
    header = f"{'mode':<9} {'group':<12} {'CPU s':>7} {'RSS MiB':>8} {'PSS MiB':>8}"
    rows = [
        f"{r['mode']:<9} {name:<12} {r['groups'][name]['cpu_s']:>7.2f} "
        f"{r['groups'][name]['rss_kib'] / KIB:>8.0f} {r['groups'][name]['pss_kib'] / KIB:>8.0f}"
        for r in results
        for name in GROUPS
    ]
    return "\n".join([header, "-" * len(header), *rows])


def format_verdict(outcome: dict[str, Any], deferred: dict[str, Any], sync: dict[str, Any]) -> str:
    """The headline ratios, the slots each mode holds, and the deferred check's verdict."""

    def times(value: float | None, digits: int) -> str:
        return f"{value:.{digits}f} x" if value is not None else "n/a (deferred did not grow)"

    jobs = deferred["jobs"]
    return (
        f"memory per job, sync / deferred: RSS {times(outcome['rss_ratio'], 0)}, "
        f"PSS {times(outcome['pss_ratio'], 0)}\n"
        f"CPU per job per minute, sync / deferred: {times(outcome['cpu_ratio'], 1)}\n"
        f"worker slots held while monitoring: deferred {outcome['deferred_slots_held']} for {jobs} jobs, "
        f"sync {sync['running_tis']} for {sync['jobs']} jobs; {jobs} sync jobs would hold {jobs} slots, "
        f"about {outcome['sync_rss_gib_for_all']:.1f} GiB RSS "
        f"({outcome['sync_pss_gib_for_all']:.1f} GiB PSS) at the measured memory per slot\n"
        f"{'PASS' if outcome['passed'] else 'FAIL'}  {outcome['target']}"
    )


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="concurrent deferred jobs (default 200)")
    parser.add_argument(
        "--sync-jobs", type=int, default=20, help="concurrent polling jobs, one worker slot each (default 20)"
    )
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds per mode (default 60)")
    parser.add_argument(
        "--poll-interval", type=float, default=10.0, help="seconds between polls, both modes (default 10)"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if min(args.jobs, args.sync_jobs) < 1 or min(args.window, args.poll_interval) <= 0:
        parser.error("--jobs and --sync-jobs must be at least 1, --window and --poll-interval positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure the deferred mode, then the polling mode, each in its own deployment; 1 on a failed check."""
    args = parse_args(argv)
    prepare_environment()
    root = Path(tempfile.mkdtemp(prefix="monitoring-cost-"))
    emulator = start_emulator(running=True)
    try:
        deferred = per_job(run_mode("deferred", args.jobs, emulator, args, root))
        sync = per_job(run_mode("sync", args.sync_jobs, emulator, args, root))
        if emulator.internal_errors:
            raise SystemExit(f"the emulator failed: {emulator.internal_errors[:3]}")
    finally:
        emulator.stop()
    shutil.rmtree(root, ignore_errors=True)
    outcome = verdict(deferred, sync)
    settings = {"jobs": args.jobs, "sync_jobs": args.sync_jobs, "window": args.window}
    settings |= {"poll_interval": args.poll_interval}
    print(", ".join(f"{name}={value}" for name, value in settings.items()))
    print(format_table([deferred, sync]))
    print()
    print(format_services([deferred, sync]))
    print()
    print(format_verdict(outcome, deferred, sync))
    if args.json is not None:
        args.json.write_text(
            json.dumps({**settings, "results": [deferred, sync], **outcome}, indent=2) + "\n"
        )
    return 0 if outcome["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
