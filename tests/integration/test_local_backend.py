"""The local backend with real processes: the DLC env contract, failure, stop, and cross-process state."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backends.base import FoundJob, JobHandle, JobState, JobStatus
from aliyun_training.backends.local import LocalBackend
from aliyun_training.backends.local_node import job_pids, proc_start_time
from aliyun_training.spec import TrainingJobSpec

if TYPE_CHECKING:
    from collections.abc import Iterator

PROJECT_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """A backend whose jobs are all stopped after the test, also when the test failed midway."""
    backend = LocalBackend(root=str(tmp_path / "runs"), stop_grace_seconds=2)
    yield backend
    for job_dir in backend.root.glob("*/job.json"):
        found = backend.find(job_dir.parent.name)
        if found is not None:
            backend.stop(found.handle)


def wait_terminal(backend: LocalBackend, handle: JobHandle, timeout: float = 60) -> JobStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = backend.status(handle)
        if status.state.is_terminal:
            return status
        time.sleep(0.1)
    raise AssertionError(f"job {handle.job_id} still {backend.status(handle).raw} after {timeout} s")


def wait_running(backend: LocalBackend, handle: JobHandle, processes: int) -> None:
    deadline = time.monotonic() + 30
    while len(job_pids(f"{handle.job_id}:")) < processes:
        assert time.monotonic() < deadline, "job processes did not start"
        time.sleep(0.05)


def test_every_node_gets_the_rendezvous_variables_dlc_injects(backend: LocalBackend) -> None:
    spec = TrainingJobSpec(nodes=3, command="echo $MASTER_ADDR $MASTER_PORT $WORLD_SIZE $RANK")
    handle = backend.submit(spec, "env-contract")

    status = wait_terminal(backend, handle)

    assert status.state is JobState.SUCCEEDED
    lines = sorted(backend.logs(handle).lines)
    port = json.loads((backend.root / "env-contract" / "job.json").read_text())["master_port"]
    assert lines == [f"[node-{rank}] 127.0.0.1 {port} 3 {rank}" for rank in range(3)]
    assert status.started is not None and status.finished is not None and status.finished >= status.started


@pytest.mark.slow
def test_submitting_an_active_name_again_returns_the_running_job(
    backend: LocalBackend, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    spec = TrainingJobSpec(nodes=2, command=f"echo $RANK >> {starts}; sleep 30")
    first = backend.submit(spec, "once")
    wait_running(backend, first, processes=4)
    deadline = time.monotonic() + 10
    while not (starts.exists() and len(starts.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)  # four processes may be two supervisors and two shells not yet past echo

    second = backend.submit(spec, "once")

    assert second == first
    assert starts.read_text().split() in (["0", "1"], ["1", "0"])
    backend.stop(first)


@pytest.mark.slow
def test_a_failing_node_fails_the_job_names_the_rank_and_stops_the_others(backend: LocalBackend) -> None:
    spec = TrainingJobSpec(
        nodes=2,
        command='echo "rank $RANK up"; if [ "$RANK" = 1 ]; then echo "bad shard"; exit 3; fi; sleep 60',
    )
    handle = backend.submit(spec, "rank-fails")

    status = wait_terminal(backend, handle)

    assert status.state is JobState.FAILED
    assert status.failed_node == 1 and status.exit_code == 3
    assert status.reason == "node 1 (RANK=1) exited with code 3"
    assert backend.tail(handle, 1) == ["rank 1 up", "bad shard"]
    deadline = time.monotonic() + 10
    while job_pids(f"{handle.job_id}:") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_pids(f"{handle.job_id}:") == set(), "rank 0 kept running after rank 1 failed"


@pytest.mark.slow
def test_stop_kills_every_process_including_ones_in_their_own_session(backend: LocalBackend) -> None:
    # setsid mimics torchrun, whose workers run in new sessions out of reach of a process-group kill.
    spec = TrainingJobSpec(nodes=2, command="setsid sleep 300 & trap '' TERM; sleep 300")
    handle = backend.submit(spec, "stubborn")
    wait_running(backend, handle, processes=6)

    backend.stop(handle)

    assert job_pids(f"{handle.job_id}:") == set()
    assert backend.status(handle).state is JobState.STOPPED


@pytest.mark.slow
def test_status_logs_and_stop_work_after_the_launching_process_died(
    backend: LocalBackend, tmp_path: Path
) -> None:
    launcher = f"""
