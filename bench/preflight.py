"""What the DLC preflight costs when its check groups run side by side, against running them in turn.

Preflight for a DLC run is three ``PreflightCheckOperator`` groups: network (VPC, vSwitch, security
group, NAT, SNAT), quota (PAI Studio) and permissions (DLC access, the job's RAM role). Almost all
of their time is spent waiting for cloud API answers, one call after another within a group, so
the DAG runs the groups as separate tasks in one task group: a run then waits for the slowest
group rather than for the sum of all of them. This benchmark checks that the parallel layout pays
off, with every API call answered late, as a real cloud answers:

- sequential: the three groups one after another, each ``execute({})`` timed on its own; the sum is
  what one combined preflight task would cost;
- concurrent: the three groups at once, one thread per group (``ThreadPoolExecutor``), as three
  Airflow tasks running in parallel; the wall time from the first start to the last finish.

Each group runs exactly as ``tests/integration/test_cloud_preflight.py``'s ``run_check`` runs it
(the same spec, backend config and preflight settings, taken from that module so the two cannot
drift apart), against the emulated account of ``fakes/cloud.py``: a Lingjun setup every
check passes, served by the VPC/ECS, PAI Studio, RAM and DLC emulators in this process. Each
emulator delays every answer by ``--latency-ms`` (default 50 ms). A benchmark run whose checks do
not all pass stops: a failing check takes a shorter path and would measure something else.

Each Airflow task starts in a fresh process without the process-wide shared hook, so shared hooks
are dropped before every sequential group and before every concurrent run: each mode pays the
connection lookup and SDK client set-up the tasks pay. API calls per group are the emulators'
request counts around each sequential group; the concurrent run must make the same total.

In the DAG the groups are separate Airflow tasks, so their real parallelism also depends on free
executor slots (``parallelism``, pool and ``max_active_tasks_per_dag``) and on task start-up, which
this benchmark does not measure: it isolates the check code's own latency-bound cost. Threads share
one interpreter lock with each other and with the emulators, where separate task processes would
not, so the concurrent figure errs on the slow side.

Sequential and concurrent take turns for ``--rounds`` rounds (which goes first alternates), after
one unmeasured warm-up of each group (imports, SDK models). The table shows medians; the headline
is the median of the rounds' concurrent / sequential wall time, each pair measured seconds apart.
Target: concurrent <= 0.6 x sequential, i.e. the parallel layout must show. Exits 1 when it fails.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from project_env import prepare_environment

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fakes.cloud import Cloud


RATIO_LIMIT = 0.6
#: The check groups that apply to a DLC run, in the DAG's order.
GROUPS = ("network", "quota", "permissions")
#: The emulated services, by the ``Cloud`` attribute that serves them.
SERVICES = ("network", "studio", "ram", "dlc")


# -- environment -----------------------------------------------------------------------------------


@contextlib.contextmanager
def slow_cloud(latency_ms: float) -> Iterator[Cloud]:
    """The integration tests' emulated account, with every answer of every service delayed.

    The connection goes into the environment through a ``MonkeyPatch`` context, so it is removed
    again when the benchmark ends.
    """
    import pytest

    from fakes.base import FaultPlan
    from fakes.cloud import emulated_cloud

    with pytest.MonkeyPatch.context() as monkeypatch, emulated_cloud(monkeypatch) as cloud:
        for service in SERVICES:
            getattr(cloud, service).faults = FaultPlan(slow_rate=1.0, slow_seconds=latency_ms / 1000)
        yield cloud


def task_logging() -> BinaryIO:
    """Log as a task process does: structlog JSON lines to one stream, here the null device.

    In a task the stream goes to the supervisor; here the checks still pay for rendering every line
    (each group logs its findings as a report), and the terminal keeps only the benchmark's table.
    """
    from airflow.sdk.log import configure_logging

    stream = open(os.devnull, "wb")  # noqa: SIM115 - kept open for the life of the process
    configure_logging(json_output=True, output=stream, sending_to_supervisor=True)
    return stream


# -- measuring -------------------------------------------------------------------------------------


def request_counts(cloud: Cloud) -> dict[str, int]:
    """Requests each emulated service has served so far."""
    return {service: len(getattr(cloud, service).requests) for service in SERVICES}


def calls_since(cloud: Cloud, before: dict[str, int]) -> dict[str, int]:
    """Requests per service since ``before``; services that got none are left out."""
    after = request_counts(cloud)
    return {
        service: after[service] - before[service] for service in SERVICES if after[service] > before[service]
    }


def run_group(cloud: Cloud, group: str) -> float:
    """Run one check group as the DAG's task does; return its seconds. Stops unless every check passed."""
    from fakes.cloud import run_check

    start = time.perf_counter()
    findings = run_check(cloud, group)
    elapsed = time.perf_counter() - start
    failed = [f for f in findings if f["verdict"] != "PASS"]
    if failed or not findings:
        raise SystemExit(f"the {group} checks did not all pass, so this would time another path: {failed}")
    return elapsed


