"""Failures of real multi-rank, multi-node torchrun jobs, classified by where they began.

Each live case runs torch's own ``torchrun`` (the launcher line declarations use, ``--tee=3``
included) on 2 nodes of 2 or 4 ranks through the local backend, makes one rank or node fail the
way the case says (a script error, exit 65, a signal from outside, a lost node, a hang), and reads
the outcome the way the training operator does (``JobMonitor.outcome``). What the classifiers see
is therefore what torchrun printed here, never a hand-written imitation. The failing node's output
is then given to the DLC and ACK classifiers as that pod's log, which is what it would be there.

Where both nodes ended badly (the other node's ranks lost their peer, or its torchrun was stopped
once the first node failed), both nodes' outputs are replayed as a failed job's two pods on the DLC
emulator and the Kubernetes API fake, the pods ending in either order or in the same second: the
node the failure began on, its class and its action must not depend on which pod the platform ended
first (``failures.origin``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import json
import logging
import os
import signal
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.base import JobHandle, JobState, JobStatus
from aliyun_training.backends.dlc.backend import DlcBackend
from aliyun_training.backends.dlc.failures import classify_dlc
from aliyun_training.backends.local import LocalBackend, classify_local
from aliyun_training.backends.local_node import job_pids
from aliyun_training.declaration import LAUNCHERS
from aliyun_training.failures import DEFAULT_RECOVERY, FailureClass, RecoveryAction
from aliyun_training.failures.torchrun import EVIDENCE_LINES
from aliyun_training.monitor import JobMonitor, JobOutcome
from aliyun_training.spec import TrainingJobSpec
from fakes import kubernetes_fake
from fakes.kube import replay_recorded
from fakes.kubernetes_fake import (
    KubernetesFake,
    TrainingScript,
)
from tests.integration import test_ack_recovery, test_dlc_backend
from tests.integration.test_local_backend import wait_terminal

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fakes.base import ManualClock
    from fakes.dlc import DlcEmulator

dlc = test_dlc_backend.dlc
studio = test_dlc_backend.studio
connected = test_dlc_backend.connected
clock = test_ack_recovery.clock
fake = test_ack_recovery.fake

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torchrun-corpus")]

RANKS_SCRIPT = Path(__file__).resolve().parents[1] / "data" / "torchrun" / "ranks.py"
TORCHRUN_DIR = Path(sys.executable).parent


@dataclass(frozen=True)
class LiveCase:
    """One way a distributed job fails, caused for real, and what it must be read as."""

    name: str
    expected: FailureClass
    #: The node and global rank that failed first (rank None: torchrun names none).
    node: int
    rank: int | None
    procs: int = 2
    env: dict[str, str] = field(default_factory=dict)
    #: Done from outside once every rank runs: ("rank", RANK, signal), ("agent", node, signal) or
    #: ("node", node, signal).
    kill: tuple[str, int, signal.Signals] | None = None
    #: Decided by the local node's supervisor alone (a vanished node): no pod log to read elsewhere.
    local_only: bool = False
    #: Whether torchrun prefixes the ranks' lines (``--tee=3``, as the declarations' launcher does);
    #: a command of its own may run torchrun without it.
    tee: bool = True
    #: How many of the 2 nodes torchrun's ``--nnodes`` declares the platform started: fewer, and
    #: the rendezvous times out (after ``RENDEZVOUS_TIMEOUT`` seconds) before any rank runs.
    started: int = 2


#: The static rendezvous's wait for every declared node, in seconds (``--rdzv-conf timeout=``,
#: torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py; 600 by default).
RENDEZVOUS_TIMEOUT = 5


def rank_fails(rank: int, mode: str, **env: str) -> dict[str, str]:
    """The environment that makes global ``rank`` fail by ``mode`` (see ranks.py)."""
    return {"FAIL_RANK": str(rank), "FAIL_MODE": mode, **env}


WAIT = {"FAIL_MODE": "wait"}
GLOO = {"COLLECTIVES": "1"}
USER, DATA, CONFIG = FailureClass.USER_CODE, FailureClass.DATA, FailureClass.CONFIG
LOST, MACHINES = FailureClass.PREEMPTION, FailureClass.INFRASTRUCTURE
TRANSIENT = FailureClass.TRANSIENT

CASES = [
    LiveCase("script error on rank 3 of 2x2", USER, 1, 3, env=rank_fails(3, "raise")),
    LiveCase("script error on rank 5 of 2x4", USER, 1, 5, procs=4, env=rank_fails(5, "raise")),
    LiveCase("script error on rank 1, ranks not teed", USER, 0, 1, env=rank_fails(1, "raise"), tee=False),
    LiveCase("exit 65 on rank 2, ranks not teed", DATA, 1, 2, env=rank_fails(2, "exit65"), tee=False),
    LiveCase("exit 65 on rank 1", DATA, 0, 1, env=rank_fails(1, "exit65")),
    LiveCase("MemoryError on rank 2", USER, 1, 2, env=rank_fails(2, "memory")),
    LiveCase("missing dataset file on rank 0", DATA, 0, 0, env=rank_fails(0, "missing")),
    LiveCase("missing module on rank 2", CONFIG, 1, 2, env=rank_fails(2, "import")),
    LiveCase("rank 2 SIGKILLed from outside", LOST, 1, 2, env=WAIT, kill=("rank", 2, signal.SIGKILL)),
    LiveCase("rank 1 SIGTERMed from outside", LOST, 0, 1, env=WAIT, kill=("rank", 1, signal.SIGTERM)),
    LiveCase("torchrun of node 1 SIGTERMed", LOST, 1, None, env=WAIT, kill=("agent", 1, signal.SIGTERM)),
    LiveCase("node 0 lost whole", LOST, 0, None, env=WAIT, kill=("node", 0, signal.SIGKILL), local_only=True),
    LiveCase("script error on rank 3 mid-collective", USER, 1, 3, env=rank_fails(3, "raise", **GLOO)),
    LiveCase(
        "rank 3 SIGKILLed mid-collective",
        LOST,
        1,
        3,
        env=rank_fails(3, "wait", **GLOO),
        kill=("rank", 3, signal.SIGKILL),
    ),
    LiveCase("script error on rank 0 of 2x4", USER, 0, 0, procs=4, env=rank_fails(0, "raise")),
    LiveCase("exit 65 on rank 6 of 2x4", DATA, 1, 6, procs=4, env=rank_fails(6, "exit65")),
    LiveCase("exit 3 on rank 5 of 2x4, no traceback", USER, 1, 5, procs=4, env=rank_fails(5, "exit3")),
    LiveCase(
        "rank 6 of 2x4 SIGKILLed from outside",
        LOST,
        1,
        6,
        procs=4,
        env=WAIT,
        kill=("rank", 6, signal.SIGKILL),
    ),
    LiveCase("torchrun of node 0 SIGTERMed", LOST, 0, None, env=WAIT, kill=("agent", 0, signal.SIGTERM)),
    LiveCase("rank 3 segfaults", USER, 1, 3, env=rank_fails(3, "segv")),
    LiveCase("rank 0 aborts", USER, 0, 0, env=rank_fails(0, "abort")),
    LiveCase(
        "missing module on rank 7 of 2x4 mid-collective",
        CONFIG,
        1,
        7,
        procs=4,
        env=rank_fails(7, "import", **GLOO),
    ),
    # The script's own prints before its traceback mention an NCCL error and an Xid: the traceback
    # that ended it decides (a bug, not the machines), teed or not, and mid-collective. (A job is
    # named by its case's first 40 characters: they differ.)
    LiveCase("rank 3 errs after printing NCCL and Xid", USER, 1, 3, env=rank_fails(3, "says-nccl")),
    LiveCase(
        "rank 0 errs after printing NCCL and Xid, not teed",
        USER,
        0,
        0,
        env=rank_fails(0, "says-nccl"),
        tee=False,
    ),
    LiveCase(
        "rank 2 errs after printing NCCL and Xid mid-collective",
        USER,
        1,
        2,
        env=rank_fails(2, "says-nccl", **GLOO),
    ),
    LiveCase(
        "rank 1 hangs in the collectives",
        MACHINES,
        -1,
        None,
        env=rank_fails(1, "hang", COLLECTIVE_TIMEOUT="3", **GLOO),
    ),
    # 2 nodes declared, only node 0 started: torchrun's rendezvous times out before the script ran;
    # its agent's traceback is torch's, not the script's.
    LiveCase("rendezvous times out, 1 of 2 nodes started", TRANSIENT, 0, None, started=1),
]


@dataclass
class LiveRun:
    outcome: JobOutcome
    status: JobStatus
    #: The failing node's last lines as the classifiers read them (``EVIDENCE_LINES``).
    evidence: list[str]
    log: list[str]
    #: Each node that ended badly (its supervisor recorded a non-zero exit), with its last lines
    #: (``EVIDENCE_LINES``): what that node's pod would log on DLC or ACK.
    outputs: dict[int, list[str]]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _run(backend: LocalBackend, case: LiveCase, pid_dir: Path) -> LiveRun:
    launcher = (
        LAUNCHERS["torchrun"].format(procs=case.procs).replace("torchrun", f"{TORCHRUN_DIR}/torchrun", 1)
    )
    if not case.tee:
        launcher = launcher.replace(" --tee=3", "")
    if case.started < 2:
        launcher = launcher.replace(
            "--nnodes=$WORLD_SIZE", f"--nnodes=2 --rdzv-conf timeout={RENDEZVOUS_TIMEOUT}"
        )
    spec = TrainingJobSpec(
        nodes=case.started,
        command=f"{launcher} {RANKS_SCRIPT}",
        env={"PID_DIR": str(pid_dir), **case.env},
    )
    handle = backend.submit(
        spec, "corpus-" + "".join(c if c.isalnum() else "-" for c in case.name.lower())[:40]
    )
    try:
        if case.kill is not None:
            _kill_when_running(backend, handle, case, pid_dir)
        status = wait_terminal(backend, handle, timeout=120)
        logger = logging.getLogger(f"corpus.{handle.job_id}")
        collect = _Collect()
        logger.addHandler(collect)
        logger.propagate = False
        outcome = JobMonitor(backend, handle, logger).outcome(status)
        evidence = backend.tail(handle, outcome.failed_node or 0, 500)
        # The job failed with its first node; the others are being stopped (SIGTERM, as a platform
        # stops the rest of a failed job's pods): their output is complete once each recorded its end
        # (a vanished node never does).
        deadline = time.monotonic() + (0 if case.local_only else 30)
        while time.monotonic() < deadline and not all(
            (backend.root / handle.name / f"node-{node}" / "exit.json").exists()
            for node in range(case.started)
        ):
            time.sleep(0.1)
        outputs = {
            node: backend.tail(handle, node, EVIDENCE_LINES)
            for node in range(case.started)
            if _recorded_exit(backend, handle, node) not in (None, 0)
        }
        return LiveRun(outcome=outcome, status=status, evidence=evidence, log=collect.lines, outputs=outputs)
    finally:
        backend.stop(handle)


def _recorded_exit(backend: LocalBackend, handle: JobHandle, node: int) -> int | None:
    """The exit code node's supervisor recorded (exit.json), None where it recorded none (vanished)."""
    try:
        return json.loads((backend.root / handle.name / f"node-{node}" / "exit.json").read_text())[
            "exit_code"
        ]
    except FileNotFoundError:
        return None


