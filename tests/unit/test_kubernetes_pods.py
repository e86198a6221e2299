"""One reading of a pod's status, whichever client returned the pod and in which form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes_asyncio import client as async_client

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.ack.status import pod_problem_lines
from aliyun_training.backends.base import JobState, JobStatus
from aliyun_training.failures import FailureClass
from aliyun_training.kubernetes.pod_status import PodProblem, pending_problem, pod_problems

MISSING_SECRET = 'secret "oss-credentials" not found'
NO_NODE = "0/3 nodes are available"


def pod_json() -> dict[str, Any]:
    """A pod as the API server writes it: unschedulable, one container waiting, one OOMKilled."""
    return {
        "metadata": {"name": "job-worker-0", "namespace": "training"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_NODE},
            ],
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "image": "repo/train:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "CreateContainerConfigError", "message": MISSING_SECRET}},
                },
                {
                    "name": "sidecar",
                    "image": "repo/sidecar:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 1,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                },
                {
                    "name": "starting",
                    "image": "repo/starting:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                },
            ],
        },
    }


def as_model(api: Any, data: dict[str, Any]) -> Any:
    """``data`` deserialized into a V1Pod of ``api``'s client, as a read returns it."""

    class Response:
        def __init__(self) -> None:
            self.data = json.dumps(data)

    return api.deserialize(Response(), "V1Pod")


EXPECTED = [
    PodProblem("unschedulable", "Unschedulable", NO_NODE),
    PodProblem("waiting", "CreateContainerConfigError", MISSING_SECRET, "pytorch"),
    PodProblem("exited", "OOMKilled", "", "sidecar", 137),
]


async def test_a_pod_reads_the_same_as_json_and_as_a_model_of_either_client() -> None:
    sync_model = as_model(client.ApiClient(), pod_json())
    async with async_client.ApiClient() as api:
        async_model = as_model(api, pod_json())

    assert pod_problems(pod_json()) == EXPECTED
    assert pod_problems(sync_model) == EXPECTED
    assert pod_problems(async_model) == EXPECTED
    assert [p.fatal for p in EXPECTED] == [False, True, False]


def test_a_pending_pod_names_its_first_problem_and_whether_waiting_fixes_it() -> None:
    data = pod_json()
    assert pending_problem(data) == (f"Unschedulable: {NO_NODE}", False)

    data["status"]["conditions"] = []
    assert pending_problem(data) == (f"CreateContainerConfigError: {MISSING_SECRET}", True)

    data["status"]["containerStatuses"] = data["status"]["containerStatuses"][2:]
    assert pending_problem(data) == ("waiting for the container to start", False)


def test_the_ack_backend_words_every_problem_of_every_pod() -> None:
    assert pod_problem_lines([pod_json()]) == [
        f"pod job-worker-0: Unschedulable {NO_NODE}",
        f"pod job-worker-0: CreateContainerConfigError {MISSING_SECRET}",
        "pod job-worker-0: container sidecar OOMKilled (exit code 137)",
    ]


def ended_pod(reason: str, message: str, disruption: str) -> dict[str, Any]:
    """A pod a node or controller ended: its status reason, DisruptionTarget, a killed container."""
    return {
        "metadata": {"name": "job-master-0", "namespace": "training"},
        "status": {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": disruption, "message": message},
                {"type": "Ready", "status": "False", "reason": "PodFailed"},
            ],
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "image": "repo/train:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "Error"}},
                }
            ],
        },
    }


SHUTDOWN = "Pod was terminated in response to imminent node shutdown."


def test_what_ended_a_pod_comes_first_and_is_no_pending_problem() -> None:
    pod = ended_pod("Terminated", SHUTDOWN, "TerminationByKubelet")

    assert pod_problems(pod) == [
        PodProblem("ended", "Terminated", SHUTDOWN),
        PodProblem("disrupted", "TerminationByKubelet", SHUTDOWN),
        PodProblem("exited", "Error", "", "pytorch", 137),
    ]
    assert pending_problem(pod) == ("waiting for the container to start", False)