import os, signal, sys
sys.path.insert(0, {str(PROJECT_DIR / "plugins")!r})
from aliyun_training.backends.local import LocalBackend
from aliyun_training.spec import TrainingJobSpec
spec = TrainingJobSpec(nodes=2, command="echo started $RANK; sleep 300")
LocalBackend(root={str(backend.root)!r}, stop_grace_seconds=2).submit(spec, "orphan")
os.kill(os.getpid(), signal.SIGKILL)
"""
    died = subprocess.run([sys.executable, "-c", launcher], check=False)
    assert died.returncode == -signal.SIGKILL

    found = backend.find("orphan")
    assert found is not None
    handle = found.handle
    wait_running(backend, handle, processes=4)
    assert backend.status(handle).state is JobState.RUNNING
    deadline = time.monotonic() + 10
    while len(backend.logs(handle).lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(backend.logs(handle).lines) == ["[node-0] started 0", "[node-1] started 1"]

    backend.stop(handle)
    assert backend.status(handle).state is JobState.STOPPED
    assert job_pids(f"{handle.job_id}:") == set()


def test_logs_resume_from_the_cursor_without_duplicates_and_hold_back_partial_lines(
    backend: LocalBackend, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    spec = TrainingJobSpec(
        nodes=1,
        command=f"echo one; printf 'tw'; while [ ! -e {gate} ]; do sleep 0.05; done; echo o; echo three",
    )
    handle = backend.submit(spec, "cursor")
    deadline = time.monotonic() + 10
    first = backend.logs(handle)
    while not first.lines and time.monotonic() < deadline:
        time.sleep(0.05)
        first = backend.logs(handle)

    assert first.lines == ["[node-0] one"]
    gate.touch()
    wait_terminal(backend, handle)
    rest = backend.logs(handle, first.cursor)

    assert rest.lines == ["[node-0] two", "[node-0] three"]
    assert backend.logs(handle, rest.cursor).lines == []


@pytest.mark.slow
def test_logs_merge_the_nodes_in_the_order_their_lines_came_also_across_a_read_bound(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """Node 0 writes more than one read takes, then node 1 a line, then node 0 again: node 1's line
    must wait until node 0's earlier lines are logged, though the first read already saw it."""
    said, answered = tmp_path / "said", tmp_path / "answered"
    command = (
        f'if [ $RANK = 0 ]; then for i in $(seq 1 6000); do echo "filler $i {"x" * 40}"; done; touch {said}; '
        f"while [ ! -e {answered} ]; do sleep 0.02; done; sleep 0.1; echo after; "
        f"else while [ ! -e {said} ]; do sleep 0.02; done; sleep 0.1; echo late; touch {answered}; fi"
    )
    handle = backend.submit(TrainingJobSpec(nodes=2, command=command), "bounded")
    wait_terminal(backend, handle)

    chunks = [backend.logs(handle)]
    while chunks[-1].more:
        chunks.append(backend.logs(handle, chunks[-1].cursor))
    lines = [line for chunk in chunks for line in chunk.lines]

    assert len(chunks) > 1, "node 0 wrote more than one read takes"
    assert len(lines) == 6002 and len(set(lines)) == 6002, "every line once"
    assert lines[-2:] == ["[node-1] late", "[node-0] after"]
    assert lines[:6000] == [f"[node-0] filler {i} {'x' * 40}" for i in range(1, 6001)]
    assert backend.logs(handle, chunks[-1].cursor).lines == []


@pytest.mark.slow
def test_a_node_killed_without_recording_an_exit_fails_the_job(backend: LocalBackend) -> None:
    handle = backend.submit(TrainingJobSpec(nodes=2, command="sleep 300"), "oom")
    wait_running(backend, handle, processes=4)
    supervisor = json.loads((backend.root / "oom" / "node-0" / "pid.json").read_text())["pid"]

    os.kill(supervisor, signal.SIGKILL)
    status = wait_terminal(backend, handle)

    assert status.state is JobState.FAILED
    assert status.reason == "node 0 (RANK=0) vanished without an exit code"
    deadline = time.monotonic() + 10
    while job_pids(f"{handle.job_id}:") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_pids(f"{handle.job_id}:") == set(), "the orphaned command or the other node kept running"


