"""What keeping a job's live record costs the trigger, against the same poll without it.

Each poll hands ``JobMonitor`` a log read of ``--lines`` lines, ``--progress`` of them progress
contract lines (the rest plain), and a running status, as a steadily running job's read does. The
baseline monitor only logs the lines (what every trigger did before the live record); the measured
one also has a ``LiveView``: progress parsed and tracked, each node's tail kept, the progress line
due each minute, announcements checked, and the record built and sealed as the trigger writes it
every ``LIVE_SECONDS``. Both run in this process on the same lines, alternately, and the ratio of
their CPU time per poll is printed, with the sealed record's size after ``--polls`` polls.

The backend is an in-process stand-in that answers the chunk and the status (no I/O): the platform's
answers cost the same with or without the record, so leaving them out shows the record's own cost
at its largest share. Both log each line through a formatting handler into /dev/null, as the
triggerer formats each line into the task's log file.

Run: ``PYTHONPATH=plugins:. python bench/live_view.py``. Exits non-zero when a poll with the record
costs more than ``--max-ratio`` (3) times the baseline poll. The baseline is the cheapest a poll can
be (no platform call, a plain formatter): the ratio overstates the share the record takes of a real
trigger's poll, whose status and log reads are HTTP requests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from aliyun_training.backends.base import JobHandle, JobState, JobStatus, LogChunk
from aliyun_training.live import LIVE_SECONDS, LiveView, seal_live
from aliyun_training.monitor import JobMonitor

START = datetime(2026, 12, 7, tzinfo=UTC)


class _Backend:
    """Answers each poll with the next prepared log chunk and a running status."""

    def __init__(self, chunks: list[list[str]]) -> None:
        self.chunks, self.index = chunks, 0
        self.status_answer = JobStatus(state=JobState.RUNNING, raw="Running", started=START.isoformat())

    def status(self, handle: JobHandle) -> JobStatus:
        return self.status_answer

    def logs(self, handle: JobHandle, cursor: Any = None) -> LogChunk:
        lines = self.chunks[self.index % len(self.chunks)]
        self.index += 1
        return LogChunk(lines=lines, cursor={"n": self.index})


def _chunks(polls: int, lines: int, progress: int) -> list[list[str]]:
    chunks = []
    for poll in range(polls):
        at = START + timedelta(seconds=5 * poll)
        chunk = []
        for i in range(lines):
            step = poll * progress + i + 1
            if i < progress:
                report = {"event": "progress", "step": step, "total_steps": 100_000, "time": at.timestamp()}
                report["metrics"] = {"loss": 1 / step, "lr": 1e-4, "grad_norm": 0.5, "throughput": 812.0}
                chunk.append(f"[node-{i % 2}] " + json.dumps(report))
            else:
                chunk.append(f"[node-{i % 2}] step {step} data 0.01s compute 0.2s")
        chunks.append(chunk)
    return chunks


def _run(chunks: list[list[str]], polls: int, with_view: bool) -> tuple[float, int]:
    log = logging.getLogger("bench.live_view")
    handle = JobHandle(backend="dlc", job_id="dlc1", name="bench")
    view = LiveView(job_id="dlc1", backend="dlc", console_url=None, gpus=16) if with_view else None
    monitor = JobMonitor(_Backend(chunks), handle, log, view=view)  # type: ignore[arg-type]
    every = max(int(LIVE_SECONDS / 5), 1)  # the trigger writes the record every LIVE_SECONDS at a 5 s poll
    now = START
    started = time.process_time()
    for poll in range(polls):
        monitor.poll()
        if view is not None:
            now = START + timedelta(seconds=5 * poll)
            view.announcements(now)
            if poll % every == 0:
                seal_live(view.record(now), "dag", "run", "train")
    seconds = (time.process_time() - started) / polls
    size = len(json.dumps(seal_live(view.record(now), "dag", "run", "train"))) if view is not None else 0
    return seconds, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=2000)
    parser.add_argument("--lines", type=int, default=20, help="log lines a poll reads")
    parser.add_argument("--progress", type=int, default=2, help="of them, progress contract lines")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=3.0)
    args = parser.parse_args()
    logger = logging.getLogger("bench.live_view")
    handler = logging.FileHandler(os.devnull)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s %(filename)s:%(lineno)d %(message)s")
    )
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    chunks = _chunks(args.polls, args.lines, args.progress)
    base, live, size = [], [], 0
    for _ in range(args.rounds):
        base.append(_run(chunks, args.polls, with_view=False)[0])
        seconds, size = _run(chunks, args.polls, with_view=True)
        live.append(seconds)
    ratio = min(live) / min(base)
    print(f"polls {args.polls}, {args.lines} lines a poll ({args.progress} progress), best of {args.rounds}")
    print(f"baseline poll (lines logged):      {min(base) * 1e6:8.1f} us")
    print(f"poll with the live record:         {min(live) * 1e6:8.1f} us  ({ratio:.2f} x)")
    print(f"sealed record after the polls:     {size / 1024:8.1f} KiB")
    ok = ratio <= args.max_ratio
    print(
        f"{'PASS' if ok else 'FAIL'}: the live record costs {ratio:.2f} x the poll (limit {args.max_ratio} x)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