def _kill_when_running(backend: LocalBackend, handle: JobHandle, case: LiveCase, pid_dir: Path) -> None:
    assert case.kill is not None
    what, which, signum = case.kill
    ranks = 2 * case.procs
    # How long four or eight ranks may take to import torch and write their pid files: once over
    # 90 s on the 2-core machine while the whole suite and its two deployments ran beside them.
    deadline = time.monotonic() + 300
    while len(list(pid_dir.glob("rank-*.pid"))) < ranks:
        assert time.monotonic() < deadline, f"{case.name}: the ranks did not start"
        time.sleep(0.1)
    time.sleep(0.5)
    if what == "rank":
        os.kill(int((pid_dir / f"rank-{which}.pid").read_text()), signum)
    elif what == "agent":
        [agent] = [pid for pid in job_pids(f"{handle.job_id}:node-{which}\0") if _is_torchrun(pid)]
        os.kill(agent, signum)
    else:
        supervisor = int(
            (backend.root / handle.name / f"node-{which}" / "pid.json")
            .read_text()
            .split('"pid": ')[1]
            .split(",")[0]
        )
        os.kill(supervisor, signum)
        for pid in job_pids(f"{handle.job_id}:node-{which}\0"):
            with contextlib.suppress(ProcessLookupError):  # it may end with its supervisor first
                os.kill(pid, signum)


