"""Why an ACK job failed, read from the objects the cluster keeps: the pods' statuses, the job's
conditions and the events of both, then the failing node's output, then the exit code.

The recorded corpus (tests/data/kubernetes/recorded_failures.json) is read here as plain objects,
the way ``job_status`` and ``describe_failure`` receive them from either Kubernetes client, so the
classifier's whole rule table answers in the fast tier; the integration test
test_recorded_platform_failures.py writes the same cases through the Kubernetes API fake and reads
them back through the backend. The hand-made states below are the evidence the corpus has no case
of: the order of the rules where two match, and the exit codes once no rule does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aliyun_training.backends.ack.failures import classify_ack, describe_failure
from aliyun_training.backends.ack.status import LOG_REPLICAS, job_status, node_pod
from aliyun_training.backends.base import JobHandle, JobState, JobStatus
from aliyun_training.failures import DEFAULT_RECOVERY, FailureClass, RecoveryAction

RECORDED = Path(__file__).resolve().parents[1] / "data" / "kubernetes" / "recorded_failures.json"
CASES: list[dict[str, Any]] = json.loads(RECORDED.read_text())["cases"]
JOB = "llama-sft"
HANDLE = JobHandle(backend="arena", job_id="pytorchjobs/v1/uid-1", name=JOB)
FAILED = JobStatus(
    state=JobState.FAILED, raw="Failed", reason=f"PyTorchJobFailed: PyTorchJob {JOB} is failed"
)
#: The runtime's error in the kubelet's "Failed to pull image" event for a registry's rate limit
#: (https://github.com/kata-containers/kata-containers/issues/10109, kubelet Warning Failed).
RATE_LIMITED = (
    'rpc error: code = Unknown desc = failed to pull and unpack image "docker.io/library/busybox:latest": '
    "failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/"
    "library/busybox/manifests/sha256:50aa4698fa6262977cff89181b2664b99d8a56dbca847bf62f2ef04854597cf8: "
    "429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit. You "
    "may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit"
)
#: The training-operator's Normal event on a running job: no evidence of anything.
RUNNING_EVENT = f"event {JOB}: PyTorchJobRunning: PyTorchJob {JOB} is running."


def recorded_objects(case: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A recorded case as the backend lists it: the PyTorchJob, its pods in node order (named
    ``<job>-<replica>-<index>`` as the training-operator names them) and the events of each."""
    job = {"metadata": {"name": JOB, "uid": "uid-1"}, "status": {"conditions": case["job_conditions"]}}
    order = sorted(case["pods"], key=lambda pod: (LOG_REPLICAS.index(pod["replica"]), pod["index"]))
    pods = [
        {"metadata": {"name": f"{JOB}-{pod['replica']}-{pod['index']}"}, "status": pod["status"]}
        for pod in order
    ]
    # Events name their object as "job" or "<replica>-<index>"; those of a deleted pod are not listed.
    names = [pod["metadata"]["name"] for pod in pods]
    targets = {JOB: "job", **{name: name.removeprefix(f"{JOB}-") for name in names}}
    events = {
        name: [event for event in case.get("events") or [] if event["object"] == target]
        for name, target in targets.items()
    }
    return job, pods, events


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_each_recorded_failure_reads_as_its_class_and_recovery_from_the_objects_alone(
    case: dict[str, Any],
) -> None:
    job, pods, events = recorded_objects(case)
    status = job_status(HANDLE, job, pods)
    # The failing node's log, once its pod started (a pod that never ran has none).
    tail = (case.get("log") or []) if node_pod(pods, status.failed_node or 0) else []

    failure = classify_ack(status, describe_failure(pods, events, JOB), tail)

    expected = FailureClass(case["expected"])
    assert failure.failure_class is expected, (status, failure.evidence)
    assert failure.evidence, "a class always comes with the lines that decided it"


def test_the_corpus_covers_every_class_a_cluster_can_cause() -> None:
    """Budget is the monitor's verdict, never the cluster's: every other class has recorded evidence."""
    assert {FailureClass(case["expected"]) for case in CASES} == set(FailureClass) - {FailureClass.BUDGET}


