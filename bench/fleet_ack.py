"""Three hundred ACK (arena) jobs against the Kubernetes API fake: what watching them costs per job
with and without the shared listing (report only; the issue sets no CPU target for ACK).

Each mode gets a fresh fake (``fakes/kubernetes_fake.py``, the integration tests' API server) and 300
single-node PyTorchJobs created once its child has warmed up: a third pending (pods scheduled,
containers never starting), a third running and writing a line every ``STEADY_LINE_SECONDS``, a third
running until ends spread over the child's window (estimated at creation: the fake offers no way to
re-time a job once it runs). Modes as for DLC: ``bare`` (GET the CR, list its pods by
``release=<name>`` and, as the DLC bare loop reads the master's log, read the first started pod's new
lines, per job per poll, through one kubernetes_asyncio client), ``per-job`` (``batched_status`` off)
and ``fleet``. The cluster connection's rate limit is ``BENCH_RATE_LIMITS``' 1,000 requests a second
in all three: the default (50 a second, ``hooks/rate_limit.py``) would pace the per-job trigger, not
measure it (the report says what each mode asks a second at a 10 s poll). Requests are the fake's,
served between the child's ``window`` and ``window-end`` lines (the fake records no times).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from fleet_harness import (
    DEFAULT_POLL_SECONDS,
    LOG_POLLS,
    POLLS_PER_MINUTE,
    Child,
    Plan,
    child_command,
    markdown,
    mode_settings,
    profile_path,
    unexpected_events,
    verdict,
)
from trigger_scale import BENCH_RATE_LIMITS

from aliyun_training.hooks.rate_limit import KUBERNETES_RATE
from fakes.kubernetes_fake import KubernetesFake, TrainingScript

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from aliyun_training.backends.ack.backend import AckBackend
    from aliyun_training.backends.base import JobHandle
    from fakes.kubernetes_fake import KubeRequest

CONN_ID = "bench_ack"
NAMESPACE = "training"
STEADY_LINE_SECONDS = 3.0
STEADY_SECONDS = 1800.0
SETTLE_SECONDS = 1.0
#: How long after the last job is created a child's window starts, beyond the spread of its
#: monitors' starts, roughly: the settle, the plan's hand-over and the last first poll. Only to
#: place the finishing jobs' ends.
WINDOW_START_GUESS_S = 3.0
#: The fake reconciles every object on every request (O(jobs x pods): 60 ms a pass at 300 jobs), so
#: the fake rather than the monitors would decide the run; a pass at most this often keeps it small.
RECONCILE_EVERY_S = 0.25
#: The default rate of one cluster connection, requests a second.
DEFAULT_CLUSTER_RATE = KUBERNETES_RATE
MAX_STATUS_PER_POLL = 0.05
LOG_VERB = "get pods/log"


class PacedKubernetesFake(KubernetesFake):
    """The Kubernetes fake, reconciling at most every ``RECONCILE_EVERY_S``: what a request reads may
    be that old, as a real API server's controllers are behind it."""

    def __init__(self) -> None:
        super().__init__(tick_seconds=RECONCILE_EVERY_S)
        self._reconciled = -math.inf

    def reconcile(self) -> None:
        now = time.monotonic()
        if now - self._reconciled >= RECONCILE_EVERY_S:
            self._reconciled = now
            super().reconcile()


def scripts() -> dict[str, TrainingScript]:
    lines = int(STEADY_SECONDS / STEADY_LINE_SECONDS)
    return {
        "pending": TrainingScript(phases=[("Created", STEADY_SECONDS)]),
        "steady": TrainingScript(
            phases=[("Created", 0.2), ("Running", STEADY_SECONDS)],
            log_lines=[f"step {step} loss={2.0 / (step + 1):.4f}" for step in range(lines)],
        ),
        "spare": TrainingScript(phases=[("Created", 0.2), ("Running", STEADY_SECONDS)]),
    }


def finishing_script(running_s: float) -> TrainingScript:
    return TrainingScript(
        phases=[("Created", 0.2), ("Running", running_s)],
        log_lines=["epoch 1/3 loss=2.3026", "epoch 2/3 loss=1.8412", "epoch 3/3 loss=1.5107"],
    )


def start_fake(folder: Path, label: str) -> KubernetesFake:
    """A fresh fake for one mode, and the ``bench_ack`` connection pointed at it."""
    fake = PacedKubernetesFake().start()
    for prefix, script in scripts().items():
        fake.script_for(prefix, script)
    kubeconfig = fake.write_kubeconfig(folder / f"{label}-kubeconfig.yaml")
    extra = {"kube_config_path": str(kubeconfig), "namespace": NAMESPACE}
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({"conn_type": "kubernetes", "extra": extra})
    return fake