def fresh_task_process() -> None:
    """Forget the process-wide shared hooks, as a new task process starts without them.

    Code without that cache builds a hook per operator anyway and has nothing to forget.
    """
    from aliyun_training.hooks import alibaba_cloud

    forget = getattr(alibaba_cloud, "forget_shared_hooks", None)
    if forget is not None:
        forget()


def sequential(cloud: Cloud) -> dict[str, Any]:
    """The groups one after another: per-group seconds and API calls, and their sum."""
    gc.collect()
    groups: dict[str, dict[str, Any]] = {}
    for group in GROUPS:
        fresh_task_process()
        before = request_counts(cloud)
        seconds = run_group(cloud, group)
        groups[group] = {"seconds": seconds, "calls": calls_since(cloud, before)}
    return {
        "groups": groups,
        "seconds": sum(g["seconds"] for g in groups.values()),
        "calls": sum(sum(g["calls"].values()) for g in groups.values()),
    }


def concurrent(cloud: Cloud) -> dict[str, Any]:
    """The groups at once, one thread each: the wall time until the last one finished.

    Each group's own time inside the concurrent run is kept too: how much its waits stretch while
    the others run.
    """
    gc.collect()
    fresh_task_process()
    before = request_counts(cloud)
    with ThreadPoolExecutor(max_workers=len(GROUPS), thread_name_prefix="preflight") as pool:
        start = time.perf_counter()
        futures = {group: pool.submit(run_group, cloud, group) for group in GROUPS}
        group_seconds = {group: future.result() for group, future in futures.items()}
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "group_seconds": group_seconds,
        "calls": sum(calls_since(cloud, before).values()),
    }


def measure(rounds: int, latency_ms: float) -> dict[str, Any]:
    """Warm up, then ``rounds`` pairs of sequential and concurrent runs, alternating which goes first."""
    runs: list[dict[str, Any]] = []
    with slow_cloud(latency_ms) as cloud:
        for group in GROUPS:
            fresh_task_process()
            run_group(cloud, group)
        for round_ in range(rounds):
            order = ("sequential", "concurrent") if round_ % 2 == 0 else ("concurrent", "sequential")
            results = {mode: (sequential if mode == "sequential" else concurrent)(cloud) for mode in order}
            if results["concurrent"]["calls"] != results["sequential"]["calls"]:
                raise SystemExit(
                    f"round {round_ + 1}: the concurrent run made {results['concurrent']['calls']} API "
                    f"calls, the sequential run {results['sequential']['calls']}; the modes differ"
                )
            ratio = results["concurrent"]["seconds"] / results["sequential"]["seconds"]
            runs.append({"round": round_ + 1, "first": order[0], **results, "ratio": ratio})
        internal_errors = [e for s in SERVICES for e in getattr(cloud, s).internal_errors]
    if internal_errors:
        raise SystemExit(f"the emulators failed: {internal_errors}")
    return summarize(runs, rounds, latency_ms)


