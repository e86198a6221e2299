"""The local node supervisor's OOM evidence: its memory cgroup's OOM-kill count, read where the kernel
keeps it, and what a rise of it while a node ran makes of a SIGKILLed rank.

This machine cannot cause a kernel OOM kill, so the rise is shown with a directory laid out as the
kernel lays out ``/proc/self`` and a cgroup, holding its files in the kernel's formats: cgroup v2's
``memory.events`` (Documentation/admin-guide/cgroup-v2.rst, "memory.events": the keys low, high,
max, oom, oom_kill, oom_group_kill, written by mm/memcontrol.c ``__memory_events_show``) and v1's
``memory.oom_control`` (oom_kill_disable, under_oom, oom_kill: mm/memcontrol-v1.c
``mem_cgroup_oom_control_read``); ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` as proc(5)
describes them. The counter this machine really has is read too, where it has one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aliyun_training.backends.base import JobState, JobStatus
from aliyun_training.backends.local import LocalBackend, classify_local
from aliyun_training.backends.local_node import oom_kill_count, oom_kills_rose
from aliyun_training.failures import FailureClass
from aliyun_training.failures.torchrun import SIGKILL_AMBIGUOUS
from aliyun_training.spec import TrainingJobSpec
from tests.integration.test_local_backend import wait_terminal

#: Real torchrun output: a rank SIGKILLed from outside (tests/data/torchrun/README.md).
RANK_SIGKILLED = (
    (Path(__file__).resolve().parents[1] / "data" / "torchrun" / "rank_sigkilled.log")
    .read_text()
    .splitlines()
)


def _memory_events(oom_kill: int) -> str:
    return f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kill}\noom_group_kill 0\n"


def _oom_control(oom_kill: int) -> str:
    return f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n"


def _proc_self(tmp_path: Path, cgroup: str, mount: str) -> Path:
    """A ``/proc/self`` holding ``cgroup`` and ``mountinfo`` lines, as a process in a container sees them."""
    proc = tmp_path / "proc-self"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(
        "23 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n" + mount
    )
    return proc


def _v2(tmp_path: Path, oom_kill: int) -> tuple[Path, Path]:
    """A cgroup v2 mount whose root is the container's own cgroup (a cgroup namespace): the node's
    cgroup ``/kubepods/pod1/node`` is ``node`` under the mount."""
    mount = tmp_path / "sys-fs-cgroup"
    (mount / "node").mkdir(parents=True)
    events = mount / "node" / "memory.events"
    events.write_text(_memory_events(oom_kill))
    proc = _proc_self(
        tmp_path,
        "0::/kubepods/pod1/node\n",
        f"31 23 0:28 /kubepods/pod1 {mount} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n",
    )
    return proc, events


def test_the_oom_kill_count_is_read_from_cgroup_v2_memory_events_under_the_mounts_root(
    tmp_path: Path,
) -> None:
    proc, _ = _v2(tmp_path, 4)

    assert oom_kill_count(proc) == 4


def test_the_oom_kill_count_is_read_from_cgroup_v1_memory_oom_control(tmp_path: Path) -> None:
    """Hybrid hierarchy (as on this machine): the v2 mount has no memory controller, v1's memory does."""
    mount = tmp_path / "memory"
    (mount / "process_api" / "job").mkdir(parents=True)
    (mount / "process_api" / "job" / "memory.oom_control").write_text(_oom_control(2))
    (tmp_path / "unified").mkdir()
    proc = _proc_self(
        tmp_path,
        "4:memory:/process_api/job\n1:cpu:/\n0::/\n",
        f"35 31 0:32 / {mount} rw,relatime - cgroup cgroup rw,memory\n"
        f"41 31 0:38 / {tmp_path / 'unified'} rw,relatime - cgroup2 cgroup2 rw\n",
    )

    assert oom_kill_count(proc) == 2


def test_no_count_where_no_memory_cgroup_is_mounted(tmp_path: Path) -> None:
    proc = _proc_self(tmp_path, "0::/\n", "")

    assert oom_kill_count(proc) is None


