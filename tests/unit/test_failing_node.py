"""Which node failed first, as each platform reports it: not the first failed one in node order.

When a worker's script fails, the master's collective fails a moment later with an error of its
own (an NCCL or gloo error about a lost peer). Both pods end Failed; the one that ended first is
where the failure began, and its log is the one the classifier reads.
"""

from __future__ import annotations

from typing import Any

from alibabacloud_pai_dlc20201203 import models as dlc_models

from aliyun_training.backends.ack.status import job_status
from aliyun_training.backends.base import JobHandle, JobState
from aliyun_training.backends.dlc.backend import DlcBackend
from aliyun_training.failures.origin import EndedNode


def dlc_job(master_finished: str, worker_finished: str) -> Any:
    """A failed GetJob answer, as the SDK deserializes it, with the two pods' own finish times."""
    pod = {
        "Status": "Failed",
        "GmtCreateTime": "2026-12-01T10:00:00Z",
        "GmtStartTime": "2026-12-01T10:01:00Z",
    }
    return dlc_models.GetJobResponseBody().from_map(
        {
            "JobId": "dlc-1",
            "Status": "Failed",
            "ReasonCode": "JobFailed",
            "Pods": [
                {**pod, "PodId": "dlc-1-worker-0", "Type": "Worker", "GmtFinishTime": worker_finished},
                {**pod, "PodId": "dlc-1-master-0", "Type": "Master", "GmtFinishTime": master_finished},
            ],
        }
    )


def test_dlc_names_the_node_whose_pod_failed_first() -> None:
    backend, handle = DlcBackend(workspace_id="ws-1"), JobHandle(backend="dlc", job_id="dlc-1", name="j")

    worker_first = backend._interpret(handle, dlc_job("2026-12-01T10:07:03Z", "2026-12-01T10:07:01Z"))
    master_first = backend._interpret(handle, dlc_job("2026-12-01T10:07:01Z", "2026-12-01T10:07:03Z"))
    at_once = backend._interpret(handle, dlc_job("2026-12-01T10:07:01Z", "2026-12-01T10:07:01Z"))

    assert worker_first.state is JobState.FAILED
    assert (worker_first.failed_node, master_first.failed_node, at_once.failed_node) == (1, 0, 0)
    # Every pod that ended badly is reported with its end, for the monitor to find the origin
    # (failures.origin) where a second cannot tell them apart.
    assert worker_first.ended_nodes == [
        EndedNode(node=1, finished="2026-12-01T10:07:01Z"),
        EndedNode(node=0, finished="2026-12-01T10:07:03Z"),
    ]
    assert [ended.finished for ended in at_once.ended_nodes] == ["2026-12-01T10:07:01Z"] * 2


def ack_pod(name: str, finished: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "training"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished}},
                }
            ],
        },
    }


def test_ack_names_the_node_whose_container_terminated_first() -> None:
    job = {
        "metadata": {"name": "j", "uid": "u-1"},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed"}]},
    }
    handle = JobHandle(backend="arena", job_id="pytorchjobs/v1/u-1", name="j")
    pods = [ack_pod("j-master-0", "2026-12-01T10:07:03Z"), ack_pod("j-worker-0", "2026-12-01T10:07:01Z")]

    status = job_status(handle, job, pods)

    assert (status.state, status.failed_node, status.exit_code) == (JobState.FAILED, 1, 1)
    assert status.ended_nodes == [
        EndedNode(node=1, finished="2026-12-01T10:07:01Z", exit_code=1),
        EndedNode(node=0, finished="2026-12-01T10:07:03Z", exit_code=1),
    ]