def _is_torchrun(pid: int) -> bool:
    """The torchrun agent itself (``python .../torchrun ...``), not the shell whose command names it."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.endswith(b"/torchrun") for arg in argv[:2])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[LiveRun]]]:
    """Every live case, run side by side (their ranks mostly wait), once for the module; a case
    that could not be run fails its own tests only (``run_of``)."""
    root = tmp_path_factory.mktemp("corpus")
    backend = LocalBackend(root=str(root / "runs"), stop_grace_seconds=2)
    pid_dirs = {case.name: root / "pids" / str(i) for i, case in enumerate(CASES)}
    for pid_dir in pid_dirs.values():
        pid_dir.mkdir(parents=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = {case.name: pool.submit(_run, backend, case, pid_dirs[case.name]) for case in CASES}
        concurrent.futures.wait(runs.values())
        yield {name: future for name, future in runs.items()}


def run_of(live: dict[str, Future[LiveRun]], name: str) -> LiveRun:
    """The live case's run, or the error that kept it from running."""
    return live[name].result()


def _action(failure_class: FailureClass) -> RecoveryAction:
    return DEFAULT_RECOVERY[failure_class].action


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_local_backend_reads_each_failure_from_where_it_began(
    live: dict[str, Future[LiveRun]], case: LiveCase
) -> None:
    run = run_of(live, case.name)
    failure = run.outcome.failure

    assert run.status.state is JobState.FAILED
    assert failure is not None
    assert (failure.failure_class, _action(failure.failure_class)) == (
        case.expected,
        _action(case.expected),
    ), (
        failure.describe(),
        run.evidence[-40:],
    )
    if case.node >= 0:
        assert run.outcome.failed_node == case.node, (failure.describe(), run.status.reason)
    if case.rank is not None:
        first = f"rank {case.rank} (local_rank {case.rank % case.procs}) on node {case.node} failed first"
        assert any(first in line for line in failure.evidence), failure.evidence
        # The task log names it too.
        assert any(first in line for line in run.log), run.log


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.local_only], ids=[c.name for c in CASES if not c.local_only]
)
def test_the_failing_nodes_output_as_a_pod_log_reads_alike_on_dlc_and_ack(
    live: dict[str, Future[LiveRun]], case: LiveCase
) -> None:
    """On DLC and ACK the failed pod's log is this node's output; the platform adds no reason of
    its own here (a pod that exited non-zero), so the output decides as it does locally."""
    run = run_of(live, case.name)
    node = run.outcome.failed_node
    dlc_status = JobStatus(state=JobState.FAILED, raw="Failed", failed_node=node, exit_code=1)
    ack_status = JobStatus(
        state=JobState.FAILED,
        raw="Failed",
        failed_node=node,
        exit_code=1,
        reason=f"pod worker-{node}: Error (exit code 1)",
    )

    dlc = classify_dlc(dlc_status, [], run.evidence)
    ack = AckBackend(namespace="training").classify(ack_status, [], run.evidence)

    assert dlc.failure_class is case.expected, dlc.describe()
    assert ack.failure_class is case.expected, ack.describe()


