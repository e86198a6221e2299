"""How each platform's raw statuses map onto JobState, including statuses nobody documented."""

from __future__ import annotations

import logging

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc

from aliyun_training.backends.ack.status import job_status
from aliyun_training.backends.base import JobHandle, JobState, JobStatus
from aliyun_training.backends.dlc.backend import DlcBackend
from aliyun_training.backends.dlc.failures import classify_dlc
from aliyun_training.backends.dlc.status import DLC_STATES
from aliyun_training.failures import FailureClass

FACT_SHEET_STATUSES = {
    "Creating": JobState.PENDING,
    "Queuing": JobState.PENDING,
    "Bidding": JobState.PENDING,
    "EnvPreparing": JobState.PENDING,
    "SanityChecking": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RUNNING,
    "Stopping": JobState.STOPPING,
    "SucceededReserving": JobState.SUCCEEDED,
    "FailedReserving": JobState.FAILED,
    "Succeeded": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
    "Stopped": JobState.STOPPED,
}
HANDLE = JobHandle(backend="dlc", job_id="dlc-1", name="job")


def dlc_status(status: str, **fields: object) -> JobStatus:
    return DlcBackend()._interpret(HANDLE, dlc.GetJobResponseBody(job_id="dlc-1", status=status, **fields))


def test_every_dlc_status_of_the_fact_sheet_has_a_state() -> None:
    assert DLC_STATES == FACT_SHEET_STATUSES
    for status, state in FACT_SHEET_STATUSES.items():
        assert dlc_status(status).state is state


