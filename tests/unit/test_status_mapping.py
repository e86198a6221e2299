"""How each platform's raw statuses map onto JobState, including statuses nobody documented."""

from __future__ import annotations

import logging

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc

from aliyun_training.backends.arena import _status
from aliyun_training.backends.base import JobHandle, JobState, JobStatus
from aliyun_training.backends.dlc import DLC_STATES, DlcBackend

FACT_SHEET_STATUSES = {
    "Creating": JobState.PENDING,
    "Queuing": JobState.PENDING,
    "Bidding": JobState.PENDING,
    "EnvPreparing": JobState.PENDING,
    "SanityChecking": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RUNNING,
    "Stopping": JobState.RUNNING,
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
    status = _status(
        JobHandle(backend="arena", job_id="pytorchjobs/v1/u1", name="job"), _job(*conditions), []
    )

    assert (status.state, status.raw) == (state, raw)


def test_kubeflow_status_reports_replica_counts_and_detects_a_replaced_job() -> None:
    job = _job(
        ("Created", "True"), ("Running", "True"), replicas={"Master": {"active": 1}, "Worker": {"active": 3}}
    )

    status = _status(JobHandle(backend="arena", job_id="pytorchjobs/v1/u1", name="job"), job, [])

    assert status.reason == "PyTorchJobRunning; replicas Master: active 1, Worker: active 3"
    with pytest.raises(LookupError, match="replaced by a newer attempt"):
        _status(JobHandle(backend="arena", job_id="pytorchjobs/v1/other", name="job"), job, [])
