"""A thousand DLC jobs of every phase: what watching them costs per job with and without the shared
listing, and a triggerer restart under the default rate limits.

The jobs live in the DLC emulator (and, while queued, in a PAI Studio quota's queue), served by the
parent; each mode runs in a fresh child (``fleet_child.py``) on 1,000 jobs made for it once the child
has warmed up: a third queued for the whole run, a third running and writing a line every
``STEADY_LINE_SECONDS``, a third running until an end the parent places inside the child's window
(spread evenly from 1.5 intervals after its start to 2.5 before its end). Each trigger's kwargs are
those a deferring task leaves after its own first poll (``last_raw_status``: the phase it saw). The
window is ``--window-polls`` intervals, by default 18 (two log intervals). The counts per poll
depend on it: the finishing third ends inside the window whatever its length, each end a details
read, so a shorter window weighs those reads more.

Modes: ``bare`` (GetJob, and the master pod's new lines while the job has pods, per job per poll,
through one SDK client), ``per-job`` (today's trigger: ``batched_status`` off) and ``fleet`` (the
trigger with its defaults: batched, a steady job's log every ``steady_log_seconds``). The three run
under ``BENCH_RATE_LIMITS`` (1,000 requests a second per action: DLC's quota at a poll ten times
faster), so that the counts and timings are the monitors' own. The restart runs as a deployment
does: a 10 s poll, logs every 90 s and the provider's rate limits (or ``--restart-rate-limits``),
which count real seconds.

Requests are the emulators' (PAI Studio's ``ListQuotaWorkloads`` among the others) received within
the child's window (``RecordedRequest.at``); a ListJobs request is shared among the jobs it names.
The file's times (the emulator's clock, the children's events) are all ``time.time``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fleet_harness import (
    DEFAULT_POLL_SECONDS,
    POLLS_PER_MINUTE,
    Child,
    Plan,
    child_command,
    markdown,
    mode_settings,
    most_in_a_second,
    profile_path,
    unexpected_events,
    verdict,
)
from trigger_scale import (
    ACCESS_KEY_ID,
    ACCESS_KEY_SECRET,
    BENCH_RATE_LIMITS,
    CONN_ID,
    connection_json,
    create_jobs,
    deepen_listen_backlog,
    enqueue,
    start_studio,
)

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from fakes.base import RecordedRequest
    from fakes.dlc import DlcEmulator, JobScript
    from fakes.paistudio import PaiStudioEmulator

#: Seconds between two lines of a steadily running job's log: "now and then" at a 1 s poll.
STEADY_LINE_SECONDS = 3.0
#: Long enough for a whole benchmark run: a steady or queued job never ends in it.
STEADY_SECONDS = 1800.0
#: Seconds between creating a mode's jobs and handing them over, for every job to leave Creating.
SETTLE_SECONDS = 0.5
#: What the trigger's kwargs say the deferring task last saw of each kind of job.
LAST_SEEN = {"queued": "Queuing", "steady": "Running", "finishing": "Running"}
#: A restarted triggerer's triggers last saw their jobs queued: each reads the details and log once.
RESTART_LAST_SEEN = "Queuing"
#: The requests that read a job's status, and the DLC actions the table shows one by one.
STATUS_ACTIONS = ("ListJobs", "GetJob")
ACTIONS = ("ListJobs", "GetJob", "GetPodLogs")
#: The issue's targets for 1,000 DLC jobs with the shared listing.
MAX_STATUS_PER_POLL = 0.05
MAX_RUNNING_PER_MINUTE = 1.0
MAX_CPU_RATIO = 0.5
#: The event loop's share of the end -> event bound: the poller waking from its sleep and the
#: watching trigger from its wait, each a turn of a loop that runs a thousand triggers.
SCHEDULING_SLACK_S = 0.1


def scripts() -> dict[str, JobScript]:
    """Lifecycles by DisplayName prefix. A finishing job runs "for good" until the parent re-times it."""
    from fakes.dlc import JobScript

    queued = JobScript(phases=[("Creating", 0.01), ("Queuing", STEADY_SECONDS)])
    lines = int(STEADY_SECONDS / STEADY_LINE_SECONDS)
    steady = JobScript(
        phases=[("Creating", 0.01), ("Running", STEADY_SECONDS)],
        log_lines=[f"step {step} loss={2.0 / (step + 1):.4f}" for step in range(lines)],
    )
    finishing = JobScript(
        phases=[("Creating", 0.01), ("Running", STEADY_SECONDS)],
        log_lines=["epoch 1/3 loss=2.3026", "epoch 2/3 loss=1.8412", "epoch 3/3 loss=1.5107"],
    )
    return {
        "queued": queued,
        "steady": steady,
        "finishing": finishing,
        "restart": steady,
        "spare-queued": queued,
        "spare-steady": steady,
    }


@dataclass
class DlcFleet:
    """The emulators of a run, where its files go, and the run's settings."""

    dlc: DlcEmulator
    studio: PaiStudioEmulator
    folder: Path
    args: argparse.Namespace

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.dlc.requests + self.studio.requests

    def create(self, label: str, counts: dict[str, int], last_seen: dict[str, str], interval: float) -> Plan:
        """Create ``counts`` jobs of each kind, queue the queued ones, and write down the triggers'
        kwargs (what the deferring task leaves in the database, polling every ``interval``)."""
        names = [f"{kind}-{label}-{index:04d}" for kind, count in counts.items() for index in range(count)]
        kinds = [kind for kind, count in counts.items() for _ in range(count)]
        started = time.perf_counter()
        ids = asyncio.run(create_jobs(names))
        enqueue(self.studio, [job_id for job_id, kind in zip(ids, kinds, strict=True) if "queued" in kind])
        print(f"{label}: created {len(ids)} jobs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        jobs = [
            {"job_id": job_id, "kind": kind, "trigger": trigger_row(job_id, name, last_seen[kind], interval)}
            for job_id, name, kind in zip(ids, names, kinds, strict=True)
        ]
        return Plan(jobs, self.folder / f"{label}-plan.json")