def test_an_unknown_dlc_status_is_logged_and_treated_as_running(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aliyun_training.backends.dlc")

    status = dlc_status("Rebalancing")

    assert status.state is JobState.RUNNING and status.raw == "Rebalancing"
    assert "unknown to this backend: treating it as running" in caplog.text


def test_a_failed_dlc_job_carries_its_reason_code_and_message() -> None:
    status = dlc_status("Failed", reason_code="JobFailed", reason_message="pod exited 1")

    assert status.reason == "JobFailed: pod exited 1"
    assert status.reason_code == "JobFailed"


def test_a_stopping_dlc_job_has_not_ended() -> None:
    status = dlc_status("Stopping")

    assert status.state is JobState.STOPPING and not status.state.is_terminal
    assert status.finished is None


RAN = [{"status": "Queuing"}, {"status": "Running"}, {"status": "Failed"}]
NEVER_RAN = [{"status": "Queuing"}, {"status": "Failed"}]


def failed(reason_code: str = "", reason: str = "", history: list | None = None) -> JobStatus:
    return JobStatus(
        state=JobState.FAILED, raw="Failed", reason_code=reason_code, reason=reason, history=history or RAN
    )


@pytest.mark.parametrize(
    ("status", "details", "tail", "expected", "evidence"),
    [
        pytest.param(
            failed("JobFailed", "JobFailed: Pod worker-1 was preempted"),
            ["sanity check #1 GPUCheck: Failed GPU 3 has XID 79"],
            [],
            FailureClass.PREEMPTION,
            "ReasonCode=JobFailed: Pod worker-1 was preempted",
            id="DLC's verdict first",
        ),
        pytest.param(
            failed("NoPermission", "NoPermission: not allowed to use quota quota1"),
            [],
            [],
            FailureClass.CONFIG,
            "ReasonCode=NoPermission: not allowed to use quota quota1",
            id="no permission to use a quota is config, not capacity",
        ),
        pytest.param(
            failed(history=NEVER_RAN),
            ["event: Insufficient nvidia.com/gpu: 0/4 nodes are available"],
            [],
            FailureClass.CAPACITY,
            "event: Insufficient nvidia.com/gpu: 0/4 nodes are available",
            id="capacity from the events of a job that never ran",
        ),
        pytest.param(
            failed("JobFailed", "JobFailed: Pod master-0 exited with code 1"),
            ["event: Insufficient nvidia.com/gpu: 0/4 nodes are available", "event: Job is running"],
            ["Traceback (most recent call last):", "KeyError: 'lr'"],
            FailureClass.USER_CODE,
            "ReasonCode=JobFailed: Pod master-0 exited with code 1",
            id="a job that ran is past its queuing words",
        ),
        pytest.param(
            failed("JobFailed", "JobFailed: Pod master-0 exited with code 127"),
            [],
            ["/bin/sh: 1: torchrun: not found"],
            FailureClass.CONFIG,
            "ReasonCode=JobFailed: Pod master-0 exited with code 127",
            id="exit code 127: the command was not found",
        ),
        pytest.param(
            failed("JobFailed", "JobFailed: Pod master-0 exited with code 137"),
            [],
            ["epoch 7/10 loss=0.412"],
            FailureClass.INFRASTRUCTURE,
            "ReasonCode=JobFailed: Pod master-0 exited with code 137",
            id="a signal from outside is no verdict on the script",
        ),
        pytest.param(
            failed(),
            ["event: Job is created", "event: Job is running"],
            ["    exitcode  : 2 (pid: 4242)"],
            FailureClass.USER_CODE,
            "exitcode  : 2 (pid: 4242)",
            id="torchrun's summary of a worker that exited 2",
        ),
        pytest.param(
            failed(),
            ["event: Dataset d-cifar10 mounted at /mnt/data", "event: Sanity check passed"],
            ["epoch 1/3 loss=2.3026"],
            FailureClass.INFRASTRUCTURE,
            "DLC named no reason",
            id="steps that went well name no failure",
        ),
    ],
)
def test_a_failed_dlc_job_is_classified_by_dlc_words_first_then_the_scripts(
    status: JobStatus, details: list[str], tail: list[str], expected: FailureClass, evidence: str
) -> None:
    failure = classify_dlc(status, details, tail)

    assert failure.failure_class is expected
    assert evidence in failure.evidence


def _job(*conditions: tuple[str, str], replicas: dict | None = None) -> dict:
    return {
        "metadata": {"uid": "u1"},
        "status": {
            "conditions": [
                {"type": kind, "status": truth, "reason": f"PyTorchJob{kind}"} for kind, truth in conditions
            ],
            "replicaStatuses": replicas or {},
        },
    }


@pytest.mark.parametrize(
    ("conditions", "state", "raw"),
    [
        ([("Created", "True")], JobState.PENDING, "Created"),
        ([("Created", "True"), ("Running", "True")], JobState.RUNNING, "Running"),
        ([("Created", "True"), ("Running", "False"), ("Restarting", "True")], JobState.RUNNING, "Restarting"),
        ([("Created", "True"), ("Running", "False"), ("Succeeded", "True")], JobState.SUCCEEDED, "Succeeded"),
        ([("Created", "True"), ("Running", "False"), ("Failed", "True")], JobState.FAILED, "Failed"),
        ([], JobState.PENDING, "Pending"),
    ],
)
def test_the_newest_true_condition_decides_the_kubeflow_job_state(
    conditions: list[tuple[str, str]], state: JobState, raw: str
) -> None:
    status = job_status(
        JobHandle(backend="arena", job_id="pytorchjobs/v1/u1", name="job"), _job(*conditions), []
    )

    assert (status.state, status.raw) == (state, raw)


def test_kubeflow_status_reports_replica_counts_and_detects_a_replaced_job() -> None:
    job = _job(
        ("Created", "True"), ("Running", "True"), replicas={"Master": {"active": 1}, "Worker": {"active": 3}}
    )

    status = job_status(JobHandle(backend="arena", job_id="pytorchjobs/v1/u1", name="job"), job, [])

    assert status.reason == "PyTorchJobRunning; replicas Master: active 1, Worker: active 3"
    with pytest.raises(LookupError, match="replaced by a newer attempt"):
        job_status(JobHandle(backend="arena", job_id="pytorchjobs/v1/other", name="job"), job, [])