def summarize(runs: list[dict[str, Any]], rounds: int, latency_ms: float) -> dict[str, Any]:
    """Medians over the rounds, the latency floors, and the verdict."""

    def median(values: list[float]) -> float:
        return statistics.median(values)

    last = runs[-1]["sequential"]["groups"]
    groups = {
        group: {
            "calls": last[group]["calls"],
            "sequential_ms": median([r["sequential"]["groups"][group]["seconds"] * 1000 for r in runs]),
            "in_concurrent_ms": median([r["concurrent"]["group_seconds"][group] * 1000 for r in runs]),
        }
        for group in GROUPS
    }
    calls = {group: sum(g["calls"].values()) for group, g in groups.items()}
    ratio = median([r["ratio"] for r in runs])
    return {
        "latency_ms": latency_ms,
        "rounds": rounds,
        "groups": groups,
        "sequential_ms": median([r["sequential"]["seconds"] * 1000 for r in runs]),
        "concurrent_ms": median([r["concurrent"]["seconds"] * 1000 for r in runs]),
        "api_calls": sum(calls.values()),
        # What the injected latency alone costs: every call in turn, or only the busiest group's.
        "sequential_floor_ms": sum(calls.values()) * latency_ms,
        "concurrent_floor_ms": max(calls.values()) * latency_ms,
        "ratio": ratio,
        "ratio_floor": max(calls.values()) / sum(calls.values()),
        "limit": RATIO_LIMIT,
        "passed": ratio <= RATIO_LIMIT,
        "runs": runs,
    }


# -- output ----------------------------------------------------------------------------------------


def format_table(result: dict[str, Any]) -> str:
    """Per-group medians, the two modes' totals next to their latency floors, then every round."""
    header = (
        f"{'group':<22} {'API calls':>9} {'by service':<22} {'sequential ms':>13} {'in concurrent ms':>16}"
    )
    lines = [header, "-" * len(header)]
    for group, g in result["groups"].items():
        services = ", ".join(f"{service} {count}" for service, count in g["calls"].items())
        lines.append(
            f"{group:<22} {sum(g['calls'].values()):>9} {services:<22} "
            f"{g['sequential_ms']:>13.1f} {g['in_concurrent_ms']:>16.1f}"
        )
    lines.append("-" * len(header))
    lines.append(
        f"{'sequential (sum)':<22} {result['api_calls']:>9} {'':<22} {result['sequential_ms']:>13.1f}"
        f"   (latency floor {result['sequential_floor_ms']:.0f} ms)"
    )
    lines.append(
        f"{'concurrent (wall)':<22} {result['api_calls']:>9} {'':<22} {result['concurrent_ms']:>13.1f}"
        f"   (latency floor {result['concurrent_floor_ms']:.0f} ms)"
    )
    lines += ["", f"{'round':>5} {'first':<11} {'sequential ms':>13} {'concurrent ms':>13} {'ratio':>6}"]
    lines += [
        f"{r['round']:>5} {r['first']:<11} {r['sequential']['seconds'] * 1000:>13.1f} "
        f"{r['concurrent']['seconds'] * 1000:>13.1f} {r['ratio']:>6.3f}"
        for r in result["runs"]
    ]
    return "\n".join(lines)


def format_verdict(result: dict[str, Any]) -> str:
    """The headline ratio against its target, with the best ratio the call counts allow."""
    verdict = "PASS" if result["passed"] else "FAIL"
    return (
        f"concurrent / sequential = {result['ratio']:.3f} (median of {result['rounds']} rounds; "
        f"latency floor {result['ratio_floor']:.3f})\n"
        f"{verdict}  concurrent <= {RATIO_LIMIT:g} x sequential"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=5, help="sequential/concurrent pairs, medians (default 5)"
    )
    parser.add_argument(
        "--latency-ms", type=float, default=50.0, help="delay of every emulated API answer (default 50)"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.latency_ms < 0:
        parser.error("--latency-ms must not be negative")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table and the verdict; 1 when the target fails."""
    args = parse_args(argv)
    prepare_environment()
    log_stream = task_logging()
    try:
        result = measure(args.rounds, args.latency_ms)
    finally:
        log_stream.close()
    print(
        f"DLC preflight groups, {result['latency_ms']:g} ms per API call, "
        f"{result['rounds']} rounds, medians\n"
    )
    print(format_table(result))
    print()
    print(format_verdict(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