def test_the_shown_excerpt_holds_the_failed_ranks_error_however_long_the_summary(
    live: dict[str, Future[LiveRun]],
) -> None:
    """2x4 ranks: torchrun's summary of the three ranks it terminated comes after rank 5's error; the
    task's error still shows rank 5's own exception and the root cause."""
    run = run_of(live, "script error on rank 5 of 2x4")

    shown = run.outcome.tail

    assert len(shown) <= 50
    assert any("ValueError: batch of shape" in line and line.startswith("[default1]:") for line in shown), (
        shown
    )
    assert any("Root Cause (first observed failure)" in line for line in shown), shown
    terminated = [line for line in run.evidence if "Signal 15 (SIGTERM) received by PID" in line]
    assert len(terminated) == 3, "the three siblings torchrun terminated, in its summary"


RECORDED = json.loads((RANKS_SCRIPT.parent / "recorded_rank_errors.json").read_text())["cases"]


@pytest.mark.parametrize("recorded", RECORDED, ids=[case["name"] for case in RECORDED])
def test_gpu_errors_recorded_from_real_runs_are_read_from_the_failed_rank_on_every_backend(
    live: dict[str, Future[LiveRun]], recorded: dict
) -> None:
    """What a CPU machine cannot cause (CUDA and NCCL errors), recorded from real runs (the JSON
    names each source), put in place of rank 3's own lines in the live 2x2 run's output: torchrun's
    real summary around a real rank error. Every backend reads the rank's error, not the siblings'."""
    run = run_of(live, "script error on rank 3 of 2x2")
    output = _with_rank_lines(run.evidence, "[default1]:", recorded["lines"])
    expected = FailureClass(recorded["expected"])
    status = run.status.model_copy(update={"failed_node": 1})

    local = classify_local(status, output)
    dlc = classify_dlc(JobStatus(state=JobState.FAILED, raw="Failed", failed_node=1, exit_code=1), [], output)
    ack = AckBackend(namespace="training").classify(
        JobStatus(state=JobState.FAILED, raw="Failed", failed_node=1, exit_code=1), [], output
    )

    assert [local.failure_class, dlc.failure_class, ack.failure_class] == [expected] * 3, (
        local.describe(),
        dlc.describe(),
        ack.describe(),
    )
    assert any("rank 3 (local_rank 1) on node 1 failed first" in line for line in local.evidence)