@pytest.mark.parametrize(
    ("details", "expected", "action"),
    [
        # The scheduler words an unbound claim as FailedScheduling too: data, which no wait fixes.
        (
            [
                "event llama-sft-worker-0: FailedScheduling: 0/4 nodes are available: "
                "pod has unbound immediate PersistentVolumeClaims.",
                "pod llama-sft-worker-0: Unschedulable 0/4 nodes are available",
            ],
            FailureClass.DATA,
            RecoveryAction.FAIL,
        ),
        # A replacement pod that cannot pull its image after the first was preempted: retrying
        # would preempt nothing back, the image stays missing.
        (
            [
                "pod llama-sft-worker-0: DisruptionTarget PreemptionByScheduler preempting",
                "pod llama-sft-worker-0: ImagePullBackOff Back-off pulling image",
            ],
            FailureClass.CONFIG,
            RecoveryAction.FAIL,
        ),
        # Evicted for the pod's own ephemeral-storage limit: the job outgrew what it asked for.
        (
            [
                "pod llama-sft-worker-0: Evicted Pod ephemeral local storage usage exceeds the total "
                "limit of containers 10Gi."
            ],
            FailureClass.USER_CODE,
            RecoveryAction.FAIL,
        ),
        # Evicted for the node's memory pressure: another node may have room.
        (
            ["pod llama-sft-worker-0: Evicted The node was low on resource: memory."],
            FailureClass.PREEMPTION,
            RecoveryAction.RESUME,
        ),
        # The kubelet refused a GPU pod on a node that reports none: its device plugin lost them.
        (
            [
                "pod llama-sft-worker-0: OutOfnvidia.com/gpu Node didn't have enough resource: "
                "nvidia.com/gpu, requested: 8, used: 0, capacity: 0"
            ],
            FailureClass.INFRASTRUCTURE,
            RecoveryAction.RESUME,
        ),
        # The same refusal on a node whose GPUs are all in use: the cluster is full.
        (
            [
                "pod llama-sft-worker-0: OutOfnvidia.com/gpu Node didn't have enough resource: "
                "nvidia.com/gpu, requested: 8, used: 8, capacity: 8"
            ],
            FailureClass.CAPACITY,
            RecoveryAction.RESUME,
        ),
        # The kubelet lost the container (kubelet_pods.go: ContainerStatusUnknown, exit 137) on a
        # node the taint manager then emptied: transient wins over the disruption.
        (
            [
                "pod llama-sft-worker-0: DisruptionTarget DeletionByTaintManager Taint manager: deleting "
                "due to NoExecute taint",
                "pod llama-sft-worker-0: container pytorch ContainerStatusUnknown (exit code 137)",
            ],
            FailureClass.TRANSIENT,
            RecoveryAction.RESUME,
        ),
        # The registry's 429 (kata-containers#10109's kubelet event) wins over the pull's generic
        # config reason on the same pod.
        (
            [
                f"pod llama-sft-worker-0: ErrImagePull {RATE_LIMITED}",
                "event llama-sft-worker-0: Failed: Error: ErrImagePull",
            ],
            FailureClass.TRANSIENT,
            RecoveryAction.RESUME,
        ),
        # A refusal stays config whatever the status code: the corpus's not-found pull.
        (
            [
                'pod llama-sft-worker-0: ImagePullBackOff Back-off pulling image "ghcr.io/alexsjones/'
                'sympozium/node-probe:v0.1.8": ErrImagePull: rpc error: code = NotFound desc = failed to '
                "pull and unpack image: ghcr.io/alexsjones/sympozium/node-probe:v0.1.8: not found"
            ],
            FailureClass.CONFIG,
            RecoveryAction.FAIL,
        ),
        # The scheduler's Preempted event on the victim wins over its replacement's wait.
        (
            [
                "pod llama-sft-worker-0: Unschedulable 0/8 nodes are available: "
                "8 Insufficient nvidia.com/gpu.",
                "event llama-sft-worker-0: Preempted: Preempted by pod 8c2d51e0-7f3b-4a9e-b6c1-2e94d7a0f513 "
                "on node cn-hangzhou.192.168.3.17",
            ],
            FailureClass.PREEMPTION,
            RecoveryAction.RESUME,
        ),
    ],
    ids=[
        "unbound-claim-before-unschedulable",
        "image-before-preemption",
        "own-storage-limit-before-eviction",
        "node-pressure-eviction",
        "node-without-gpus",
        "node-with-busy-gpus",
        "lost-container-before-disruption",
        "rate-limit-before-pull-reason",
        "not-found-pull-stays-config",
        "preempted-before-replacement-wait",
    ],
)
def test_where_two_rules_match_the_first_in_the_table_decides(
    details: list[str], expected: FailureClass, action: RecoveryAction
) -> None:
    failure = classify_ack(FAILED, details, [])

    assert failure.failure_class is expected, failure.evidence
    assert DEFAULT_RECOVERY[failure.failure_class].action is action


