"""What the parent of the fleet benchmark needs for every platform: its children and its tables.

The fleet benchmark (``trigger_scale.py --fleet``) polls faster than a triggerer does, to keep a
run short, and reports what the same polls would cost at the defaults: a 10 s poll interval
(``TrainingJobTrigger``'s default) and a log read every 90 s (``steady_log_seconds``). Its children
poll every ``--poll-interval`` seconds and read a steady job's log every ``LOG_POLLS`` intervals (90 s
is 9 of 10 s), so every count per poll is the count per poll at the defaults, and a minute is
``POLLS_PER_MINUTE`` polls.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fleet_child import PROTOCOL
from project_env import PROJECT_ROOT
from trigger_scale import BATCHED_STATUS_VARIABLE, RATE_LIMITS_VARIABLE

if TYPE_CHECKING:
    import argparse

#: The defaults the report scales to: a poll every 10 s, a steady job's log read every 90 s.
DEFAULT_POLL_SECONDS = 10.0
DEFAULT_LOG_SECONDS = 90.0
LOG_POLLS = DEFAULT_LOG_SECONDS / DEFAULT_POLL_SECONDS
POLLS_PER_MINUTE = 60 / DEFAULT_POLL_SECONDS
STEADY_LOG_VARIABLE = "AIRFLOW__ALIYUN_TRAINING__STEADY_LOG_SECONDS"
CHILD = Path(__file__).with_name("fleet_child.py")


def mode_settings(batched: bool, interval: float, rate_limits: str | None) -> dict[str, str]:
    """The provider's settings of one mode's child, as environment variables: batching on or off,
    the steady log interval scaled to the poll interval, and the rate limits (None: the defaults)."""
    settings = {
        BATCHED_STATUS_VARIABLE: str(batched),
        STEADY_LOG_VARIABLE: f"{LOG_POLLS * interval:g}",
    }
    return settings | ({RATE_LIMITS_VARIABLE: rate_limits} if rate_limits is not None else {})


def quiet_dropped_connections() -> None:
    """Keep the parent's servers quiet about connections the children drop: a monitor cancelled at
    the end of a window (as the triggerer cancels a trigger) may reset its connection mid-request,
    and ``socketserver`` prints each such error's traceback. Any other error is still printed."""
    report = http.server.ThreadingHTTPServer.handle_error

    def handle_error(self: http.server.ThreadingHTTPServer, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            report(self, request, client_address)

    http.server.ThreadingHTTPServer.handle_error = handle_error  # type: ignore[method-assign,assignment]


class Child:
    """One measuring child (``fleet_child.py``): its protocol lines on stdout, its plan on stdin.

    Lines of the child's stdout that are not the protocol's are passed on to stderr.
    """

    def __init__(self, label: str, command: list[str], settings: dict[str, str]) -> None:
        self.label = label
        environment = {key: value for key, value in os.environ.items() if key != RATE_LIMITS_VARIABLE}
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), *command],
            cwd=PROJECT_ROOT,
            env=environment | settings,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def expect(self, word: str) -> str:
        """Wait for the child to say ``word``; what it said after the word."""
        stdout = self._stream(self.process.stdout)
        while line := stdout.readline():
            if not line.startswith(PROTOCOL):
                sys.stderr.write(line)
                continue
            said, _, rest = line.removeprefix(PROTOCOL).strip().partition(" ")
            if said != word:
                raise SystemExit(f"{self.label}: expected {word!r} from the child, it said {said!r}")
            return rest
        raise SystemExit(f"{self.label}: the child ended (exit {self.process.wait()}) before {word!r}")

    def go(self, plan: Path) -> None:
        """Hand the child its plan: the jobs exist now."""
        stdin = self._stream(self.process.stdin)
        stdin.write(f"{plan}\n")
        stdin.flush()

    def finish(self) -> None:
        """Wait for the child to end; anything it failed with ends the benchmark."""
        stdout = self._stream(self.process.stdout)
        for line in stdout:
            sys.stderr.write(line)
        code = self.process.wait()
        if code != 0:
            raise SystemExit(f"{self.label}: the child failed (exit {code}), see above")

    def _stream(self, stream: IO[str] | None) -> IO[str]:
        assert stream is not None  # both are pipes
        return stream


def child_command(
    mode: str, result: Path, args: argparse.Namespace, interval: float, **options: Path | None
) -> list[str]:
    """The child's command line: its mode, where its result goes, the poll settings, and any of
    ``--warm-up``/``--profile`` given as ``options`` (None: left out)."""
    command = ["--mode", mode, "--result", str(result), "--poll-interval", str(interval)]
    command += ["--window-polls", str(args.window_polls), "--start-spread", f"{LOG_POLLS * interval:g}"]
    for name, path in options.items():
        if path is not None:
            command += [f"--{name.replace('_', '-')}", str(path)]
    return command


def profile_path(args: argparse.Namespace, label: str) -> Path | None:
    return args.profile_dir / f"{label}.prof" if args.profile_dir is not None else None


@dataclass(frozen=True)
class Plan:
    """The jobs of one mode as the parent created them, by kind, and where their plan file is."""

    jobs: list[dict[str, Any]]
    path: Path

    def write(self) -> Path:
        self.path.write_text(json.dumps({"jobs": self.jobs}))
        return self.path

    def of_kind(self, kind: str) -> list[str]:
        return [job["job_id"] for job in self.jobs if job["kind"] == kind]

    @property
    def kinds(self) -> dict[str, str]:
        return {job["job_id"]: job["kind"] for job in self.jobs}


def unexpected_events(result: dict[str, Any], plan: Plan) -> list[str]:
    """Events no monitor should have fired: a job that was to keep running, or that ended otherwise
    than succeeded (an ``error`` outcome is a trigger that failed)."""
    kinds = plan.kinds
    return [
        f"{kinds.get(job_id, '?')} job {job_id}: {status}"
        for job_id, (_at, status) in result["events"].items()
        if kinds.get(job_id) != "finishing" or status != "succeeded"
    ]


def most_in_a_second(times: list[float]) -> int:
    """The most of ``times`` (seconds) in any half-open window of one second."""
    ordered, first, most = sorted(times), 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the report prints what docs/benchmarks.md records."""
    align = ["---" if index == 0 else "---:" for index in range(len(header))]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def verdict(passed: bool) -> str:
    return "**PASS**" if passed else "**FAIL**"