def _with_rank_lines(output: list[str], prefix: str, lines: list[str]) -> list[str]:
    """``output`` with the error that rank printed (its lines after its start line) replaced by ``lines``."""
    own = [i for i, line in enumerate(output) if line.startswith(prefix) and "started" not in line]
    assert own, "the live run's failed rank printed its error"
    kept = [line for i, line in enumerate(output) if i not in set(own)]
    return [*kept[: own[0]], *(prefix + line for line in lines), *kept[own[0] :]]


def test_an_nccl_error_in_the_traceback_itself_still_reads_as_the_machines_after_the_scripts_prints(
    live: dict[str, Future[LiveRun]],
) -> None:
    """The traceback decides, not its absence of NCCL words: the live run's real traceback of rank 3
    (after its prints of "NCCL error checks" and "Xid"), its exception replaced by a recorded NCCL
    failure, is the machines' on every backend."""
    run = run_of(live, "rank 3 errs after printing NCCL and Xid")
    [nccl] = [case for case in RECORDED if case["name"] == "NCCL unhandled system error"]
    raised = [i for i, line in enumerate(run.evidence) if line.startswith("[default1]:ValueError: batch")]
    assert len(raised) == 1, "rank 3's traceback ends in its ValueError"
    output = [
        *run.evidence[: raised[0]],
        *("[default1]:" + line for line in nccl["lines"]),
        *run.evidence[raised[0] + 1 :],
    ]
    assert any(
        line.startswith("[default1]:Traceback (most recent call last):") for line in output[: raised[0]]
    )
    failed = JobStatus(state=JobState.FAILED, raw="Failed", failed_node=1, exit_code=1)

    local = classify_local(run.status.model_copy(update={"failed_node": 1}), output)
    dlc = classify_dlc(failed, [], output)
    ack = AckBackend(namespace="training").classify(failed, [], output)

    assert [local.failure_class, dlc.failure_class, ack.failure_class] == [MACHINES] * 3, (
        local.describe(),
        dlc.describe(),
        ack.describe(),
    )
    assert any("ncclSystemError" in line or "NCCL error" in line for line in local.evidence), local.evidence