@pytest.mark.parametrize(
    ("exit_code", "expected", "action"),
    [
        (126, FailureClass.CONFIG, RecoveryAction.FAIL),
        (127, FailureClass.CONFIG, RecoveryAction.FAIL),
        (1, FailureClass.USER_CODE, RecoveryAction.FAIL),
        (2, FailureClass.USER_CODE, RecoveryAction.FAIL),
        (139, FailureClass.USER_CODE, RecoveryAction.FAIL),
    ],
)
def test_an_exit_no_rule_explains_is_classed_by_its_code(
    exit_code: int, expected: FailureClass, action: RecoveryAction
) -> None:
    """126 and 127: the shell could not run the command (the job's configuration); any other
    code: the command ran and failed."""
    status = FAILED.model_copy(update={"failed_node": 1, "exit_code": exit_code})

    failure = classify_ack(status, [], ["step 120", "saving checkpoint"])

    assert failure.failure_class is expected
    assert DEFAULT_RECOVERY[failure.failure_class].action is action
    assert failure.evidence == [f"exit code {exit_code}", "saving checkpoint"], "the code, the last line"


def test_the_line_that_reports_an_exit_is_its_evidence() -> None:
    status = FAILED.model_copy(update={"failed_node": 1, "exit_code": 2})
    exited = f"pod {JOB}-worker-0: container pytorch Error (exit code 2)"

    failure = classify_ack(status, [RUNNING_EVENT, exited], ["saving checkpoint"])

    assert failure.failure_class is FailureClass.USER_CODE
    assert failure.evidence == [exited, "saving checkpoint"]


@pytest.mark.parametrize("exit_code", [126, 127])
def test_a_pod_that_could_not_run_its_command_is_config_by_the_rule_table(exit_code: int) -> None:
    exited = f"pod {JOB}-worker-0: container pytorch Error (exit code {exit_code})"

    failure = classify_ack(FAILED, [exited], [])

    assert (failure.failure_class, failure.evidence) == (FailureClass.CONFIG, [exited])


def test_an_exit_code_only_the_jobs_events_keep_still_classes_the_failure() -> None:
    """cleanPodPolicy deleted the pods: the training-operator's ExitedWithCode event on the job is
    all that says how the worker ended."""
    exited = f"event {JOB}: ExitedWithCode: Pod: training.{JOB}-worker-0 exited with code 3"
    details = [RUNNING_EVENT, exited]

    failure = classify_ack(FAILED, details, [])

    assert failure.failure_class is FailureClass.USER_CODE
    assert failure.evidence == [exited]


def test_the_failing_nodes_output_decides_before_its_exit_code() -> None:
    """Exit 1 says nothing of why; the worker's last lines do (an NCCL error: the machines')."""
    status = FAILED.model_copy(update={"failed_node": 1, "exit_code": 1})
    tail = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 80, in <module>',
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled system error",
    ]

    failure = classify_ack(status, [f"pod {JOB}-worker-0: container pytorch Error (exit code 1)"], tail)

    assert failure.failure_class is FailureClass.INFRASTRUCTURE, failure.evidence
    assert any("NCCL error" in line for line in failure.evidence)