def create(
    fake: KubernetesFake, label: str, counts: dict[str, int], args: argparse.Namespace, folder: Path
) -> Plan:
    """Submit the jobs as the operator does (``AckBackend.submit``), the finishing ones last with
    their ends spread over the window expected to start a log interval (the spread of the monitors'
    starts) and ``WINDOW_START_GUESS_S`` after them."""
    from aliyun_training.backends.ack.backend import AckBackend
    from aliyun_training.spec import TrainingJobSpec
    from fakes.cloud import arena_job

    backend = AckBackend(kubernetes_conn_id=CONN_ID, namespace=NAMESPACE)
    spec = TrainingJobSpec.parse(arena_job(command="python train.py", nodes=1))
    started = time.perf_counter()
    made: list[tuple[str, JobHandle]] = []
    for kind, count in counts.items():
        first_end = time.time() + count * (time.perf_counter() - started) / max(1, len(made))
        for index in range(count):
            name = f"{kind}-{label}-{index:04d}"
            if kind == "finishing":
                spread = (args.window_polls - 4) * args.poll_interval * index / max(1, count - 1)
                lead_in = LOG_POLLS * args.poll_interval + WINDOW_START_GUESS_S
                end = first_end + lead_in + 1.5 * args.poll_interval + spread
                fake.script_for(name, finishing_script(end - time.time()))
            made.append((kind, backend.submit(spec, name)))
    print(f"ack {label}: created {len(made)} jobs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    kubeconfig = json.loads(os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"])["extra"]["kube_config_path"]
    time.sleep(SETTLE_SECONDS)
    seen = {kind: backend.status(handle).raw for kind, handle in dict(made).items()}
    jobs = [
        {
            "job_id": handle.job_id,
            "kind": kind,
            "trigger": trigger_row(backend, handle, seen[kind], args),
            "bare": bare_target(handle, kubeconfig),
        }
        for kind, handle in made
    ]
    return Plan(jobs, folder / f"ack-{label}-plan.json")


def trigger_row(
    backend: AckBackend, handle: JobHandle, seen: str, args: argparse.Namespace
) -> tuple[str, str]:
    from aliyun_training.triggers.training import TrainingJobTrigger

    trigger = TrainingJobTrigger(
        backend="arena",
        handle=handle.model_dump(),
        backend_config=backend.config,
        poll_interval=args.poll_interval,
        last_raw_status=seen,
    )
    classpath, kwargs = trigger.serialize()
    return classpath, json.dumps(kwargs)


def bare_target(handle: JobHandle, kubeconfig: str) -> dict[str, str]:
    """What the bare loop addresses the job's CR and pods with."""
    from aliyun_training.backends.ack.status import handle_kind

    kind = handle_kind(handle)
    return {
        "name": handle.name,
        "version": kind.version,
        "plural": kind.plural,
        "namespace": NAMESPACE,
        "kubeconfig": kubeconfig,
    }


