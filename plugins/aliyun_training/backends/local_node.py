"""Supervisor for one local "node": runs its command, heartbeats, obeys stop requests, records the end.

The local backend starts this file (by path, standard library only) in its own session for every
node. It outlives the Airflow worker that launched it and talks to the rest of Airflow only through
files in the node's run directory, so status, logs and stop work from any process that sees that
directory (the triggerer, a retried worker, another container on the same volume):

- ``heartbeat`` is touched every second while the command runs;
- ``../stop_requested`` or ``../teardown_requested`` appearing makes it stop the command: SIGTERM,
  then SIGKILL to every process of the job after the grace period;
- ``log`` holds the command's stdout and stderr, each line prefixed with the time the supervisor
  read it (see :func:`split_stamp`), so the lines of a job's nodes merge in the order they came;
- ``exit.json`` records the exit code and end time, once every line of the command is in ``log``,
  and the memory cgroup's OOM-kill count when the node started and when it ended (``oom_kill``:
  [before, after], absent where the cgroup shows none), the only trace the kernel's OOM killer
  leaves: its SIGKILL looks like any other (see :func:`oom_kill_count`).

Every file it writes is ``0600`` (the job's output may print anything; only the user running the
worker and triggerer reads it). The command and every process it starts run with umask ``077``
(:data:`JOB_UMASK`), so what the job writes ($OUTPUT_DIR, checkpoints, model.pt) is as private as
its logs: a directory it creates is ``0700`` and a file ``0600``, whatever umask the worker has
(a job may still chmod what it means to share).
Usage: python local_node.py NODE_DIR GRACE_SECONDS COMMAND
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

JOB_MARKER_VAR = "ALIYUN_TRAINING_LOCAL_JOB"
STOP_FILES = ("stop_requested", "teardown_requested")
HEARTBEAT_SECONDS = 1.0
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
#: Inherited by the job's processes: they create files ``0600`` and directories ``0700``.
JOB_UMASK = 0o077
#: How long a finished node waits for the last lines of its output before recording its exit.
DRAIN_SECONDS = 5.0
#: The longest line the log holds; a longer one continues on the next line.
MAX_LINE_BYTES = 64 * 1024
#: The stamp before each line of ``log``: UTC with microseconds, always this width, so the text of
#: two stamps compares as their times do.
_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00 ")


#: The OOM-kill counter of a memory cgroup, by cgroup version: cgroup v2's ``memory.events`` and v1's
#: ``memory.oom_control`` both hold a line ``oom_kill <count>``, the number of processes of the cgroup
#: (and its descendants, v2) the kernel's OOM killer killed (Documentation/admin-guide/cgroup-v2.rst
#: "memory.events"; mm/memcontrol-v1.c ``mem_cgroup_oom_control_read``).
OOM_COUNTERS = {"cgroup2": "memory.events", "cgroup": "memory.oom_control"}


def oom_kill_count(proc_self: Path = Path("/proc/self")) -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's memory cgroup, or None
    where no memory cgroup with that counter is mounted here.

    The cgroup is found as the kernel names it: ``/proc/self/cgroup`` gives its path (v1: the line
    whose controllers include ``memory``; v2: the ``0::`` line), ``/proc/self/mountinfo`` where that
    hierarchy is mounted and which of its directories the mount shows (its root field, "/" unless a
    container sees only its own part) (Documentation/admin-guide/cgroup-v2.rst, proc(5)).
    """
    try:
        memberships = (proc_self / "cgroup").read_text().splitlines()
        mounts = (proc_self / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            paths.setdefault("cgroup2", path)
        elif "memory" in controllers.split(","):
            paths["cgroup"] = path
    for mount in mounts:
        fields, _, after = mount.partition(" - ")
        root, mountpoint = fields.split()[3:5]
        fstype, _, options = [*after.split(), "", ""][:3]
        cgroup = paths.get(fstype)
        if cgroup is None or (fstype == "cgroup" and "memory" not in options.split(",")):
            continue
        inside = os.path.relpath(cgroup, root)
        if inside.startswith(".."):
            continue
        try:
            counters = (Path(mountpoint) / inside / OOM_COUNTERS[fstype]).read_text().splitlines()
        except OSError:
            continue
        for counter in counters:
            name, _, value = counter.partition(" ")
            if name == "oom_kill":
                return int(value)
    return None


#: How a node's exit record's rise of the OOM-kill count is told (``oom_kills_rose``).
OOM_KILLS_ROSE = "the memory cgroup's oom_kill count rose"


def oom_kills_rose(record: dict[str, Any]) -> str | None:
    """What a node's exit record says of the kernel's OOM killer: a sentence when its memory
    cgroup's OOM-kill count rose while the node ran, else None (no rise, or no counter)."""
    before, after = record.get("oom_kill") or (None, None)
    if before is None or after is None or after <= before:
        return None
    return f"{OOM_KILLS_ROSE} from {before} to {after}: the kernel's OOM killer ended a process"


def split_stamp(line: bytes) -> tuple[bytes, bytes]:
    """A ``log`` line's stamp and text; a line without one (written by an earlier supervisor, or cut
    by a read that started mid-line) has the stamp b"", which sorts first."""
    match = _STAMP.match(line)
    return (line[: match.end() - 1], line[match.end() :]) if match else (b"", line)


def stamp_lines(output: BinaryIO, log_path: Path) -> None:
    """Copy the command's output into the log as it comes, each line prefixed with when it was read.

    A line longer than ``MAX_LINE_BYTES`` (a progress bar redrawn with carriage returns for an hour)
    is cut into lines of that size rather than held in memory until its newline.
    """
    with output, open_private(log_path) as log:
        for line in iter(lambda: output.readline(MAX_LINE_BYTES), b""):
            stamp = datetime.now(UTC).isoformat(timespec="microseconds").encode()
            log.write(stamp + b" " + line + (b"" if line.endswith(b"\n") else b"\n"))
            log.flush()


def open_private(path: Path) -> BinaryIO:
    """``path`` opened for appending, created readable and writable by its owner only."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE), "ab")


def write_json_atomically(path: Path, payload: dict) -> None:
    """Write ``payload`` (owner-only) so readers see either nothing or the whole document."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE), "w") as out:
        out.write(json.dumps(payload))
    os.replace(tmp, path)


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid``, or None when it no longer runs (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def job_pids(marker_prefix: str) -> set[int]:
    """Live processes whose job marker starts with ``marker_prefix`` (torchrun's workers included).

    The marker is ``<job id>:node-<rank>``: ``"<job id>:"`` selects a whole job, the full value one node.
    """
    marker = f"{JOB_MARKER_VAR}={marker_prefix}".encode()
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ and proc_start_time(int(entry.name)) is not None:
            pids.add(int(entry.name))
    return pids


def kill_processes(marker_prefix: str, signum: signal.Signals, spare: int | None = None) -> None:
    for pid in job_pids(marker_prefix) - {spare}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def main(argv: list[str]) -> int:
    node_dir, grace, command = Path(argv[1]), float(argv[2]), argv[3]
    node_marker = f"{os.environ[JOB_MARKER_VAR]}\0"
    # Set here, before the command starts, so no process of the job ever runs with the worker's.
    os.umask(JOB_UMASK)
    oom_before = oom_kill_count()
    output, output_end = os.pipe()
    child = subprocess.Popen(
        ["/bin/bash", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=output_end,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    os.close(output_end)
    copier = threading.Thread(
        target=stamp_lines, args=(os.fdopen(output, "rb"), node_dir / "log"), daemon=True
    )
    copier.start()
    stop_since: list[float] = []

    def request_stop(_signum: int = 0, _frame: object = None) -> None:
        if not stop_since:
            stop_since.append(time.monotonic())
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    heartbeat = node_dir / "heartbeat"
    while (exit_code := child.poll()) is None:
        heartbeat.touch(mode=PRIVATE_FILE_MODE)
        if any((node_dir.parent / name).exists() for name in STOP_FILES):
            request_stop()
        if stop_since and time.monotonic() - stop_since[0] > grace:
            kill_processes(node_marker, signal.SIGKILL, spare=os.getpid())
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=HEARTBEAT_SECONDS)
    # The command is done, but processes it started may linger (torchrun workers in their own
    # sessions): a node ends with nothing it started left behind.
    kill_processes(node_marker, signal.SIGKILL, spare=os.getpid())
    # Their output ends with them; a process that escaped the marker must not hold the exit back.
    copier.join(timeout=DRAIN_SECONDS)
    oom_after = oom_kill_count()
    write_json_atomically(
        node_dir / "exit.json",
        {
            "exit_code": exit_code,
            "finished": datetime.now(UTC).isoformat(timespec="milliseconds"),
            **({"oom_kill": [oom_before, oom_after]} if None not in (oom_before, oom_after) else {}),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