def test_a_reason_code_no_line_names_is_evidence_of_its_own() -> None:
    status = FAILED.model_copy(update={"reason": "", "reason_code": "Evicted"})

    failure = classify_ack(status, [], [])

    assert failure.failure_class is FailureClass.PREEMPTION
    assert failure.evidence == ["reason Evicted"]


def test_a_line_in_both_the_status_and_the_details_is_evidence_once() -> None:
    line = f"pod {JOB}-worker-0: OOMKilled"
    status = FAILED.model_copy(update={"reason": f"{FAILED.reason}; {line}", "reason_code": "OOMKilled"})

    failure = classify_ack(status, [line], [])

    assert failure.failure_class is FailureClass.USER_CODE
    assert failure.evidence == [line]


@pytest.mark.parametrize(
    ("status", "expected", "evidence"),
    [
        (
            JobStatus(state=JobState.PENDING, raw="Created", reason="PyTorchJobCreated"),
            FailureClass.CAPACITY,
            ["the job stayed pending: PyTorchJobCreated"],
        ),
        (JobStatus(state=JobState.FAILED, raw="Failed"), FailureClass.INFRASTRUCTURE, ["Failed"]),
    ],
    ids=["given-up-while-pending", "failed-without-a-word"],
)
def test_a_job_with_no_evidence_is_classed_by_its_state(
    status: JobStatus, expected: FailureClass, evidence: list[str]
) -> None:
    failure = classify_ack(status, [], [])

    assert (failure.failure_class, failure.evidence) == (expected, evidence)


#: The scheduler's event on a victim (pkg/scheduler/framework/preemption/preemption.go, "Preempted by
#: pod %v on node %v", the preemptor's UID and the node: filled-in values) and the taint-eviction
#: controller's (pkg/controller/tainteviction/taint_eviction.go, "Marking for deletion Pod %s").
PREEMPTED = "Preempted by pod 8c2d51e0-7f3b-4a9e-b6c1-2e94d7a0f513 on node cn-hangzhou.192.168.3.17"
EVICTED = f"default/{JOB}-worker-1"


def test_the_details_are_the_pods_problems_their_warnings_and_every_event_of_the_job() -> None:
    pod = {
        "metadata": {"name": f"{JOB}-worker-0"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "pytorch", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
    }
    events = {
        JOB: [
            {"type": "Normal", "reason": "SuccessfulCreatePod", "message": f"Created pod: {JOB}-worker-0"},
            {"type": "Normal", "reason": "ExitedWithCode", "message": f"Pod: training.{JOB}-worker-0 exited"},
        ],
        f"{JOB}-worker-0": [
            {"type": "Normal", "reason": "Pulled", "message": "Container image already present"},
            {"type": "Warning", "reason": "BackOff", "message": "Back-off restarting failed container"},
        ],
        # Gone (cleanPodPolicy): only the events name it. The scheduler's and the taint-eviction
        # controller's Normal events say what ended it; the kubelet's progress does not.
        f"{JOB}-worker-1": [
            {"type": "Normal", "reason": "Scheduled", "message": f"Successfully assigned {JOB}-worker-1"},
            {"type": "Normal", "reason": "Started", "message": "Started container pytorch"},
            {"type": "Normal", "reason": "Preempted", "message": PREEMPTED},
            {
                "type": "Normal",
                "reason": "TaintManagerEviction",
                "message": f"Marking for deletion Pod {EVICTED}",
            },
            {"type": "Normal", "reason": "Killing", "message": "Stopping container pytorch"},
        ],
    }

    details = describe_failure([pod], events, JOB)

    assert details == [
        f"pod {JOB}-worker-0: container pytorch OOMKilled (exit code 137)",
        f"event {JOB}: SuccessfulCreatePod: Created pod: {JOB}-worker-0",
        f"event {JOB}: ExitedWithCode: Pod: training.{JOB}-worker-0 exited",
        f"event {JOB}-worker-0: BackOff: Back-off restarting failed container",
        f"event {JOB}-worker-1: Preempted: {PREEMPTED}",
        f"event {JOB}-worker-1: TaintManagerEviction: Marking for deletion Pod {EVICTED}",
    ]
