"""Failures as the platforms recorded them, read back through the real clients and classified.

What a CPU machine cannot cause (a pod the kubelet OOM-killed and restarted in place, an image the
registry refuses, a quota with no room, a GPU that fell off the bus, AIMaster's restart records) is
kept as the platforms wrote it, each case naming its source: tests/data/kubernetes/
recorded_failures.json (pod statuses, the PyTorchJob's conditions and the events of both) and
tests/data/dlc/recorded_failures.json (GetJob bodies, job and pod events, sanity checks, pod logs).

Each case is served by an emulator over HTTP, the Kubernetes API fake writing the recorded objects
through the API as the kubelet and the training-operator would and the DLC emulator answering with
the recorded bodies, and read back by the backend as the task reads any job: its status, its
failure details, the failed node's output (``EVIDENCE_LINES``), then ``classify``. A job the
recording leaves waiting is read as the task reads one it gives up on: a pod blocked for good
(an image that cannot be pulled) through ``JobMonitor.give_up``, any other at its timeout. Each
case asserts the class and the recovery action it leads to.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backends.base import JobHandle, JobState
from aliyun_training.backends.dlc.backend import DlcBackend
from aliyun_training.failures import BLOCKING_REASONS, DEFAULT_RECOVERY, FailureClass
from aliyun_training.failures.torchrun import EVIDENCE_LINES
from aliyun_training.monitor import BLOCKED_POLLS, JobMonitor
from fakes.kube import replay_recorded
from fakes.kubernetes_fake import RECORDED, KubernetesFake, TrainingScript
from tests.integration import test_ack_recovery, test_dlc_backend

if TYPE_CHECKING:
    from fakes.base import ManualClock
    from fakes.dlc import DlcEmulator

dlc = test_dlc_backend.dlc
studio = test_dlc_backend.studio
connected = test_dlc_backend.connected
clock = test_ack_recovery.clock
fake = test_ack_recovery.fake

DATA = Path(__file__).resolve().parents[1] / "data"
DLC_CASES = json.loads((DATA / "dlc" / "recorded_failures.json").read_text())["cases"]


def _expected(case: dict[str, Any]) -> tuple[FailureClass, str]:
    expected = FailureClass(case["expected"])
    return expected, DEFAULT_RECOVERY[expected].action.value


def _classified(backend: Any, handle: JobHandle) -> tuple[Any, Any]:
    """What the task concludes of the job: (status, failure), the way ``JobMonitor`` reads it."""
    status = backend.status(handle)
    monitor = JobMonitor(backend, handle, logging.getLogger(f"recorded.{handle.job_id}"))
    if not status.state.is_terminal and status.reason_code in BLOCKING_REASONS:
        for _ in range(BLOCKED_POLLS):
            outcome = monitor.give_up(backend.status(handle))
        assert outcome is not None and outcome.failure is not None, "blocked for good: given up"
        return status, outcome.failure
    details = backend.failure_details(handle)
    tail = backend.tail(handle, status.failed_node or 0, EVIDENCE_LINES)
    return status, backend.classify(status, details, tail)


@pytest.mark.slow
@pytest.mark.parametrize("case", DLC_CASES, ids=[case["name"] for case in DLC_CASES])
def test_dlc_reads_each_recorded_failure_as_its_class(connected: DlcEmulator, case: dict[str, Any]) -> None:
    job_id = connected.replay(case)
    backend = DlcBackend(workspace_id="ws-1")
    handle = JobHandle(backend="dlc", job_id=job_id, name=case["job"].get("DisplayName", job_id))

    status, failure = _classified(backend, handle)

    assert (failure.failure_class, DEFAULT_RECOVERY[failure.failure_class].action.value) == _expected(case), (
        status,
        failure.evidence,
    )
    if status.state is JobState.FAILED and case["job"].get("Pods"):
        assert status.failed_node is not None, "the node that failed first is named"


KUBERNETES_CASES = json.loads((DATA / "kubernetes" / "recorded_failures.json").read_text())["cases"]


@pytest.mark.slow
@pytest.mark.parametrize("case", KUBERNETES_CASES, ids=[case["name"] for case in KUBERNETES_CASES])
def test_ack_reads_each_recorded_failure_as_its_class(
    fake: KubernetesFake, clock: ManualClock, case: dict[str, Any]
) -> None:
    fake.default_script = TrainingScript(outcome=RECORDED, log_lines=case.get("log") or [""])
    ack = test_ack_recovery.backend()
    handle = ack.submit(test_ack_recovery.spec(), test_ack_recovery.NAME)
    test_ack_recovery.advance(fake, clock, 30)
    replay_recorded(case, handle.name, conn_id=test_ack_recovery.CONN_ID)

    status, failure = _classified(ack, handle)

    assert (failure.failure_class, DEFAULT_RECOVERY[failure.failure_class].action.value) == _expected(case), (
        status,
        failure.evidence,
    )
