"""Run a distributed job on this machine: one process tree per node, rendezvous on loopback.

Each node gets MASTER_ADDR, MASTER_PORT, WORLD_SIZE (= nodes) and RANK (= node index) exactly as
PAI-DLC injects them, so the torchrun line that runs here runs unchanged on DLC.

Everything about a job lives in its run directory (``<root>/<job name>/``)::

    job.json              name, job id, spec, master port, created
    stop_requested        someone asked the job to stop (the job ends Stopped)
    teardown_requested    a node failed; the others are being stopped (the job ends Failed)
    node-<r>/pid.json     supervisor pid, host and kernel start time (guards against pid reuse)
    node-<r>/heartbeat    touched every second by the node's supervisor while it runs
    node-<r>/log          the node's stdout and stderr
    node-<r>/exit.json    exit code and end time, written by the node's supervisor

Each node's supervisor (``local_node.py``) watches the stop files, so status, logs and stop work
from any process that sees the run directory (the triggerer, a retried worker) and after the
launching worker died. Every process of a job carries ``ALIYUN_TRAINING_LOCAL_JOB=<job id>:node-<r>``
in its environment, which finds torchrun's workers even after they were re-parented (Linux /proc).

A job never sees the worker's secrets: it inherits only the variables in :data:`INHERITED_VARIABLES`
and :data:`INHERITED_PREFIXES` (not ``AIRFLOW_CONN_*``, the metadata database URL, the Fernet key
or ``ALIBABA_CLOUD_*`` keys), plus the spec's ``env`` and the contract above. The run directory is
``0700`` and its files ``0600``, and every process of a job runs with umask ``077`` (set by
``local_node.py``), so what the job writes under ``$OUTPUT_DIR`` (checkpoints, metrics.json,
model.pt) is private too: its logs, job.json and outputs are readable by the user that runs the
worker and triggerer (the same user, as in the docker-compose deployment), no one else.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import heapq
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from itertools import takewhile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel

from aliyun_training.backends.base import (
    FoundJob,
    JobHandle,
    JobState,
    JobStatus,
    LaunchedJob,
    LogChunk,
    OffloadedAsyncMixin,
    PlannedSubmission,
    node_line,
    same_owner,
)
from aliyun_training.backends.local_node import (
    HEARTBEAT_SECONDS,
    JOB_MARKER_VAR,
    OOM_KILLS_ROSE,
    PRIVATE_DIR_MODE,
    job_pids,
    kill_processes,
    oom_kills_rose,
    open_private,
    proc_start_time,
    split_stamp,
    write_json_atomically,
)
from aliyun_training.failures import COMMAND_NOT_RUN, DATA_ERROR_EXIT, Failure, FailureClass
from aliyun_training.failures.origin import EndedNode, origin_order
from aliyun_training.failures.torchrun import EVIDENCE_LINES, SIGKILL_AMBIGUOUS, read_node_output
from aliyun_training.gpu_use import GpuReading, GpuSample
from aliyun_training.settings import local_paths
from aliyun_training.spec import JobOwner, TrainingJobSpec, describe_owner
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

_NODE_SUPERVISOR = Path(__file__).with_name("local_node.py")
#: What ``nvidia-smi`` is asked of every GPU, one CSV line each, without header or units.
NVIDIA_SMI_FIELDS = ("index", "utilization.gpu", "memory.used")
NVIDIA_SMI_QUERY = (f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader,nounits")
NVIDIA_SMI_TIMEOUT_SECONDS = 10
NO_NVIDIA_SMI = "no GPU metric available: nvidia-smi is not on this machine"
#: A node without a pid this long after the job was created was never launched (launcher died).
_LAUNCH_GRACE_SECONDS = 60.0
#: A supervisor whose heartbeat is older than this is gone (SIGKILLed, OOM-killed, host rebooted).
_HEARTBEAT_STALE_SECONDS = 10 * HEARTBEAT_SECONDS
_MAX_LOG_BYTES_PER_CALL = 256 * 1024
#: One line of a node's log with its newline; a finished node's last line may have none.
_LOG_RECORD = re.compile(rb"[^\n]*\n|[^\n]+\Z")

#: What a training process needs from the worker's environment, and why. Left out on purpose, besides
#: Airflow's settings and cloud keys: proxy variables (their URLs may carry a password) and tokens
#: of other services (e.g. HF_TOKEN); a job that needs one gets it in the spec's ``env``.
INHERITED_VARIABLES = frozenset(
    {
        "PATH",  # finds bash tools and torchrun (the worker interpreter's bin directory goes first)
        "HOME",  # ~/.cache of torch, pip and datasets
        "USER",  # getpass.getuser(), e.g. torch's default cache and compile directories
        "LOGNAME",  # the same, as POSIX names it
        "SHELL",  # the shell tools start for subcommands
        "LANG",  # text encoding of the job's output and of the files it reads
        "LANGUAGE",  # message language, with LANG
        "TZ",  # timestamps in the job's logs match the worker's
        "TMPDIR",  # where the job's temporary files go (the worker's choice of disk)
        "TERM",  # terminal capabilities for tools that format their output
        "VIRTUAL_ENV",  # the interpreter's environment, as tools that look for it expect
        "PYTHONPATH",  # the modules the worker's interpreter imports (no secret; set by deployments)
        "LD_LIBRARY_PATH",  # CUDA, cuDNN, NCCL and driver libraries outside the default search path
        "OMP_NUM_THREADS",  # CPU threads per process, set by the deployment for the machine
    }
)
#: Families of settings for the GPU, the collective libraries and the math libraries: CUDA_* (e.g.
#: CUDA_VISIBLE_DEVICES), NVIDIA_* (the container runtime's device selection), NCCL_* and GLOO_*
#: (network interfaces, debugging), MKL_*, TORCH_* and PYTORCH_* (allocator and debug settings),
#: LC_* (the locale).
INHERITED_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "GLOO_", "MKL_", "TORCH_", "PYTORCH_", "LC_")


class _NodeState(BaseModel):
    rank: int
    launched: bool
    alive: bool
    exit_code: int | None = None
    started: str | None = None
    finished: str | None = None
    #: What its supervisor's exit record says of the kernel's OOM killer (``oom_kills_rose``).
    oom_killed: str | None = None

    @property
    def vanished(self) -> bool:
        """The node's supervisor is gone without recording an exit: it was SIGKILLed or OOM-killed."""
        return self.launched and not self.alive and self.exit_code is None

    @property
    def failed(self) -> bool:
        return self.vanished or self.exit_code not in (None, 0)


