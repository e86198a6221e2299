"""One reading of a pod's status, whichever client returned the pod and in which form."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes_asyncio import client as async_client

from aliyun_training.backends.arena import _pod_problems
from aliyun_training.kubernetes.pods import PodProblem, pending_problem, pod_problems

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
    assert _pod_problems([pod_json()]) == [
        f"pod job-worker-0: Unschedulable {NO_NODE}",
        f"pod job-worker-0: CreateContainerConfigError {MISSING_SECRET}",
        "pod job-worker-0: container sidecar OOMKilled (exit code 137)",
    ]