# -- the node a failure began on, replayed on DLC and ACK whichever pod ends first ------------------

#: Cases whose job ended with both nodes failed: the other node's ranks lost their peer, or its
#: torchrun was stopped from outside ("Received 15 death signal") once the first node failed, as
#: the local backend stops it (SIGTERM to its process group) and as a platform does.
CASCADES = [case for case in CASES if not case.local_only and case.started == 2 and case.node >= 0]
#: A failed DLC job as GetJob returns it, two pods (master-0: node 0, worker-0: node 1) both Failed:
#: the recorded case's body (tests/data/dlc/recorded_failures.json names its sources), its pods'
#: GmtFinishTime set by each test.
DLC_FAILED = next(
    case
    for case in json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "dlc" / "recorded_failures.json").read_text()
    )["cases"]
    if case["name"] == "user script raises an exception, torchrun exits with code 1"
)
#: Which pod ends when, in each order: GmtFinishTime and finishedAt have one-second resolution.
ORDERS = {
    "the origin's pod ended first": (0, 1),
    "the other pod ended first": (1, 0),
    "both in the same second": (0, 0),
}


def _ends(origin: int, order: tuple[int, int]) -> dict[int, str]:
    """Each node's end, ``order`` giving (origin's, other's) seconds after 10:07:20."""
    return {origin: f"2026-11-30T10:07:2{order[0]}Z", 1 - origin: f"2026-11-30T10:07:2{order[1]}Z"}


def _dlc_outcome(dlc: DlcEmulator, outputs: dict[int, list[str]], ends: dict[int, str]) -> JobOutcome:
    """The failed job replayed on the DLC emulator, its pods logging ``outputs``, read as the task does."""
    case = copy.deepcopy(DLC_FAILED)
    del case["job"]["JobId"]
    pods = case["job"]["Pods"]
    for node, pod in enumerate(pods):
        pod["GmtFinishTime"] = ends[node]
    case["logs"] = {pod["PodId"]: outputs[node] for node, pod in enumerate(pods)}
    job_id = dlc.replay(case)
    backend = DlcBackend(workspace_id="ws-1")
    handle = JobHandle(backend="dlc", job_id=job_id, name=job_id)
    return JobMonitor(backend, handle, logging.getLogger(f"corpus.{job_id}")).outcome(backend.status(handle))


def _failed_pod(finished: str) -> dict[str, Any]:
    """A pod whose container exited 1: the kubelet's phase and conditions (as the recorded cases in
    tests/data/kubernetes/recorded_failures.json have them) and the terminated state's ``reason``
    "Error" that containerd's CRI gives a non-zero exit (internal/cri/server/container_status.go)."""
    return {
        "phase": "Failed",
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "PodFailed"},
            {"type": "ContainersReady", "status": "False", "reason": "PodFailed"},
            {"type": "PodScheduled", "status": "True"},
        ],
        "containerStatuses": [
            {
                "name": "pytorch",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "startedAt": "2026-11-30T10:03:00Z",
                        "finishedAt": finished,
                    }
                },
            }
        ],
    }


