"""``failures.torchrun.read_node_output`` on whole outputs recorded from real torchrun runs
(tests/data/torchrun/README.md names how each was made): a rendezvous that timed out before the
script ran is the job's nodes (transient), never the script's; a rank's SIGKILL says it is ambiguous.
The DLC and ACK classifiers read a pod's log through the same function, so they agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.base import JobState, JobStatus
from aliyun_training.backends.dlc.failures import classify_dlc
from aliyun_training.failures import DEFAULT_RECOVERY, FailureClass, RecoveryAction
from aliyun_training.failures.torchrun import SIGKILL_AMBIGUOUS, read_node_output

DATA = Path(__file__).resolve().parents[1] / "data" / "torchrun"
FAILED = JobStatus(state=JobState.FAILED, raw="Failed", failed_node=0, exit_code=1)


def _recorded(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


@pytest.mark.parametrize(
    ("log", "exception"),
    [
        ("rendezvous_timeout_store.log", "DistStoreError: Timed out after 6 seconds waiting for clients"),
        ("rendezvous_timeout_client.log", "DistNetworkError: The client socket has timed out"),
    ],
)
def test_a_rendezvous_timeout_before_the_script_ran_is_transient_on_every_backend(
    log: str, exception: str
) -> None:
    """The agent's own traceback (torch's rendezvous code, not the script) once counted as user code."""
    lines = _recorded(log)

    verdict = read_node_output(lines, 0)
    dlc = classify_dlc(FAILED, [], lines)
    ack = AckBackend(namespace="training").classify(
        FAILED.model_copy(update={"reason": "pod worker-0: Error (exit code 1)"}), [], lines
    )

    assert verdict.failure_class is FailureClass.TRANSIENT
    assert any(exception in line and "rendezvous timed out" in line for line in verdict.evidence)
    assert [dlc.failure_class, ack.failure_class] == [FailureClass.TRANSIENT] * 2, (
        dlc.evidence,
        ack.evidence,
    )
    assert DEFAULT_RECOVERY[FailureClass.TRANSIENT].action is RecoveryAction.RESUME


def test_a_sigkilled_rank_with_no_other_evidence_says_the_sigkill_is_ambiguous() -> None:
    verdict = read_node_output(_recorded("rank_sigkilled.log"), 0)

    assert verdict.failure_class is FailureClass.PREEMPTION
    assert verdict.evidence[-1] == SIGKILL_AMBIGUOUS
