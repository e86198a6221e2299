"""Transient failures in the shared words (``failures``): a lost MPI daemon, a pull the registry
limits or fails, and the class's back-off as the retry policy applies it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk.definitions.retry_policy import RetryAction

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.base import JobState, JobStatus
from aliyun_training.backends.dlc.failures import classify_dlc
from aliyun_training.backends.local import classify_local
from aliyun_training.failures import DEFAULT_RECOVERY, Failure, FailureClass, RecoveryAction, blocked_class
from aliyun_training.operators.recovery import FailureClassRetryPolicy, TrainingJobFailed

#: Open MPI's launcher when a node's daemon went away, as mpirun prints it (the help text of
#: open-mpi/ompi's errmgr, "lost-connection"), copied from a public report of a multi-node job
#: (slurm output quoted in a public repository; the node names are that run's).
LOST_ORTE_DAEMON = [
    "ORTE has lost communication with a remote daemon.",
    "",
    "  HNP daemon   : [[16919,0],0] on node anode031",
    "  Remote daemon: [[16919,0],3] on node anode127",
    "",
    "This is usually due to either a failure of the TCP network",
    "connection to the node, or possibly an internal failure of",
    "the daemon itself. We cannot recover from this failure, and",
    "therefore will terminate the job.",
]
#: Its PRRTE successor (Open MPI 5's prterun), from a public issue of an nccl-tests run over ssh.
LOST_PRTE_DAEMON = [
    "ssh: connect to host (worker_ip) port 22: Connection refused",
    "--------------------------------------------------------------------------",
    "PRTE has lost communication with a remote daemon.",
    "",
    "  HNP daemon   : [prterun-yj-videogen-multinode-job-master-0-34@0,0] on node "
    "yj-videogen-multinode-job-master-0",
    "  Remote daemon: [prterun-yj-videogen-multinode-job-master-0-34@0,1] on node (worker_ip)",
]


@pytest.mark.parametrize("output", [LOST_ORTE_DAEMON, LOST_PRTE_DAEMON], ids=["orte", "prte"])
def test_a_lost_mpi_daemon_is_transient_on_every_backend(output: list[str]) -> None:
    failed = JobStatus(state=JobState.FAILED, raw="Failed", failed_node=0, exit_code=1)

    classes = [
        classify_local(failed, output).failure_class,
        classify_dlc(failed, [], output).failure_class,
        AckBackend(namespace="training").classify(failed, [], output).failure_class,
    ]

    assert classes == [FailureClass.TRANSIENT] * 3
    assert DEFAULT_RECOVERY[FailureClass.TRANSIENT].action is RecoveryAction.RESUME


#: The kubelet's failed pull (pkg/kubelet/images/image_manager.go "Failed to pull image %q: %v")
#: with containerd's error for Docker Hub's documented rate limit, as public kubectl-describe
#: pastes show it; and the same pull refused for good (the distribution spec's MANIFEST_UNKNOWN).
RATE_LIMITED = (
    'Back-off pulling image "docker.io/library/python:3.11" (after: Failed to pull image '
    '"docker.io/library/python:3.11": rpc error: code = Unknown desc = failed to pull and unpack image '
    '"docker.io/library/python:3.11": failed to copy: httpReadSeeker: failed open: unexpected status code '
    "https://registry-1.docker.io/v2/library/python/manifests/3.11: 429 Too Many Requests - Server message: "
    "toomanyrequests: You have reached your pull rate limit.)"
)
UNAVAILABLE = (
    'Failed to pull image "registry.example.com/team/trainer:v9": rpc error: code = Unknown desc = failed to '
    'pull and unpack image "registry.example.com/team/trainer:v9": failed to resolve reference: unexpected '
    "status from HEAD request to https://registry.example.com/v2/team/trainer/manifests/v9: "
    "503 Service Unavailable"
)
REFUSED = 'Failed to pull image "registry.example.com/team/trainer:v9": manifest unknown'


@pytest.mark.parametrize(
    ("reason_code", "reason", "expected"),
    [
        ("ImagePullBackOff", RATE_LIMITED, FailureClass.TRANSIENT),
        ("ErrImagePull", UNAVAILABLE, FailureClass.TRANSIENT),
        ("ImagePullBackOff", REFUSED, FailureClass.CONFIG),
        ("ErrImagePull", "Failed to pull image: unauthorized: authentication required", FailureClass.CONFIG),
        # A name the kubelet cannot parse is refused before any registry is asked.
        ("InvalidImageName", RATE_LIMITED, FailureClass.CONFIG),
        ("ContainerCreating", RATE_LIMITED, None),
    ],
    ids=["429", "503", "manifest-unknown", "unauthorized", "invalid-name", "not-blocked"],
)
def test_a_pull_the_registry_limits_or_fails_is_transient_and_one_it_refuses_is_config(
    reason_code: str, reason: str, expected: FailureClass | None
) -> None:
    assert blocked_class(reason_code, reason) is expected


def test_each_transient_retry_waits_twice_as_long_as_the_one_before() -> None:
    policy = FailureClassRetryPolicy()
    failed = TrainingJobFailed("lost", Failure(failure_class=FailureClass.TRANSIENT, evidence=["429"]))

    decisions = [policy.evaluate(failed, try_number, max_tries=40) for try_number in (1, 2, 3, 30)]

    assert {decision.action for decision in decisions} == {RetryAction.RETRY}
    assert [decision.retry_delay for decision in decisions] == [
        timedelta(minutes=1),
        timedelta(minutes=2),
        timedelta(minutes=4),
        timedelta(days=1),
    ]
    assert "twice as long each try" in (decisions[0].reason or "")
    # A class without back-off keeps its one delay.
    capacity = TrainingJobFailed("full", Failure(failure_class=FailureClass.CAPACITY))
    assert policy.evaluate(capacity, 3, max_tries=10).retry_delay == timedelta(minutes=15)


def test_the_last_try_fails_so_the_tasks_failure_callbacks_run() -> None:
    """A retry decision on the last try fails the task without its on_failure_callback (Airflow
    3.3 calls on_retry_callback then): the job's stop and the failure notice would not run."""
    policy = FailureClassRetryPolicy()
    failed = TrainingJobFailed("lost", Failure(failure_class=FailureClass.TRANSIENT, evidence=["429"]))

    assert policy.evaluate(failed, 2, max_tries=2).action is RetryAction.RETRY
    last = policy.evaluate(failed, 3, max_tries=2)
    assert last.action is RetryAction.FAIL and "no try left" in (last.reason or "")