def _ack_outcome(
    fake: KubernetesFake,
    clock: ManualClock,
    name: str,
    outputs: dict[int, list[str]],
    ends: dict[int, str],
) -> JobOutcome:
    """The failed PyTorchJob replayed through the Kubernetes API fake (``replay_recorded``), each pod
    logging its node's output, read as the task does. The training-operator's Failed condition:
    pkg/controller.v1/pytorch/pytorchjob_controller.go ("PyTorchJob %s is failed because %d %s
    replica(s) failed.")."""

    fake.default_script = TrainingScript(
        outcome=kubernetes_fake.RECORDED, pod_logs={"master-0": outputs[0], "worker-0": outputs[1]}
    )
    ack = test_ack_recovery.backend()
    handle = ack.submit(test_ack_recovery.spec(owner=None), name)
    test_ack_recovery.advance(fake, clock, 30)
    first = ["Master", "Worker"][min(ends, key=lambda node: (ends[node], node))]
    replay_recorded(
        {
            "pods": [
                {"replica": "master", "index": 0, "status": _failed_pod(ends[0])},
                {"replica": "worker", "index": 0, "status": _failed_pod(ends[1])},
            ],
            "job_conditions": [
                {
                    "type": "Created",
                    "status": "True",
                    "reason": "PyTorchJobCreated",
                    "message": f"PyTorchJob {name} is created.",
                },
                {
                    "type": "Running",
                    "status": "False",
                    "reason": "PyTorchJobRunning",
                    "message": f"PyTorchJob {name} is running.",
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PyTorchJobFailed",
                    "message": f"PyTorchJob {name} is failed because 1 {first} replica(s) failed.",
                },
            ],
        },
        handle.name,
        conn_id=test_ack_recovery.CONN_ID,
    )
    return JobMonitor(ack, handle, logging.getLogger(f"corpus.{name}")).outcome(ack.status(handle))


def _verdict(outcome: JobOutcome) -> tuple[int | None, FailureClass | None, RecoveryAction | None]:
    failure = outcome.failure
    return (
        outcome.failed_node,
        failure.failure_class if failure else None,
        _action(failure.failure_class) if failure else None,
    )


@pytest.mark.parametrize("case", CASCADES, ids=[case.name for case in CASCADES])
def test_dlc_and_ack_find_the_same_origin_whichever_pod_the_platform_ended_first(
    live: dict[str, Future[LiveRun]],
    case: LiveCase,
    connected: DlcEmulator,
    fake: KubernetesFake,
    clock: ManualClock,
) -> None:
    """Both nodes' real outputs as their pods' logs, the pods ended in three orders (one-second
    clocks cannot tell a cascade's steps apart): the node, class and action are the local backend's
    in every order, on both platforms. By end time alone, the other node won whenever it ended first."""
    run = run_of(live, case.name)
    assert sorted(run.outputs) == [0, 1], f"both nodes failed ({sorted(run.outputs)} did)"
    local = _verdict(run.outcome)
    assert local == (case.node, case.expected, _action(case.expected))

    seen, expected = {}, {}
    for number, (order, seconds) in enumerate(ORDERS.items()):
        ends = _ends(case.node, seconds)
        seen[f"dlc, {order}"] = _verdict(_dlc_outcome(connected, run.outputs, ends))
        seen[f"ack, {order}"] = _verdict(
            _ack_outcome(fake, clock, f"corpus-order-{number}", run.outputs, ends)
        )
        # Both torchruns stopped from outside: neither output names a failure of its own, so the
        # first to end is the origin, the first node at the same second (failures.origin).
        first = min(ends, key=lambda node: (ends[node], node)) if _both_stopped(case) else case.node
        expected[f"dlc, {order}"] = expected[f"ack, {order}"] = (first, *local[1:])

    assert seen == expected, seen


def _both_stopped(case: LiveCase) -> bool:
    """A case whose first node's torchrun was stopped from outside: the job's teardown stops the
    other's the same way, so both outputs show only "Received 15 death signal"."""
    return case.kill is not None and case.kill[0] == "agent"