class _LogLine(NamedTuple):
    """A line of a node's log, with when its supervisor read it."""

    stamp: bytes
    rank: int
    #: The byte offset just after the line in the node's log: the node's cursor once it is logged.
    end: int
    text: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a training process may see: allow-listed names and prefixes only."""
    return {
        name: value
        for name, value in environ.items()
        if name in INHERITED_VARIABLES or name.startswith(INHERITED_PREFIXES)
    }


def _exit_info(node_dir: Path) -> dict[str, Any]:
    """What the node's supervisor recorded when its node ended (exit code, time); empty until then."""
    try:
        return dict(json.loads((node_dir / "exit.json").read_text()))
    except FileNotFoundError:
        return {}


def _last_beat(node_dir: Path, pid: dict[str, Any]) -> str:
    """When the node's supervisor last showed it was alive: its heartbeat, else its start."""
    try:
        beat = (node_dir / "heartbeat").stat().st_mtime
    except FileNotFoundError:
        return str(pid["started"])
    return datetime.fromtimestamp(beat, UTC).isoformat(timespec="milliseconds")


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


class LocalBackend(OffloadedAsyncMixin):
    """Jobs as process trees on this machine, with their state kept in a run directory."""

    name = "local"

    def __init__(
        self,
        root: str | None = None,
        workdir: str | None = None,
        stop_grace_seconds: float = 10.0,
        master_port: int | None = None,
    ) -> None:
        self.root = Path(root) if root else local_paths().runs
        self.workdir = workdir
        self.stop_grace_seconds = stop_grace_seconds
        self.master_port = master_port

    @property
    def config(self) -> dict[str, Any]:
        """Resolved settings, so another process (the triggerer) reaches the same run directories."""
        return {
            "root": str(self.root),
            "workdir": self.workdir,
            "stop_grace_seconds": self.stop_grace_seconds,
            "master_port": self.master_port,
        }

    # -- submit and find -------------------------------------------------------------------------

    def check(self, spec: TrainingJobSpec, name: str) -> None:
        """Nothing beyond the spec's own rules: the processes start here, with what the spec names."""

    def submit(self, spec: TrainingJobSpec, name: str) -> JobHandle:
        """Launch ``spec``; if a job under ``name`` is still active, return it instead of a second one."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._name_lock(name):
            found = self.find(name)
            if found is not None:
                if not same_owner(spec.owner, found.owner):
                    raise SpecError(
                        f"job name: {self.root / name} holds a job that was not launched by this task (its "
                        f"job.json names {describe_owner(found.owner)}); it is neither reused nor archived "
                        "(fix: move that directory away, or give each Airflow deployment its own "
                        "[aliyun_training] installation_id)"
                    )
                existing = found.handle
                if not self.status(existing).state.is_terminal:
                    return existing
                # A failed job's other nodes may still be tearing down, and their supervisors write
                # into the run directory by path: end them before a new attempt takes the name.
                self.stop(existing)
                self._archive(existing)
            handle = JobHandle(backend=self.name, job_id=f"{name}.{uuid.uuid4().hex[:8]}", name=name)
            self._publish_job_dir(handle, spec)
            self._launch_nodes(handle, spec)
        return handle

    def planned_requests(self, spec: TrainingJobSpec, name: str) -> list[PlannedSubmission]:
        """The processes ``submit`` starts: one torchrun per node, each running the command."""
        body = {
            "name": name,
            "nodes": spec.nodes,
            "command": spec.command,
            "working_dir": spec.working_dir,
            "env": spec.env,
            "output_dir": spec.output_dir,
        }
        return [PlannedSubmission("local", "start processes", body)]

    def find(self, name: str, since: datetime | None = None) -> FoundJob | None:
        try:
            job = json.loads((self.root / name / "job.json").read_text())
        except FileNotFoundError:
            return None
        return FoundJob(
            handle=JobHandle(backend=self.name, job_id=job["job_id"], name=job["name"]), owner=_owner(job)
        )

    @contextlib.contextmanager
    def _name_lock(self, name: str) -> Iterator[None]:
        """Serialize submits of one name across processes, so two workers cannot both launch it."""
        with (self.root / f".{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _archive(self, handle: JobHandle) -> None:
        """Keep a finished attempt's directory for inspection and free the name for a new attempt."""
        archive = self.root / ".archive"
        archive.mkdir(exist_ok=True)
        os.replace(self.root / handle.name, archive / handle.job_id)

    def _publish_job_dir(self, handle: JobHandle, spec: TrainingJobSpec) -> None:
        staging = self.root / f".{handle.job_id}.tmp"
        staging.mkdir(mode=PRIVATE_DIR_MODE)
        for rank in range(spec.nodes):
            (staging / f"node-{rank}").mkdir(mode=PRIVATE_DIR_MODE)
        job = {
            "name": handle.name,
            "job_id": handle.job_id,
            "created": _now(),
            "master_port": self.master_port or _free_port(),
            "spec": spec.model_dump(mode="json"),
        }
        write_json_atomically(staging / "job.json", job)
        os.replace(staging, self.root / handle.name)

    def _launch_nodes(self, handle: JobHandle, spec: TrainingJobSpec) -> None:
        job_dir = self.root / handle.name
        master_port = self._job(handle)["master_port"]
        bin_dir = str(Path(sys.executable).parent)
        for rank in range(spec.nodes):
            env = {
                **inherited_environment(os.environ),
                **spec.env,
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONUNBUFFERED": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(master_port),
                "WORLD_SIZE": str(spec.nodes),
                "RANK": str(rank),
                JOB_MARKER_VAR: f"{handle.job_id}:node-{rank}",
            }
            if spec.output_dir:
                env.setdefault("OUTPUT_DIR", spec.output_dir)
            node_dir = job_dir / f"node-{rank}"
            with open_private(node_dir / "supervisor.log") as supervisor_log:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        str(_NODE_SUPERVISOR),
                        str(node_dir),
                        str(self.stop_grace_seconds),
                        spec.command,
                    ],
                    cwd=spec.working_dir or self.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=supervisor_log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            write_json_atomically(
                node_dir / "pid.json",
                {
                    "pid": proc.pid,
                    "host": socket.gethostname(),
                    "start_time": proc_start_time(proc.pid),
                    "started": _now(),
                },
            )

    # -- status ----------------------------------------------------------------------------------

    def status(self, handle: JobHandle) -> JobStatus:
        """Derive the job's state from its run directory; a failed node stops the others, as on DLC."""
        job = self._job(handle)
        nodes = [self._node_state(handle, rank) for rank in range(job["spec"]["nodes"])]
        started = min((n.started for n in nodes if n.started), default=None)
        finished = max((n.finished for n in nodes if n.finished), default=None)
        running = any(n.alive for n in nodes)
        times = {"started": started, "finished": None if running else finished or _now()}

        if (self.root / handle.name / "stop_requested").exists():
            if running:
                return JobStatus(state=JobState.STOPPING, raw="Stopping", started=started)
            return JobStatus(state=JobState.STOPPED, raw="Stopped", reason="stopped on request", **times)

        failed = self._in_failure_order(handle, [n for n in nodes if n.failed])
        for node in failed:
            if node.vanished:
                # Its supervisor cannot clean up any more: kill what it left behind on this host.
                kill_processes(f"{handle.job_id}:node-{node.rank}\0", signal.SIGKILL)
        if failed:
            first = failed[0]
            if running:
                (self.root / handle.name / "teardown_requested").touch()
            how = "vanished without an exit code" if first.vanished else _describe_exit(first.exit_code or 0)
            oom = f"; {first.oom_killed}" if first.oom_killed else ""
            return JobStatus(
                state=JobState.FAILED,
                raw="Failed",
                reason=f"node {first.rank} (RANK={first.rank}) {how}{oom}",
                reason_code=_exit_code_name(first),
                failed_node=first.rank,
                exit_code=first.exit_code,
                started=started,
                finished=first.finished or _now(),
            )
        if all(n.exit_code == 0 for n in nodes):
            return JobStatus(state=JobState.SUCCEEDED, raw="Succeeded", **times)
        if not all(n.launched for n in nodes):
            age = time.time() - datetime.fromisoformat(job["created"]).timestamp()
            if age > _LAUNCH_GRACE_SECONDS:
                (self.root / handle.name / "teardown_requested").touch()
                return JobStatus(
                    state=JobState.FAILED,
                    raw="Failed",
                    reason="the launcher died before starting every node; retry to relaunch",
                    reason_code=LAUNCHER_DIED,
                    **times,
                )
            return JobStatus(state=JobState.PENDING, raw="Launching", started=started)
        return JobStatus(state=JobState.RUNNING, raw="Running", started=started)

    def _in_failure_order(self, handle: JobHandle, failed: list[_NodeState]) -> list[_NodeState]:
        """Failed nodes, the one where the failure began first (``failures.origin``: nodes that
        failed because of another last, then by when each ended, a vanished node at its last
        heartbeat and with no output of its own to read)."""
        if len(failed) < 2:
            return failed
        ended = [EndedNode(node=node.rank, finished=node.finished) for node in failed]
        outputs = {
            node.rank: self.tail(handle, node.rank, EVIDENCE_LINES) for node in failed if not node.vanished
        }
        by_rank = {node.rank: node for node in failed}
        return [by_rank[node.node] for node in origin_order(ended, outputs)]

    def _node_state(self, handle: JobHandle, rank: int) -> _NodeState:
        node_dir = self.root / handle.name / f"node-{rank}"
        try:
            pid = json.loads((node_dir / "pid.json").read_text())
        except FileNotFoundError:
            return _NodeState(rank=rank, launched=False, alive=False)
        exit_info = _exit_info(node_dir)
        alive = not exit_info and self._supervisor_alive(node_dir, pid)
        if not exit_info and not alive:
            # Its supervisor records the end, then exits: one that ended between the two reads above
            # has its record by now, and only one without a record vanished.
            exit_info = _exit_info(node_dir)
        finished = exit_info.get("finished")
        if not exit_info and not alive:
            # Vanished: it ended, as far as anyone can tell, at its last heartbeat, which orders it
            # among the nodes that recorded their end (a lost node before the survivors it took down).
            finished = _last_beat(node_dir, pid)
        return _NodeState(
            rank=rank,
            launched=True,
            alive=alive,
            exit_code=exit_info.get("exit_code"),
            started=pid["started"],
            finished=finished,
            oom_killed=oom_kills_rose(exit_info),
        )

    @staticmethod
    def _supervisor_alive(node_dir: Path, pid: dict[str, Any]) -> bool:
        """Alive while its heartbeat is fresh; on the launching host, /proc tells at once."""
        if pid["host"] == socket.gethostname() and proc_start_time(pid["pid"]) != pid["start_time"]:
            return False
        beat = datetime.fromisoformat(_last_beat(node_dir, pid)).timestamp()
        return time.time() - beat < _HEARTBEAT_STALE_SECONDS

    def _job(self, handle: JobHandle) -> dict[str, Any]:
        job = json.loads((self.root / handle.name / "job.json").read_text())
        if job["job_id"] != handle.job_id:
            raise LookupError(
                f"local job {handle.job_id} was replaced by {job['job_id']} under {handle.name}"
            )
        return job

    # -- logs ------------------------------------------------------------------------------------

    def logs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        """New complete lines of every node's log since ``cursor``, in the order the nodes' supervisors
        read them from their commands, each prefixed with the node (its RANK).

        A read that stopped at its size bound has more lines after its last one: lines of other nodes
        stamped later wait for the next call, so no line is logged after one that came later.
        """
        offsets = dict(cursor or {})
        ranks = range(self._job(handle)["spec"]["nodes"])
        reads = [self._new_lines(handle, rank, offsets.get(f"node-{rank}", 0)) for rank in ranks]
        cut = min((lines[-1].stamp for lines, truncated in reads if truncated and lines), default=None)
        shown = [list(takewhile(lambda line: cut is None or line.stamp <= cut, lines)) for lines, _ in reads]
        for lines in shown:
            if lines:
                offsets[f"node-{lines[-1].rank}"] = lines[-1].end
        # Each node's lines keep their order; lines read at the same moment go node by node.
        merged = heapq.merge(*shown, key=lambda line: line.stamp)
        return LogChunk(
            lines=[node_line(line.rank, text) for line in merged for text in line.text.splitlines() or [""]],
            cursor=offsets,
            more=any(truncated for _, truncated in reads),
        )

    def _new_lines(self, handle: JobHandle, rank: int, offset: int) -> tuple[list[_LogLine], bool]:
        """Node ``rank``'s complete log lines from byte ``offset``, and whether the read stopped at
        its size bound with more to read."""
        path = self.root / handle.name / f"node-{rank}" / "log"
        if not path.exists():
            return [], False
        with path.open("rb") as log:
            log.seek(offset)
            data = log.read(_MAX_LOG_BYTES_PER_CALL)
        # A running node may be mid-line; a finished node's last line counts even without "\n".
        node_done = (path.parent / "exit.json").exists() and len(data) < _MAX_LOG_BYTES_PER_CALL
        complete = data if node_done else data[: data.rfind(b"\n") + 1]
        lines = []
        for record in _LOG_RECORD.finditer(complete):
            stamp, text = split_stamp(record.group().rstrip(b"\n"))
            lines.append(_LogLine(stamp, rank, offset + record.end(), text.decode(errors="replace")))
        return lines, len(data) == _MAX_LOG_BYTES_PER_CALL and bool(complete)

    def tail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        path = self.root / handle.name / f"node-{node}" / "log"
        if not path.exists():
            return []
        with path.open("rb") as log:
            log.seek(max(0, path.stat().st_size - 64 * 1024))
            text = [split_stamp(line)[1] for line in log.read().split(b"\n")]
        return b"\n".join(text).decode(errors="replace").splitlines()[-lines:]

    # -- stop ------------------------------------------------------------------------------------

    def stop(self, handle: JobHandle) -> None:
        """Ask every node to stop and wait until they have; on a finished job, only sweep leftovers.

        Supervisors send SIGTERM, then SIGKILL after ``stop_grace_seconds``. Processes whose
        supervisor was itself killed are found by their job marker and killed here.
        """
        if not self.status(handle).state.is_terminal:
            (self.root / handle.name / "stop_requested").touch()
            deadline = time.monotonic() + self.stop_grace_seconds + 5 * HEARTBEAT_SECONDS
            while self.status(handle).state is JobState.STOPPING and time.monotonic() < deadline:
                time.sleep(0.2)
        kill_processes(f"{handle.job_id}:", signal.SIGKILL)
        deadline = time.monotonic() + 5
        while job_pids(f"{handle.job_id}:") and time.monotonic() < deadline:
            time.sleep(0.05)

    # -- GPU use ---------------------------------------------------------------------------------

    async def agpu_reading(self, handle: JobHandle, since: datetime) -> GpuReading:
        """This machine's GPUs now, from ``nvidia-smi`` (in a worker thread: it is a process)."""
        return await asyncio.to_thread(self.gpu_reading)

    def gpu_reading(self) -> GpuReading:
        """Every GPU of the machine that asks, as ``nvidia-smi`` reports it at this moment: a local
        job's nodes run on the machine that holds its run directory, and their GPUs are that
        machine's (which of them a job uses, ``CUDA_VISIBLE_DEVICES`` decides, not known here).
        There is no history to read, so each reading is one moment whatever ``since`` was."""
        program = shutil.which("nvidia-smi")
        if program is None:
            return GpuReading(source=self.name, unavailable=NO_NVIDIA_SMI)
        at = datetime.now(UTC)
        try:
            done = subprocess.run(
                [program, *NVIDIA_SMI_QUERY],
                capture_output=True,
                text=True,
                timeout=NVIDIA_SMI_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return GpuReading(
                source=self.name, unavailable=f"nvidia-smi did not answer in {NVIDIA_SMI_TIMEOUT_SECONDS} s"
            )
        except OSError as exc:
            return GpuReading(source=self.name, unavailable=f"nvidia-smi could not run: {exc}")
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return GpuReading(
                source=self.name, unavailable=f"nvidia-smi exited with code {done.returncode}: {said[0]}"
            )
        return GpuReading(source=self.name, samples=nvidia_smi_samples(done.stdout, at, socket.gethostname()))

    # -- where results are -----------------------------------------------------------------------

    def output_uri(self, handle: JobHandle) -> str | None:
        return self._job(handle)["spec"].get("output_dir")

    def console_url(self, handle: JobHandle) -> str | None:
        return None

    def failure_details(self, handle: JobHandle) -> list[str]:
        """Local jobs have no platform events: the failing node's log tail says it all."""
        return []

    def classify(self, status: JobStatus, details: list[str], tail: list[str]) -> Failure:
        """A node that vanished or was killed by a signal nobody asked for lost its machine
        (preemption); otherwise the node's exit code and its last lines decide."""
        return classify_local(status, tail)

    # -- what is still running -------------------------------------------------------------------

    def launched(self, installation: str) -> list[LaunchedJob]:
        """The run directories' jobs whose job.json names an owner of ``installation``, not ended.

        The local root may be shared by deployments on one machine (or a shared disk): another
        installation's jobs are left out, as are jobs launched for no task instance."""
        jobs = []
        for job_file in sorted(self.root.glob("*/job.json")):
            with contextlib.suppress(FileNotFoundError, LookupError, ValueError):
                job = json.loads(job_file.read_text())
                owner = _owner(job)
                if owner is None or owner.installation != installation:
                    continue
                handle = JobHandle(backend=self.name, job_id=job["job_id"], name=job["name"])
                state = self.status(handle).state
                if not state.is_terminal:
                    jobs.append(LaunchedJob(handle=handle, owner=owner, state=state, created=job["created"]))
        return jobs


def nvidia_smi_samples(output: str, at: datetime, node: str) -> list[GpuSample]:
    """``NVIDIA_SMI_QUERY``'s lines (``0, 87, 30233``: index, utilization in percent, memory used in
    MiB) as samples; a GPU whose utilization reads ``[N/A]`` (nvidia-smi's word for a field the
    device does not report, e.g. a MIG-enabled GPU) is left out, an unreported memory is None."""
    samples = []
    for line in output.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != len(NVIDIA_SMI_FIELDS) or not _number(fields[1]):
            continue
        memory = float(fields[2]) if _number(fields[2]) else None
        samples.append(
            GpuSample(at=at, node=node, gpu=fields[0], utilization=float(fields[1]), memory_used_mib=memory)
        )
    return samples


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _owner(job: dict[str, Any]) -> JobOwner | None:
    """The owner a job.json's spec names, or None (a job launched for no task instance, or before
    owners named their installation)."""
    owner = (job.get("spec") or {}).get("owner")
    try:
        return JobOwner.model_validate(owner) if owner else None
    except ValueError:
        return None


#: The reason code of a job whose launcher died before it started every node.
LAUNCHER_DIED = "LauncherDied"
#: Signals that end a node's command from outside: the machine went away (or an operator killed it).
_LOST_SIGNALS = frozenset({"SIGKILL", "SIGTERM", "SIGHUP", "SIGINT"})


def _exit_code_name(node: _NodeState) -> str:
    if node.vanished:
        return "Vanished"
    code = node.exit_code or 0
    return signal.Signals(-code).name if code < 0 else f"ExitCode{code}"


def classify_local(status: JobStatus, tail: list[str]) -> Failure:
    """The class of a failed local job: a node that vanished or whose command a signal ended was
    lost (preemption); a launcher that died before starting every node is infrastructure; the
    shell's 126/127 are config; otherwise the failing node's output, read from the rank torchrun
    saw fail first (:func:`read_node_output`), else its command's own exit code.

    A SIGKILL (of the node's command, or of the rank torchrun saw fail first) while the node's memory
    cgroup counted an OOM kill (``OOM_KILLS_ROSE`` in the reason, from its exit record) was the
    kernel's OOM killer: the job's own memory use, user code. Without that evidence it stays the
    machine's, and the evidence says the SIGKILL is ambiguous."""
    code = status.reason_code
    oom_killed = OOM_KILLS_ROSE in status.reason
    if code == "SIGKILL" and oom_killed:
        return Failure(failure_class=FailureClass.USER_CODE, evidence=[f"{status.reason} ({code})"])
    if code == "Vanished" or code in _LOST_SIGNALS:
        ambiguous = [SIGKILL_AMBIGUOUS] if code == "SIGKILL" else []
        return Failure(
            failure_class=FailureClass.PREEMPTION, evidence=[f"{status.reason} ({code})", *ambiguous]
        )
    if code == LAUNCHER_DIED:
        return Failure(failure_class=FailureClass.INFRASTRUCTURE, evidence=[status.reason])
    if status.exit_code in COMMAND_NOT_RUN:
        return Failure(
            failure_class=FailureClass.CONFIG,
            evidence=[f"{status.reason}: {COMMAND_NOT_RUN[status.exit_code]}"],
        )
    if status.exit_code == DATA_ERROR_EXIT:
        return Failure(failure_class=FailureClass.DATA, evidence=[status.reason, *tail[-1:]])
    verdict = read_node_output(tail, status.failed_node)
    origin = verdict.origin
    if oom_killed and origin is not None and origin.exit_code == -signal.SIGKILL:
        return Failure(
            failure_class=FailureClass.USER_CODE,
            evidence=[status.reason, origin.describe(status.failed_node)],
        )
    if verdict.failure_class is not None:
        return Failure(failure_class=verdict.failure_class, evidence=[status.reason, *verdict.evidence])
    return Failure(failure_class=FailureClass.USER_CODE, evidence=[status.reason])
