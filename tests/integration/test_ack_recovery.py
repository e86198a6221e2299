"""The ACK backend when things go wrong: failures classified, jobs of ours found, a stop followed to
its end, and a wait that outlives its credentials.

Everything goes through the cncf.kubernetes hooks (``kubernetes`` and ``kubernetes_asyncio``)
over HTTP to the Kubernetes API fake, on a manual clock: a job's life, a pod's termination and a
token's expiry happen when the test moves the clock, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.ack.request import GROUP, build_job
from aliyun_training.backends.base import JobHandle, JobState, JobStatus
from aliyun_training.failures import DEFAULT_RECOVERY, FailureClass, RecoveryAction
from aliyun_training.hooks import kubernetes as kube_hooks
from aliyun_training.kubernetes.names import INSTALLATION_LABEL, OWNED, OWNED_LABEL, job_name
from aliyun_training.spec import JobOwner, TrainingJobSpec
from fakes.base import ManualClock
from fakes.cloud import arena_job
from fakes.environment_files import INSTALLATION
from fakes.kube import NS, exec_user, kubernetes_fake, replay_recorded, token_file_user
from fakes.kubernetes_fake import RECORDED, KubernetesFake, TrainingScript

if TYPE_CHECKING:
    from collections.abc import Iterator

    from aliyun_training.failures import Failure

CONN_ID = "ack_recovery"
RUN_ID = "scheduled__2026-11-30T00:00:00+00:00"
OWNER = JobOwner(installation=INSTALLATION, dag_id="retrain", run_id=RUN_ID, task_id="train")
NAME = job_name(OWNER.dag_id, OWNER.run_id, OWNER.task_id, installation=INSTALLATION)
#: A job that keeps running until the test is done with it.
LONG_RUN = [("Created", 0.05), ("Running", 36_000.0)]


@pytest.fixture
def clock() -> ManualClock:
    """Now, in whole seconds: sums of whole-second steps stay exact, so "after 20 s" is exact too."""
    return ManualClock(float(int(time.time())))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, clock, conn_id=CONN_ID) as server:
        yield server


def backend(**settings: Any) -> AckBackend:
    return AckBackend(kubernetes_conn_id=CONN_ID, namespace=NS, **settings)


def spec(owner: JobOwner | None = OWNER, **fields: Any) -> TrainingJobSpec:
    job = arena_job(
        command="python train.py", datasets=[{"uri": "pvc://cpfs-train", "mount_path": "/mnt/data"}], **fields
    )
    return TrainingJobSpec.parse({**job, **({"owner": owner.model_dump()} if owner else {})})


def advance(fake: KubernetesFake, clock: ManualClock, seconds: float) -> None:
    clock.advance(seconds)
    fake.reconcile()


# -- classified failures ----------------------------------------------------------------------------

UNBOUND = (
    "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 nodes "
    "are available: 4 Preemption is not helpful for scheduling."
)
NCCL = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.18.1"
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "ValueError: lr < 0",
]
CASES = [
    pytest.param(
        TrainingScript(outcome="ImagePullBackOff"), FailureClass.CONFIG, "ImagePullBackOff", id="image"
    ),
    pytest.param(
        TrainingScript(
            outcome="ExitCode", exit_code=127, failing_replica="master", log_lines=["python: not found"]
        ),
        FailureClass.CONFIG,
        "(exit code 127)",
        id="exit-127",
    ),
    pytest.param(
        TrainingScript(outcome="Unschedulable"),
        FailureClass.CAPACITY,
        "Unschedulable 0/4 nodes",
        id="unschedulable",
    ),
    pytest.param(
        TrainingScript(phases=[("Created", 36_000.0)]),
        FailureClass.CAPACITY,
        "stayed pending",
        id="pending-long",
    ),
    pytest.param(
        TrainingScript(
            outcome="Evicted",
            failing_replica="worker",
            message='Container pytorch exceeded its local ephemeral storage limit "10Gi". ',
        ),
        FailureClass.USER_CODE,
        'exceeded its local ephemeral storage limit "10Gi"',
        id="evicted-for-its-own-storage-limit",
    ),
    pytest.param(
        TrainingScript(
            outcome="Evicted",
            failing_replica="master",
            message='Usage of EmptyDir volume "dshm" exceeds the limit "2Gi". ',
        ),
        FailureClass.USER_CODE,
        'Usage of EmptyDir volume "dshm" exceeds the limit "2Gi"',
        id="evicted-for-its-emptydir-limit",
    ),
    pytest.param(
        TrainingScript(outcome="Evicted", failing_replica="master"),
        FailureClass.PREEMPTION,
        "Evicted The node was low on resource: memory.",
        id="evicted",
    ),
    pytest.param(
        TrainingScript(outcome="Failed", failing_replica="master", log_lines=["epoch 1", NCCL]),
        FailureClass.INFRASTRUCTURE,
        "NCCL error",
        id="nccl",
    ),
    pytest.param(
        TrainingScript(outcome="OOMKilled", failing_replica="master"),
        FailureClass.USER_CODE,
        "OOMKilled (exit code 137)",
        id="oom",
    ),
    pytest.param(
        TrainingScript(outcome="ExitCode", exit_code=1, failing_replica="master", log_lines=TRACEBACK),
        FailureClass.USER_CODE,
        "(exit code 1)",
        id="traceback",
    ),
    pytest.param(TrainingScript(outcome="FailedMount"), FailureClass.DATA, "FailedMount", id="mount"),
    pytest.param(
        TrainingScript(outcome="Unschedulable", message=UNBOUND),
        FailureClass.DATA,
        "unbound immediate",
        id="pvc",
    ),
    pytest.param(
        TrainingScript(
            outcome="Failed", failing_replica="master", log_lines=["FileNotFoundError: /mnt/data/train.csv"]
        ),
        FailureClass.DATA,
        "FileNotFoundError",
        id="missing-file",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "expected", "evidence"), CASES)
def test_each_failure_is_classified_from_what_the_cluster_says(
    fake: KubernetesFake, clock: ManualClock, script: TrainingScript, expected: FailureClass, evidence: str
) -> None:
    fake.default_script = script
    ack = backend()
    handle = ack.submit(spec(), NAME)
    advance(fake, clock, 30)

    status = ack.status(handle)
    details = ack.failure_details(handle)
    tail = ack.tail(handle, status.failed_node or 0)
    failure = ack.classify(status, details, tail)

    assert status.state in (JobState.FAILED, JobState.PENDING)
    assert failure.failure_class is expected, failure.evidence
    assert any(evidence in line for line in failure.evidence), failure.evidence
    assert ack.classify(asyncio.run(ack.astatus(handle)), details, tail) == failure, (
        "the trigger decides alike"
    )


@pytest.mark.parametrize(
    ("script", "reason_code"),
    [
        (TrainingScript(outcome="OOMKilled", failing_replica="worker"), "OOMKilled"),
        (TrainingScript(outcome="Evicted", failing_replica="master"), "Evicted"),
        (TrainingScript(outcome="ImagePullBackOff"), "ImagePullBackOff"),
        (TrainingScript(outcome="Unschedulable"), "Unschedulable"),
        (TrainingScript(outcome="ExitCode", exit_code=3), "Error"),
    ],
)
def test_the_reason_code_is_the_failed_pods_own(
    fake: KubernetesFake, clock: ManualClock, script: TrainingScript, reason_code: str
) -> None:
    fake.default_script = script
    ack = backend()
    handle = ack.submit(spec(), NAME)
    advance(fake, clock, 30)

    assert ack.status(handle).reason_code == reason_code


def test_evidence_names_the_evicted_pod_and_its_disruption(fake: KubernetesFake, clock: ManualClock) -> None:
    fake.default_script = TrainingScript(outcome="Evicted", failing_replica="master")
    ack = backend()
    handle = ack.submit(spec(), NAME)
    advance(fake, clock, 30)

    failure = ack.classify(ack.status(handle), ack.failure_details(handle), [])

    assert failure.evidence[:2] == [
        f"pod {NAME}-master-0: Evicted The node was low on resource: memory. Threshold quantity: 100Mi, "
        "available: 51200Ki.",
        f"pod {NAME}-master-0: DisruptionTarget TerminationByKubelet The node was low on resource: memory. "
        "Threshold quantity: 100Mi, available: 51200Ki.",
    ]


def test_a_request_the_training_operators_webhook_denies_is_a_config_failure(fake: KubernetesFake) -> None:
    ack = backend()
    body = build_job(spec(), NAME, ack.settings)
    body["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    with pytest.raises(ApiException) as denied:
        ack._hook().custom_object_client.create_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", body)
    message = json.loads(denied.value.body)["message"]

    failure = ack.classify(JobStatus(state=JobState.FAILED, raw="Forbidden"), [message], [])

    assert denied.value.status == 403
    assert failure.failure_class is FailureClass.CONFIG and failure.evidence == [message]


# -- jobs of ours --------------------------------------------------------------------------------------


def owner(task_id: str) -> JobOwner:
    return JobOwner(
        installation=INSTALLATION, dag_id="retrain", run_id=RUN_ID, task_id=task_id, map_index=2, try_number=3
    )


def test_launched_lists_every_page_of_every_kind_of_this_installation_and_leaves_ended_and_foreign_out(
    fake: KubernetesFake, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_hooks, "LIST_PAGE_SIZE", 2)
    fake.default_script = TrainingScript(phases=LONG_RUN)
    ack = backend()
    running = {f"train-{i}": owner(f"train_{i}") for i in range(5)}
    handles = {name: ack.submit(spec(who), name) for name, who in running.items()}
    others = {"tf-0": ("tensorflow", owner("tf")), "mpi-0": ("mpi", owner("mpi"))}
    for name, (framework, who) in others.items():
        ack.submit(spec(who, framework=framework), name)
    fake.script_for("done-", TrainingScript(phases=[("Created", 0.05), ("Running", 1.0)]))
    ack.submit(spec(owner("done")), "done-0")
    ack.submit(spec(None), "no-owner-0")
    # Another deployment's job of the same task in the same namespace: not ours, not even listed.
    ack.submit(spec(owner("train_0").model_copy(update={"installation": "ml-staging"})), "foreign-0")
    advance(fake, clock, 10)

    launched = ack.launched(INSTALLATION)

    expected = {**running, **{name: who for name, (_, who) in others.items()}}
    assert {job.handle.name: job.owner for job in launched} == expected
    assert all(job.state is JobState.RUNNING and job.created for job in launched)
    assert {job.handle.job_id for job in launched} >= {handle.job_id for handle in handles.values()}
    pages = [r for r in fake.requests if r.method == "GET" and r.path.endswith("/pytorchjobs")]
    selector = f"{OWNED_LABEL}={OWNED},{INSTALLATION_LABEL}={INSTALLATION}"
    assert all(r.query["labelSelector"] == selector and r.query["limit"] == "2" for r in pages)
    assert sum("continue" in r.query for r in pages) == 2, "six owned PyTorchJobs come in three pages"


def test_the_owner_is_annotated_exactly_on_the_cr_and_its_pods(fake: KubernetesFake) -> None:
    who = JobOwner(
        installation=INSTALLATION,
        dag_id="retrain",
        run_id="manual__2026-11-30T00:00:00.123+08:00",
        task_id="train",
        map_index=7,
    )
    ack = backend()
    ack.submit(spec(who), NAME)
    hook = ack._hook()

    job = hook.custom_object_client.get_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", NAME)
    pods = hook.core_v1_client.list_namespaced_pod(NS, label_selector=f"release={NAME}").items

    expected = {f"aliyun-training/{tag}": value for tag, value in who.tags().items()}
    for metadata in (job["metadata"], *(pod.to_dict(serialize=True)["metadata"] for pod in pods)):
        assert expected.items() <= metadata["annotations"].items()
        assert metadata["labels"][OWNED_LABEL] == OWNED and metadata["labels"]["release"] == NAME
    assert [launched.owner for launched in ack.launched(INSTALLATION)] == [who]


def test_launched_reports_a_job_being_deleted_as_stopping_and_skips_a_kind_the_cluster_lacks(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    fake.default_script = TrainingScript(phases=LONG_RUN)
    ack = backend()
    ack.submit(spec(owner("held")), "held-0")
    ack.submit(spec(owner("tf"), framework="tensorflow"), "tf-0")
    custom = ack._hook().custom_object_client
    hold = {"metadata": {"finalizers": ["x.io/hold"]}}  # another controller's finalizer
    custom.patch_namespaced_custom_object(
        GROUP, "v1", NS, "pytorchjobs", "held-0", hold, _content_type="application/merge-patch+json"
    )
    custom.delete_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", "held-0")
    fake.fail_next("GET", "/tfjobs", status=404)  # no TFJob CRD on this cluster

    assert [(job.handle.name, job.state) for job in ack.launched(INSTALLATION)] == [
        ("held-0", JobState.STOPPING)
    ]
    assert [job.handle.name for job in ack.launched(INSTALLATION)] == ["held-0", "tf-0"]


# -- stopping --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_stopped_job_is_stopping_until_its_pods_are_gone(fake: KubernetesFake, clock: ManualClock) -> None:
    fake.default_script = TrainingScript(phases=LONG_RUN, stop_seconds=20.0)
    ack = backend()
    handle = ack.submit(spec(), NAME)
    advance(fake, clock, 5)
    assert ack.status(handle).state is JobState.RUNNING

    ack.stop(handle)
    stopping = ack.status(handle)
    terminating = ack._hook().core_v1_client.list_namespaced_pod(NS, label_selector=f"release={NAME}").items

    assert stopping.state is JobState.STOPPING and not stopping.state.is_terminal
    assert f"{NAME}-master-0" in stopping.reason and stopping.raw == "Deleted"
    assert terminating and all(pod.metadata.deletion_timestamp for pod in terminating)
    assert asyncio.run(ack.astatus(handle)).state is JobState.STOPPING
    advance(fake, clock, 19)
    assert ack.status(handle).state is JobState.STOPPING
    advance(fake, clock, 1)
    assert ack.status(handle).state is JobState.STOPPED
    assert asyncio.run(ack.astatus(handle)).state is JobState.STOPPED


def test_a_job_resubmitted_while_the_stopped_ones_pods_terminate_gets_its_own_pods_after_them(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    fake.default_script = TrainingScript(phases=LONG_RUN, stop_seconds=20.0)
    ack = backend()
    earlier = ack.submit(spec(), NAME)
    advance(fake, clock, 5)
    ack.stop(earlier)

    later = ack.submit(spec(), NAME)
    waiting = ack.status(later)
    terminating = ack._list_pods(ack._hook(), earlier)
    assert terminating and ack._list_pods(ack._hook(), later) == [], "the earlier job's pods are not its"
    advance(fake, clock, 20)  # the earlier pods are gone, the operator creates the new ones
    advance(fake, clock, 1)
    running = ack.status(later)
    pods = ack._hook().core_v1_client.list_namespaced_pod(NS, label_selector=f"release={NAME}").items

    assert (waiting.state, waiting.reason_code, waiting.failed_node) == (JobState.PENDING, "", None)
    assert running.state is JobState.RUNNING
    assert {ref.uid for pod in pods for ref in pod.metadata.owner_references} == {
        later.job_id.rsplit("/")[-1]
    }
    with pytest.raises(LookupError, match="replaced by a newer attempt"):
        ack.status(earlier)


def test_a_foreground_deletion_keeps_the_cr_stopping_until_its_pods_are_gone(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    fake.default_script = TrainingScript(phases=LONG_RUN, stop_seconds=10.0)
    ack = backend()
    handle = ack.submit(spec(), NAME)
    advance(fake, clock, 5)
    custom = ack._hook().custom_object_client

    custom.delete_namespaced_custom_object(
        GROUP, "v1", NS, "pytorchjobs", NAME, propagation_policy="Foreground"
    )
    held = custom.get_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", NAME)
    status = ack.status(handle)

    assert held["metadata"]["finalizers"] == ["foregroundDeletion"] and held["metadata"]["deletionTimestamp"]
    assert (status.state, status.raw) == (JobState.STOPPING, "Deleting")
    assert "finalizers: foregroundDeletion" in status.reason
    assert [job.state for job in ack.launched(INSTALLATION)] == [JobState.STOPPING]
    advance(fake, clock, 10)
    assert ack.status(handle).state is JobState.STOPPED and ack.launched(INSTALLATION) == []


# -- credentials that expire during a wait -------------------------------------------------------------


def _expiring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock, user: Any) -> Any:
    return kubernetes_fake(tmp_path, monkeypatch, clock, conn_id=CONN_ID, user=user)


@pytest.mark.slow
def test_a_wait_goes_on_after_the_token_file_is_rotated_and_the_old_token_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    token_file = tmp_path / "token"
    with _expiring(tmp_path, monkeypatch, clock, token_file_user(token_file, "token-1")) as fake:
        fake.issue_token("token-1", expires_at=clock() + 150)
        fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 100.0)])
        ack = backend()  # built once, as the trigger builds it
        handle = ack.submit(spec(), NAME)

        async def wait() -> tuple[JobState, list[str], JobState]:
            advance(fake, clock, 10)
            before = (await ack.astatus(handle)).state
            token_file_user(token_file, "token-2")  # the kubelet rotated the projected token
            fake.issue_token("token-2")
            advance(fake, clock, 190)  # token-1 has expired, the job has finished
            lines = (await ack.alogs(handle)).lines  # the pods the last poll listed: a log read first
            return before, lines, (await ack.astatus(handle)).state

        before, lines, after = asyncio.run(wait())
        synchronous = ack.status(handle).state

    assert (before, after, synchronous) == (JobState.RUNNING, JobState.SUCCEEDED, JobState.SUCCEEDED)
    assert lines[-1] == "[node-1] Training finished"
    rejected = [r.path for r in fake.requests if r.status == 401]
    assert rejected == [
        f"/api/v1/namespaces/{NS}/pods/{NAME}-master-0/log",
        f"/apis/{GROUP}/v1/namespaces/{NS}/pytorchjobs/{NAME}",
    ]


@pytest.mark.slow
def test_a_wait_goes_on_after_the_exec_plugin_hands_out_a_new_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    credential = tmp_path / "credential.json"
    with _expiring(tmp_path, monkeypatch, clock, exec_user(credential, "exec-1")) as fake:
        fake.issue_token("exec-1", expires_at=clock() + 60)
        fake.default_script = TrainingScript(phases=LONG_RUN)
        ack = backend()
        handle = ack.submit(spec(), NAME)
        advance(fake, clock, 10)
        assert ack.status(handle).state is JobState.RUNNING

        exec_user(credential, "exec-2")
        fake.issue_token("exec-2")
        advance(fake, clock, 100)

        assert ack.status(handle).state is JobState.RUNNING
        assert asyncio.run(ack.astatus(handle)).state is JobState.RUNNING
        assert [r.status for r in fake.requests].count(401) == 1, "the sync client reran the plugin once"


@pytest.mark.slow
def test_credentials_still_rejected_after_reloading_fail_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    token_file = tmp_path / "token"
    with _expiring(tmp_path, monkeypatch, clock, token_file_user(token_file, "token-1")) as fake:
        fake.issue_token("token-1", expires_at=clock() + 60)
        ack = backend()
        handle = ack.submit(spec(), NAME)
        advance(fake, clock, 100)  # expired, and nothing rotated it

        with pytest.raises(ApiException) as sync_rejected:
            ack.status(handle)
        with pytest.raises(AsyncApiException) as async_rejected:
            asyncio.run(ack.astatus(handle))

    assert sync_rejected.value.status == 401 and async_rejected.value.status == 401
    assert [r.status for r in fake.requests].count(401) == 4, "each call tried once more, then gave up"


def test_a_failed_job_whose_pods_the_operator_deleted_is_classified_from_the_jobs_events(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    """cleanPodPolicy All: once the job failed the training-operator deletes every pod, and with
    them their statuses and logs; its ExitedWithCode event on the job still names the exit."""
    fake.default_script = TrainingScript(outcome="ExitCode", exit_code=127, failing_replica="worker")
    ack = backend(clean_pod_policy="All")
    handle = ack.submit(spec(), NAME)
    advance(fake, clock, 30)
    advance(fake, clock, 30)

    status = ack.status(handle)
    details = ack.failure_details(handle)
    failure = ack.classify(status, details, ack.tail(handle, status.failed_node or 0))

    assert status.state is JobState.FAILED
    assert not [line for line in details if line.startswith("pod ")], "no pod is left to read"
    assert failure.failure_class is FailureClass.CONFIG, (failure.evidence, details)
    assert any("ExitedWithCode" in line and "exited with code 127" in line for line in failure.evidence)
    assert asyncio.run(ack.afailure_details(handle)) == details, "the trigger reads the same"


# -- evidence of pods that are gone or replaced ------------------------------------------------------

RECORDED_CASES = {
    case["name"]: case
    for case in json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "kubernetes" / "recorded_failures.json").read_text()
    )["cases"]
}


def replayed(fake: KubernetesFake, clock: ManualClock, case: dict[str, Any]) -> tuple[AckBackend, JobHandle]:
    """A job of ours whose pods and CR then say what ``case`` recorded (``replay_recorded``)."""
    fake.default_script = TrainingScript(outcome=RECORDED)
    ack = backend()
    handle = ack.submit(spec(), NAME)
    advance(fake, clock, 30)
    replay_recorded(case, handle.name, conn_id=CONN_ID)
    return ack, handle


def classified(ack: AckBackend, handle: JobHandle) -> tuple[list[str], Failure]:
    """The failure details and the class the worker and the trigger both read from them."""
    status = ack.status(handle)
    details = ack.failure_details(handle)
    assert asyncio.run(ack.afailure_details(handle)) == details, "the trigger reads the same"
    return details, ack.classify(status, details, [])


def test_a_preempted_worker_replaced_by_an_unschedulable_pod_reads_as_preemption(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    """The scheduler preempts the worker (its Normal "Preempted" event, preemption.go) and the
    operator recreates the pod under its name, which then waits for GPUs (FailedScheduling): given
    up 15 minutes later, the job was preempted, not short of capacity. Recorded statuses and events:
    the corpus's preemption case, its worker replaced by the unschedulable case's pod."""
    preempted = RECORDED_CASES["preempted by a higher-priority pod (scheduler preemption)"]
    waiting = RECORDED_CASES["Unschedulable, insufficient nvidia.com/gpu, preemption found no victims"]
    worker = next(pod for pod in waiting["pods"] if pod["replica"] == "worker")
    case = {
        **preempted,
        "pods": [*(pod for pod in preempted["pods"] if pod["replica"] != "worker"), worker],
        "events": [
            *preempted["events"],
            *(event for event in waiting["events"] if event["object"] == "worker-0"),
        ],
    }
    ack, handle = replayed(fake, clock, case)

    details, failure = classified(ack, handle)

    assert any("Unschedulable" in line for line in details), "the replacement's wait is read too"
    assert failure.failure_class is FailureClass.PREEMPTION, failure.evidence
    assert DEFAULT_RECOVERY[failure.failure_class].action is RecoveryAction.RESUME
    assert f"event {NAME}-worker-0: Preempted: Preempted by pod" in failure.evidence[0]


def test_the_events_of_pods_the_operator_deleted_are_read_by_the_names_the_job_gave_them(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    """cleanPodPolicy deleted the pods of a job whose worker's node was lost: the node lifecycle
    controller's NodeNotReady and the taint-eviction controller's TaintManagerEviction events on
    the worker (the corpus's node-lost case) outlive it, found by the name the operator's
    SuccessfulCreatePod event on the job gave the pod. Another job's pod's events, on a name no
    event of this job gives, are not read."""
    lost = RECORDED_CASES["node lost (NotReady), taint manager deletes the worker"]
    failed = RECORDED_CASES["master OOMKilled, pod Failed (restartPolicy Never)"]["job_conditions"]
    case = {**lost, "pods": [], "job_conditions": failed}
    ack, handle = replayed(fake, clock, case)
    other = f"{NAME}-x-worker-0"
    preempted = RECORDED_CASES["preempted by a higher-priority pod (scheduler preemption)"]["events"][0]
    replay_recorded({"pods": [], "events": [{**preempted, "object": "x-worker-0"}]}, NAME, conn_id=CONN_ID)

    details, failure = classified(ack, handle)

    assert not [line for line in details if line.startswith("pod ")], "no pod is left to read"
    assert not [line for line in details if other in line], "another job's pod is not read"
    assert failure.failure_class is FailureClass.PREEMPTION, (failure.evidence, details)
    assert DEFAULT_RECOVERY[failure.failure_class].action is RecoveryAction.RESUME
    assert failure.evidence == [
        f"event {NAME}-worker-0: NodeNotReady: Node is not ready",
        f"event {NAME}-worker-0: TaintManagerEviction: Marking for deletion Pod default/mixtral-moe-worker-0",
    ]


def test_a_pull_the_registry_rate_limited_is_transient_and_resumed_later(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    """The kubelet's ErrImagePull for a 429 toomanyrequests (the corpus's rate-limit case, from
    kata-containers#10109): the registry will serve the image later, so the job is retried after
    a wait that doubles, not failed as a bad image."""
    ack, handle = replayed(
        fake, clock, RECORDED_CASES["ErrImagePull, registry rate limit (429 toomanyrequests)"]
    )

    _details, failure = classified(ack, handle)

    assert failure.failure_class is FailureClass.TRANSIENT, failure.evidence
    recovery = DEFAULT_RECOVERY[failure.failure_class]
    assert (recovery.action, recovery.backoff) == (RecoveryAction.RESUME, True)
    assert all("429 Too Many Requests" in line for line in failure.evidence)