def trigger_row(job_id: str, name: str, last_seen: str, interval: float) -> tuple[str, str]:
    """(classpath, JSON kwargs) of the job's trigger, as the deferring task serialized it."""
    from aliyun_training.triggers.training import TrainingJobTrigger

    trigger = TrainingJobTrigger(
        backend="dlc",
        handle={"backend": "dlc", "job_id": job_id, "name": name},
        backend_config={"alibaba_cloud_conn_id": CONN_ID},
        poll_interval=interval,
        last_raw_status=last_seen,
    )
    classpath, kwargs = trigger.serialize()
    return classpath, json.dumps(kwargs)


def mix(jobs: int) -> dict[str, int]:
    """A third queued, a third running steadily, the rest finishing during the window."""
    return {"queued": jobs // 3, "steady": jobs // 3, "finishing": jobs - 2 * (jobs // 3)}


def retime(fleet: DlcFleet, job_ids: list[str], window_start: float) -> dict[str, float]:
    """Make the finishing jobs end inside the window, evenly spread, as ``fakes/account.py`` re-times
    a job: its script's Running phase now lasts until its end. Returns each job's end."""
    interval, polls = fleet.args.poll_interval, fleet.args.window_polls
    ends = {}
    for index, job_id in enumerate(job_ids):
        end = window_start + interval * (1.5 + (polls - 4) * index / max(1, len(job_ids) - 1))
        job = fleet.dlc.jobs[job_id]
        creating = job.script.phases[0]
        job.script = replace(job.script, phases=[creating, ("Running", end - job.created_at - creating[1])])
        ends[job_id] = job.planned_spans()[-1].start
    return ends


def warm_up_plan(fleet: DlcFleet) -> Path:
    """The spare jobs every mode's child warms up on: one queued, one running (never measured)."""
    last_seen = {"spare-queued": "Queuing", "spare-steady": "Running"}
    counts = dict.fromkeys(last_seen, 1)
    return fleet.create("warm-up", counts, last_seen, fleet.args.poll_interval).write()


def measure_mode(fleet: DlcFleet, label: str, mode: str, batched: bool, warm_up: Path) -> dict[str, Any]:
    """One mode in a fresh child: jobs made once it is warm, ends placed in its window."""
    args = fleet.args
    result_path = fleet.folder / f"{label}.json"
    options = {"warm_up": warm_up, "profile": profile_path(args, f"dlc-{label}")}
    command = [*child_command(mode, result_path, args, args.poll_interval, **options), "--reads-alone"]
    child = Child(label, command, mode_settings(batched, args.poll_interval, BENCH_RATE_LIMITS))
    child.expect("ready")
    plan = fleet.create(label, mix(args.jobs), LAST_SEEN, args.poll_interval)
    time.sleep(SETTLE_SECONDS)
    child.go(plan.write())
    ends = retime(fleet, plan.of_kind("finishing"), float(child.expect("window")))
    child.expect("window-end")
    child.finish()
    result = json.loads(result_path.read_text())
    problems = result["errors"] + unexpected_events(result, plan)
    if problems:
        raise SystemExit(f"{label}: {len(problems)} monitors went wrong, e.g. {problems[0]}")
    window = result["window"]
    received = [r for r in fleet.requests if window["start"] <= r.at <= window["end"]]
    return summary(label, result, plan, ends, received)


def named_jobs(request: RecordedRequest) -> list[str]:
    """The jobs a request asks about: ListJobs' JobIds, the job of a /jobs/<id> path, PAI Studio's
    WorkloadIds."""
    if request.action == "ListJobs":
        return request.query.get("JobIds", "").split(",")
    if "WorkloadIds" in request.query:
        return [request.query["WorkloadIds"]]
    parts = request.path.split("/")
    return [parts[4]] if len(parts) > 4 and parts[3] == "jobs" else []


def summary(
    label: str, result: dict[str, Any], plan: Plan, ends: dict[str, float], received: list[RecordedRequest]
) -> dict[str, Any]:
    """Per job and poll (and per minute at the defaults) what one mode's window cost."""
    kinds, polls = plan.kinds, result["polls"]
    job_polls = sum(polls.values())
    by_action: Counter[str] = Counter(request.action for request in received)
    # A steady (running) job's share of every DLC request that names it.
    running = 0.0
    for request in received:
        named = named_jobs(request)
        running += sum(kinds.get(job_id) == "steady" for job_id in named) / max(1, len(named))
    running_polls = sum(count for job_id, count in polls.items() if kinds[job_id] == "steady")
    to_event = [
        result["events"][job_id][0] - end for job_id, end in ends.items() if job_id in result["events"]
    ]
    to_notice = [
        result["noticed"][job_id] - end for job_id, end in ends.items() if job_id in result["noticed"]
    ]
    finals = [
        result["events"][job_id][0] - noticed
        for job_id, noticed in result["noticed"].items()
        if job_id in result["events"]
    ]
    in_window = [seconds for start, seconds in result["listings"] if start >= result["window"]["start"]]
    per_minute = {action: by_action[action] / job_polls * POLLS_PER_MINUTE for action in ACTIONS}
    others = sum(count for action, count in by_action.items() if action not in ACTIONS)
    jobs = result["jobs"]
    return {
        "mode": label,
        "jobs": jobs,
        "job_polls": job_polls,
        "polls_per_job": job_polls / jobs,
        "wall_s": result["wall_s"],
        "lead_in_s": result["lead_in_s"],
        "requests": dict(by_action),
        "per_job_per_minute": per_minute | {"others": others / job_polls * POLLS_PER_MINUTE},
        "status_per_job_per_poll": sum(by_action[action] for action in STATUS_ACTIONS) / job_polls,
        "dlc_per_running_job_per_minute": running / running_polls * POLLS_PER_MINUTE,
        "cpu_ms_per_job_poll": result["cpu_s"] * 1000 / job_polls,
        "gc_ms_per_job_poll": result["gc_s"] * 1000 / job_polls,
        "rss_kib_per_job": result["rss_growth_kib"] / jobs,
        "peak_rss_kib_per_job": result["peak_rss_growth_kib"] / jobs,
        "finished": len(to_event),
        "finishing": len(ends),
        "end_to_event_s": _spread(to_event),
        "end_to_notice_s": _spread(to_notice),
        "notice_to_event_s": _spread(finals),
        "listing_s": _spread(in_window),
        "page_read_s": result["page_read_s"],
        "final_reads_s": result["final_reads_s"],
    }


def _spread(seconds: list[float]) -> dict[str, float] | None:
    return {"max": max(seconds), "median": statistics.median(seconds)} if seconds else None


def measure_restart(fleet: DlcFleet) -> dict[str, Any]:
    """A fresh child inflates a thousand triggers of running jobs at once, with the deployment's
    defaults: a 10 s poll, a steady job's log every 90 s, and the rate limits (the provider's, or
    ``--restart-rate-limits``), which are real requests a second and so are not scaled. The most
    requests of each action in any one second, as the trigger process sent them (after the
    limiter) and as the emulator received them."""
    from aliyun_training.hooks.rate_limit import configured_rate, rate_limits

    args = fleet.args
    result_path = fleet.folder / "restart.json"
    settings = mode_settings(True, DEFAULT_POLL_SECONDS, args.restart_rate_limits)
    child = Child("restart", child_command("restart", result_path, args, DEFAULT_POLL_SECONDS), settings)
    child.expect("ready")
    plan = fleet.create(
        "restart", {"restart": args.jobs}, {"restart": RESTART_LAST_SEEN}, DEFAULT_POLL_SECONDS
    )
    time.sleep(SETTLE_SECONDS)
    child.go(plan.write())
    child.finish()
    result = json.loads(result_path.read_text())
    problems = result["errors"] + [
        f"{job_id}: {status}" for job_id, (_at, status) in result["events"].items()
    ]
    if problems:
        raise SystemExit(f"restart: {len(problems)} triggers went wrong, e.g. {problems[0]}")
    window = result["window"]
    received = [r for r in fleet.dlc.requests if window["start"] <= r.at <= window["end"]]
    limits = rate_limits(args.restart_rate_limits or "")
    actions = {}
    for action in sorted({request.action for request in received}):
        times = [request.at for request in received if request.action == action]
        actions[action] = {
            "requests": len(times),
            "limit_per_s": configured_rate("dlc", action, limits),
            "peak_sent_per_s": most_in_a_second(result["sent"].get(action, [])),
            "peak_per_s": most_in_a_second(times),
            "first_to_last_s": max(times) - min(times),
        }
    return {
        "jobs": result["jobs"],
        "rate_limits": args.restart_rate_limits or "the provider's defaults",
        "all_polled_s": result["all_polled_s"],
        "actions": actions,
    }


def start_emulators() -> tuple[DlcEmulator, PaiStudioEmulator]:
    from fakes.dlc import DlcEmulator

    deepen_listen_backlog()
    dlc = DlcEmulator({ACCESS_KEY_ID: ACCESS_KEY_SECRET}).start()
    for prefix, script in scripts().items():
        dlc.script_for(prefix, script)
    return dlc, start_studio()


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The three modes, one after another, then the restart."""
    dlc, studio = start_emulators()
    try:
        os.environ["AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT"] = connection_json(dlc.endpoint, studio.endpoint)
        fleet = DlcFleet(dlc, studio, folder, args)
        warm_up = warm_up_plan(fleet)
        modes = [
            measure_mode(fleet, "bare", "bare-dlc", False, warm_up),
            measure_mode(fleet, "per-job", "triggers", False, warm_up),
            measure_mode(fleet, "fleet", "triggers", True, warm_up),
        ]
        restart = measure_restart(fleet)
        failures = dlc.internal_errors + studio.internal_errors
        if failures:
            raise SystemExit(f"the emulators failed: {failures[:3]}")
    finally:
        dlc.stop()
        studio.stop()
    return {"modes": modes, "restart": restart, **targets(modes, restart, args)}


def targets(modes: list[dict[str, Any]], restart: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The issue's targets for the fleet mode and the restart, each with its numbers."""
    bare, _per_job, fleet = modes
    cpu_ratio = fleet["cpu_ms_per_job_poll"] / bare["cpu_ms_per_job_poll"]
    listing, final = (fleet[key]["max"] if fleet[key] else 0.0 for key in ("listing_s", "notice_to_event_s"))
    bound = args.poll_interval + listing + final + SCHEDULING_SLACK_S
    slowest = fleet["end_to_event_s"]["max"] if fleet["end_to_event_s"] else float("inf")
    rate_ok = all(a["peak_per_s"] <= a["limit_per_s"] + 1 for a in restart["actions"].values())
    checks = [
        (
            f"status requests per job per poll <= {MAX_STATUS_PER_POLL:g} (fleet)",
            f"{fleet['status_per_job_per_poll']:.4f}",
            fleet["status_per_job_per_poll"] <= MAX_STATUS_PER_POLL,
        ),
        (
            f"DLC requests per running job per minute <= {MAX_RUNNING_PER_MINUTE:g}, logs included (fleet)",
            f"{fleet['dlc_per_running_job_per_minute']:.3f}",
            fleet["dlc_per_running_job_per_minute"] <= MAX_RUNNING_PER_MINUTE,
        ),
        (
            f"fleet CPU per job per poll <= {MAX_CPU_RATIO:g} x bare",
            f"{cpu_ratio:.3f} x",
            cpu_ratio <= MAX_CPU_RATIO,
        ),
        (
            "max end -> event <= poll interval + longest listing + longest final reads + "
            f"{SCHEDULING_SLACK_S:g} s (fleet)",
            f"{slowest:.3f} s <= {args.poll_interval:g} + {listing:.3f} + {final:.3f} + "
            f"{SCHEDULING_SLACK_S:g} = {bound:.3f} s",
            slowest <= bound and fleet["finished"] == fleet["finishing"],
        ),
        (
            "restart: requests of an action received in any 1 s <= its rate + 1",
            ", ".join(f"{n} {a['peak_per_s']}/{a['limit_per_s']:g}" for n, a in restart["actions"].items()),
            rate_ok,
        ),
    ]
    return {
        "cpu_ratio_fleet_to_bare": cpu_ratio,
        "cpu_ratio_per_job_to_bare": modes[1]["cpu_ms_per_job_poll"] / bare["cpu_ms_per_job_poll"],
        "memory_ratio_fleet_to_bare": fleet["rss_kib_per_job"] / bare["rss_kib_per_job"],
        "checks": [{"target": t, "measured": m, "passed": p} for t, m, p in checks],
        "passed": all(p for _t, _m, p in checks),
    }


def report(outcome: dict[str, Any]) -> str:
    """The modes' table, the restart's and the targets', in Markdown."""
    modes = [
        [
            m["mode"],
            f"{m['job_polls']:,} ({m['polls_per_job']:.1f})",
            *(f"{m['per_job_per_minute'][a]:.3f}" for a in (*ACTIONS, "others")),
            f"{m['status_per_job_per_poll']:.4f}",
            f"{m['dlc_per_running_job_per_minute']:.3f}",
            f"{m['cpu_ms_per_job_poll']:.3f}",
            f"{m['gc_ms_per_job_poll']:.3f}",
            f"{m['rss_kib_per_job']:.1f}",
            _seconds(m["end_to_event_s"]) + f" ({m['finished']}/{m['finishing']})",
        ]
        for m in outcome["modes"]
    ]
    header = [
        "mode",
        "job-polls (per job)",
        "ListJobs / job / min",
        "GetJob / job / min",
        "GetPodLogs / job / min",
        "others / job / min",
        "status req / job / poll",
        "DLC req / running job / min",
        "CPU ms / job / poll",
        "of it GC",
        "RSS KiB / job",
        "end -> event s, max / median (jobs)",
    ]
    fleet = outcome["modes"][2]
    restart = outcome["restart"]
    actions = [
        [
            name,
            str(a["requests"]),
            f"{a['limit_per_s']:g}",
            str(a["peak_sent_per_s"]),
            str(a["peak_per_s"]),
            f"{a['first_to_last_s']:.2f}",
        ]
        for name, a in restart["actions"].items()
    ]
    checks = [[c["target"], c["measured"], verdict(c["passed"])] for c in outcome["checks"]]
    ratios = (
        f"CPU per job per poll, fleet / bare: {outcome['cpu_ratio_fleet_to_bare']:.3f} x; "
        f"per-job / bare: {outcome['cpu_ratio_per_job_to_bare']:.3f} x; RSS per job, fleet / bare: "
        f"{outcome['memory_ratio_fleet_to_bare']:.3f} x"
    )
    timing = (
        f"fleet, max / median s: end -> the listing that showed it {_seconds(fleet['end_to_notice_s'])}; "
        f"that listing -> event (final reads) {_seconds(fleet['notice_to_event_s'])}; listing rounds in "
        f"the window {_seconds(fleet['listing_s'])}. Alone, before the run: a page of 100 ids "
        f"{fleet['page_read_s']:.3f} s, a job's final reads {fleet['final_reads_s']:.3f} s"
    )
    ramp = (
        f"restart, {restart['jobs']:,} triggers at once, 10 s poll, rate limits: {restart['rate_limits']}; "
        f"every trigger had read its job's details and log after {restart['all_polled_s']:.2f} s"
    )
    sends = ["action", "requests", "limit / s", "most sent in any 1 s", "most received in any 1 s"]
    return "\n\n".join(
        [
            markdown(header, modes),
            ratios,
            timing,
            ramp,
            markdown([*sends, "first -> last received s"], actions),
            markdown(["target", "measured", "result"], checks),
        ]
    )


def _seconds(spread: dict[str, float] | None) -> str:
    return f"{spread['max']:.2f} / {spread['median']:.2f}" if spread else "-"