def test_this_machines_own_memory_cgroup_counter_is_read() -> None:
    """The machine's real counter (v2 ``memory.events`` or v1 ``memory.oom_control`` of this
    process's cgroup), found through its real /proc/self."""
    if not Path("/sys/fs/cgroup/memory.events").exists() and not Path("/sys/fs/cgroup/memory").is_dir():
        pytest.skip("this machine mounts no memory cgroup")

    count = oom_kill_count()

    assert isinstance(count, int) and count >= 0


def _status(record: dict) -> JobStatus:
    """The failed job's status as LocalBackend.status words it from node 0's exit record."""
    rose = oom_kills_rose(record)
    return JobStatus(
        state=JobState.FAILED,
        raw="Failed",
        reason="node 0 (RANK=0) exited with code 1" + (f"; {rose}" if rose else ""),
        reason_code="ExitCode1",
        failed_node=0,
        exit_code=1,
    )


def test_a_sigkilled_rank_while_the_oom_kill_count_rose_is_the_scripts_memory(tmp_path: Path) -> None:
    """The kernel's OOM killer counted a kill in the node's cgroup while it ran (the file rewritten
    as the kernel increments it) and torchrun's root cause is a SIGKILL: user code, not a lost machine."""
    proc, events = _v2(tmp_path, 0)
    before = oom_kill_count(proc)
    events.write_text(_memory_events(1))
    record = {"exit_code": 1, "oom_kill": [before, oom_kill_count(proc)]}

    failure = classify_local(_status(record), RANK_SIGKILLED)

    assert failure.failure_class is FailureClass.USER_CODE, failure.evidence
    assert "the memory cgroup's oom_kill count rose from 0 to 1" in failure.evidence[0]
    assert "rank 1 (local_rank 1) on node 0 failed first: it was killed by SIGKILL" in failure.evidence[1]


@pytest.mark.parametrize(
    "record", [{"exit_code": 1, "oom_kill": [3, 3]}, {"exit_code": 1}], ids=["no rise", "no counter"]
)
def test_a_sigkilled_rank_without_oom_evidence_stays_preemption_and_says_the_sigkill_is_ambiguous(
    record: dict,
) -> None:
    failure = classify_local(_status(record), RANK_SIGKILLED)

    assert failure.failure_class is FailureClass.PREEMPTION
    assert SIGKILL_AMBIGUOUS in failure.evidence


def test_a_node_command_sigkilled_while_the_oom_kill_count_rose_is_user_code() -> None:
    """No torchrun: the node's own command was SIGKILLed (reason code SIGKILL) while its cgroup
    counted an OOM kill."""
    rose = oom_kills_rose({"exit_code": -9, "oom_kill": [0, 2]})
    status = JobStatus(
        state=JobState.FAILED,
        raw="Failed",
        reason=f"node 1 (RANK=1) was killed by SIGKILL; {rose}",
        reason_code="SIGKILL",
        failed_node=1,
        exit_code=-9,
    )

    assert classify_local(status, []).failure_class is FailureClass.USER_CODE
    assert (
        classify_local(
            status.model_copy(update={"reason": "node 1 (RANK=1) was killed by SIGKILL"}), []
        ).evidence[-1]
        == SIGKILL_AMBIGUOUS
    )


@pytest.mark.slow
def test_the_supervisor_records_the_count_when_its_node_started_and_ended(tmp_path: Path) -> None:
    """A real node's exit record holds its cgroup's count at both ends (no OOM kill here: equal)."""
    if oom_kill_count() is None:
        pytest.skip("this machine mounts no memory cgroup")
    backend = LocalBackend(root=str(tmp_path / "runs"))
    handle = backend.submit(TrainingJobSpec(nodes=1, command="exit 3"), "oom-count")

    status = wait_terminal(backend, handle)

    record = json.loads((backend.root / handle.name / "node-0" / "exit.json").read_text())
    before, after = record["oom_kill"]
    assert isinstance(before, int) and before <= after
    assert "oom_kill" not in status.reason