def test_a_container_waiting_to_restart_names_why_it_stopped_last() -> None:
    data = pod_json()
    data["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "CrashLoopBackOff", "message": "m"}
    }
    data["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 137, "reason": "OOMKilled"}
    }

    assert pod_problems(data)[1:3] == [
        PodProblem("waiting", "CrashLoopBackOff", "m", "pytorch"),
        PodProblem("exited", "OOMKilled", "", "pytorch", 137),
    ]


def test_a_worker_restarted_in_place_keeps_how_its_last_run_ended() -> None:
    """restartPolicy OnFailure: the kubelet restarted the OOM-killed worker in the same pod, which
    runs again (restartCount 1); only lastState still says OOMKilled, and the failure it explains
    (the job failing later, on another node) must not lose it."""
    data = pod_json()
    data["status"]["phase"] = "Running"
    data["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    data["status"]["containerStatuses"] = [
        {
            "name": "pytorch",
            "image": "repo/train:1",
            "imageID": "",
            "ready": True,
            "restartCount": 1,
            "state": {"running": {"startedAt": "2026-12-01T10:05:00Z"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
        }
    ]
    failed = JobStatus(state=JobState.FAILED, raw="Failed", reason="PyTorchJob job is failed", failed_node=0)

    assert pod_problems(data) == [PodProblem("exited", "OOMKilled", "", "pytorch", 137)]
    failure = AckBackend(namespace="training").classify(failed, pod_problem_lines([data]), [])
    assert failure.failure_class is FailureClass.USER_CODE, failure.evidence
    assert failure.evidence == ["pod job-worker-0: container pytorch OOMKilled (exit code 137)"]


def test_a_pod_the_training_operator_deleted_is_read_from_the_jobs_events() -> None:
    """cleanPodPolicy All: the pods are gone when the job is Failed; the training-operator's
    ExitedWithCode event on the job still says which pod exited how."""
    failed = JobStatus(state=JobState.FAILED, raw="Failed", reason="PyTorchJob demo is failed")
    details = ["event demo: ExitedWithCode: Pod: training.demo-worker-0 exited with code 127"]

    failure = AckBackend(namespace="training").classify(failed, details, [])

    assert failure.failure_class is FailureClass.CONFIG, failure.evidence
    assert failure.evidence[0] == details[0]


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        (ended_pod("Terminated", SHUTDOWN, "TerminationByKubelet"), "Terminated"),
        (
            ended_pod("Preempting", "Preempted in order to admit critical pod", "TerminationByKubelet"),
            "Preempting",
        ),
        (
            ended_pod(
                "NodeLost", "Node n-1 which was running pod job-master-0 is unresponsive", "DeletionByPodGC"
            ),
            "NodeLost",
        ),
    ],
)
def test_the_ack_backend_classifies_what_a_node_or_controller_did_to_a_pod_as_preemption(
    pod: dict[str, Any], reason: str
) -> None:
    status = JobStatus(state=JobState.FAILED, raw="Failed", reason_code=reason, exit_code=137)

    failure = AckBackend().classify(
        status, pod_problem_lines([pod]), ["RuntimeError: NCCL error: remote peer closed"]
    )

    assert failure.failure_class is FailureClass.PREEMPTION
    assert failure.evidence[0].startswith(f"pod job-master-0: {reason} ")


@pytest.mark.parametrize(
    ("disruption", "message"),
    [
        ("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod"),
        ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"),
        ("EvictionByEvictionAPI", "Eviction API: evicting"),
    ],
)
def test_a_disruption_target_without_a_pod_reason_is_preemption_too(disruption: str, message: str) -> None:
    pod = ended_pod("", message, disruption)
    del pod["status"]["reason"]

    failure = AckBackend().classify(
        JobStatus(state=JobState.FAILED, raw="Failed"), pod_problem_lines([pod]), []
    )

    assert failure.failure_class is FailureClass.PREEMPTION
    assert failure.evidence[0] == f"pod job-master-0: DisruptionTarget {disruption} {message}"


def test_a_failed_job_without_evidence_of_its_own_is_infrastructure() -> None:
    status = JobStatus(state=JobState.FAILED, raw="Failed", reason="PyTorchJobFailed: job failed")

    failure = AckBackend().classify(status, [], [])

    assert failure.failure_class is FailureClass.INFRASTRUCTURE
    assert failure.evidence == ["PyTorchJobFailed: job failed"]