def mix(jobs: int) -> dict[str, int]:
    return {"pending": jobs // 3, "steady": jobs // 3, "finishing": jobs - 2 * (jobs // 3)}


def verb(request: KubeRequest) -> str:
    """``list pods``, ``get pytorchjobs``, ``get pods/log``...: the verb and resource of a request."""
    parts = [part for part in request.path.split("/") if part]
    if "namespaces" not in parts:
        return f"{request.method.lower()} {request.path}"
    rest = parts[parts.index("namespaces") + 2 :]
    if len(rest) == 1:
        return f"{'list' if request.method == 'GET' else request.method.lower()} {rest[0]}"
    method = request.method.lower()
    return f"{method} {rest[0]}/{rest[2]}" if len(rest) > 2 else f"{method} {rest[0]}"


def listing(request: KubeRequest) -> bool:
    """Whether ``request`` is one of a shared listing's: a set-based selector on many releases
    (``AckBackend.alisted_statuses``), where a job's own pod list selects ``release=<name>``."""
    return request.query.get("labelSelector", "").startswith("release in (")


def measure_mode(
    label: str, mode: str, batched: bool, args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    """One mode on a fresh fake in a fresh child."""
    fake = start_fake(folder, label)
    try:
        warm_up = create(fake, f"warm-up-{label}", {"spare": 1}, args, folder).write()
        result_path = folder / f"ack-{label}.json"
        options = {"warm_up": warm_up, "profile": profile_path(args, f"ack-{label}")}
        child = Child(
            f"ack {label}",
            child_command(mode, result_path, args, args.poll_interval, **options),
            mode_settings(batched, args.poll_interval, BENCH_RATE_LIMITS),
        )
        child.expect("ready")
        plan = create(fake, label, mix(args.ack_jobs), args, folder)
        child.go(plan.write())
        child.expect("window")
        first = len(fake.requests)
        child.expect("window-end")
        received = fake.requests[first:]
        child.finish()
        if fake.internal_errors:
            raise SystemExit(f"the Kubernetes fake failed: {fake.internal_errors[:3]}")
    finally:
        fake.stop()
    result = json.loads(result_path.read_text())
    problems = result["errors"] + unexpected_events(result, plan)
    if problems:
        raise SystemExit(f"ack {label}: {len(problems)} monitors went wrong, e.g. {problems[0]}")
    return summary(label, result, plan, received)


def summary(label: str, result: dict[str, Any], plan: Plan, received: list[KubeRequest]) -> dict[str, Any]:
    job_polls = sum(result["polls"].values())
    verbs = Counter(verb(request) for request in received)
    status = sum(count for name, count in verbs.items() if name != LOG_VERB)
    listings = sum(1 for request in received if listing(request))
    window = result["window"]
    jobs = result["jobs"]
    return {
        "mode": label,
        "jobs": jobs,
        "job_polls": job_polls,
        "polls_per_job": job_polls / jobs,
        "requests": dict(verbs),
        "per_job_per_minute": {name: count / job_polls * POLLS_PER_MINUTE for name, count in verbs.items()},
        "status_per_job_per_poll": status / job_polls,
        "lists_per_job_per_poll": listings / job_polls,
        "per_second_at_defaults": len(received) / job_polls * jobs / DEFAULT_POLL_SECONDS,
        "cpu_ms_per_job_poll": result["cpu_s"] * 1000 / job_polls,
        "gc_ms_per_job_poll": result["gc_s"] * 1000 / job_polls,
        "rss_kib_per_job": result["rss_growth_kib"] / jobs,
        "peak_rss_kib_per_job": result["peak_rss_growth_kib"] / jobs,
        "finished": sum(window["start"] <= at <= window["end"] for at, _status in result["events"].values()),
        "finishing": len(plan.of_kind("finishing")),
    }


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    modes = [
        measure_mode("bare", "bare-ack", False, args, folder),
        measure_mode("per-job", "triggers", False, args, folder),
        measure_mode("fleet", "triggers", True, args, folder),
    ]
    fleet = modes[2]
    return {
        "modes": modes,
        "cpu_ratio_fleet_to_bare": fleet["cpu_ms_per_job_poll"] / modes[0]["cpu_ms_per_job_poll"],
        "cpu_ratio_per_job_to_bare": modes[1]["cpu_ms_per_job_poll"] / modes[0]["cpu_ms_per_job_poll"],
        "listing_target_met": fleet["lists_per_job_per_poll"] <= MAX_STATUS_PER_POLL,
        "status_target_met": fleet["status_per_job_per_poll"] <= MAX_STATUS_PER_POLL,
    }


def report(outcome: dict[str, Any]) -> str:
    modes = outcome["modes"]
    verbs = sorted({name for mode in modes for name in mode["requests"]})
    rows = [
        [
            m["mode"],
            f"{m['job_polls']:,} ({m['polls_per_job']:.1f})",
            *(f"{m['per_job_per_minute'].get(name, 0.0):.3f}" for name in verbs),
            f"{m['status_per_job_per_poll']:.4f}",
            f"{m['lists_per_job_per_poll']:.4f}",
            f"{m['per_second_at_defaults']:.1f}",
            f"{m['cpu_ms_per_job_poll']:.3f}",
            f"{m['gc_ms_per_job_poll']:.3f}",
            f"{m['rss_kib_per_job']:.1f}",
            f"{m['finished']}/{m['finishing']}",
        ]
        for m in modes
    ]
    header = [
        "mode",
        "job-polls (per job)",
        *(f"{name} / job / min" for name in verbs),
        "status req / job / poll",
        "of it shared lists",
        f"req / s at a {DEFAULT_POLL_SECONDS:g} s poll",
        "CPU ms / job / poll",
        "of it GC",
        "RSS KiB / job",
        "ended in the window",
    ]
    fleet = modes[2]
    return "\n\n".join(
        [
            markdown(header, rows),
            f"CPU per job per poll, fleet / bare: {outcome['cpu_ratio_fleet_to_bare']:.3f} x; "
            f"per-job / bare: {outcome['cpu_ratio_per_job_to_bare']:.3f} x. A cluster connection's "
            f"default rate is {DEFAULT_CLUSTER_RATE:g} requests a second.",
            markdown(
                ["target (report only)", "measured", "result"],
                [
                    [
                        f"ACK listing requests per job per poll <= {MAX_STATUS_PER_POLL:g} (fleet)",
                        f"{fleet['lists_per_job_per_poll']:.4f}",
                        verdict(outcome["listing_target_met"]),
                    ],
                    [
                        f"ACK status requests per job per poll <= {MAX_STATUS_PER_POLL:g}, the ends' "
                        "details included (fleet)",
                        f"{fleet['status_per_job_per_poll']:.4f}",
                        verdict(outcome["status_target_met"]),
                    ],
                ],
            ),
        ]
    )