@pytest.mark.slow
def test_a_node_that_ends_while_its_status_is_read_is_not_taken_for_vanished(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = backend.submit(TrainingJobSpec(nodes=1, command="sleep 0.5"), "ends-mid-read")
    supervisor_alive = LocalBackend._supervisor_alive

    def ends_meanwhile(node_dir: Path, pid: dict[str, Any]) -> bool:
        """The node records its exit and its supervisor ends just after status looked for exit.json."""
        deadline = time.monotonic() + 30
        while proc_start_time(pid["pid"]) is not None:
            assert time.monotonic() < deadline, "the node did not end"
            time.sleep(0.01)
        return supervisor_alive(node_dir, pid)

    monkeypatch.setattr(LocalBackend, "_supervisor_alive", staticmethod(ends_meanwhile))

    status = backend.status(handle)

    assert json.loads((backend.root / "ends-mid-read" / "node-0" / "exit.json").read_text())["exit_code"] == 0
    assert status.state is JobState.SUCCEEDED, status.reason


def test_a_new_attempt_archives_the_finished_one(backend: LocalBackend) -> None:
    failing = backend.submit(TrainingJobSpec(nodes=1, command="exit 1"), "again")
    assert wait_terminal(backend, failing).state is JobState.FAILED

    retry = backend.submit(TrainingJobSpec(nodes=1, command="true"), "again")

    assert retry.job_id != failing.job_id
    assert backend.find("again") == FoundJob(handle=retry, owner=None)
    assert wait_terminal(backend, retry).state is JobState.SUCCEEDED
    assert (backend.root / ".archive" / failing.job_id / "job.json").exists()
    with pytest.raises(LookupError, match="was replaced by"):
        backend.status(failing)


def test_a_finished_node_last_line_without_a_newline_is_not_lost(backend: LocalBackend) -> None:
    handle = backend.submit(
        TrainingJobSpec(nodes=1, command="echo first; printf 'final words'"), "no-newline"
    )

    wait_terminal(backend, handle)

    assert backend.logs(handle).lines == ["[node-0] first", "[node-0] final words"]


def test_a_job_sees_the_allow_listed_environment_and_none_of_the_workers_secrets(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_secrets = {
        "AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT": '{"extra": {"access_key_secret": "conn-secret-9f2c"}}',
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:db-password-9f2c@db/airflow",
        "AIRFLOW__CORE__FERNET_KEY": "fernet-key-9f2c",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "cloud-secret-9f2c",
        "HF_TOKEN": "hub-token-9f2c",
    }
    for name, value in {**worker_secrets, "LANG": "C.UTF-8", "NCCL_SOCKET_IFNAME": "eth0"}.items():
        monkeypatch.setenv(name, value)
    spec = TrainingJobSpec(nodes=1, command="env", env={"DATA_DIR": "/data/v1"})

    handle = backend.submit(spec, "env-allow-list")

    assert wait_terminal(backend, handle).state is JobState.SUCCEEDED
    seen = dict(line.removeprefix("[node-0] ").split("=", 1) for line in backend.logs(handle).lines)
    assert not set(worker_secrets) & set(seen), "a worker secret reached the training process"
    assert "9f2c" not in (backend.root / "env-allow-list" / "node-0" / "log").read_text()
    assert seen["LANG"] == "C.UTF-8" and seen["NCCL_SOCKET_IFNAME"] == "eth0"
    assert seen["DATA_DIR"] == "/data/v1" and seen["RANK"] == "0" and seen["WORLD_SIZE"] == "1"
    assert seen["PATH"].startswith(str(Path(sys.executable).parent))
    assert seen["HOME"] == os.environ["HOME"]


@pytest.mark.slow
def test_the_run_directory_is_private_to_the_user_running_the_worker(backend: LocalBackend) -> None:
    handle = backend.submit(TrainingJobSpec(nodes=2, command="echo hello; sleep 0.3"), "private")

    assert wait_terminal(backend, handle).state is JobState.SUCCEEDED
    run_dir = backend.root / "private"
    modes = {p.relative_to(run_dir).as_posix(): p.stat().st_mode & 0o777 for p in run_dir.rglob("*")}
    modes["."] = run_dir.stat().st_mode & 0o777
    for rank in range(2):
        for name in ("log", "supervisor.log", "exit.json", "pid.json", "heartbeat"):
            assert f"node-{rank}/{name}" in modes, f"node-{rank}/{name} was not written"
    assert {path: mode for path, mode in modes.items() if mode not in (0o600, 0o700)} == {}
    assert modes["."] == modes["node-0"] == 0o700 and modes["job.json"] == 0o600


def test_logs_and_tail_on_a_fresh_backend_need_no_status_call_first(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """A retried worker or a new triggerer builds its backend from ``config``: no call came before."""
    gate = tmp_path / "gate"
    command = f'for i in 1 2 3; do echo "step $i of $RANK"; done; while [ ! -e {gate} ]; do sleep 0.05; done'
    handle = backend.submit(TrainingJobSpec(nodes=2, command=command), "fresh")
    expected = sorted(f"[node-{rank}] step {i} of {rank}" for rank in range(2) for i in range(1, 4))
    deadline = time.monotonic() + 20
    while len(LocalBackend(**backend.config).logs(handle).lines) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)

    assert sorted(LocalBackend(**backend.config).logs(handle).lines) == expected
    assert LocalBackend(**backend.config).tail(handle, 1, 2) == ["step 2 of 1", "step 3 of 1"]
    assert asyncio.run(LocalBackend(**backend.config).atail(handle, 0, 1)) == ["step 3 of 0"]
    assert len(asyncio.run(LocalBackend(**backend.config).alogs(handle)).lines) == 6
    gate.touch()
    assert wait_terminal(backend, handle).state is JobState.SUCCEEDED
