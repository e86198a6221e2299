"""DatasetStagingOperator in its three modes, end to end, and the training jobs that mount the result.

Everything runs through the real SDKs over HTTP: oss2 against the OSS emulator, the AIWorkspace,
NAS and DLC SDKs against their emulators (one ``alibaba_cloud_default`` connection pointing at
all of them), the cncf Kubernetes hooks against the Kubernetes API fake. The operator is driven
as Airflow drives it: ``execute`` defers, the trigger's async generator runs to its event (the
emulators' manual clocks moved along meanwhile), ``execute_complete`` turns the event into the
task's return value.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kubernetes import client

from aliyun_training.operators.staging import HANDLE_KEY, DatasetStagingOperator
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.plan.models import RunPlan, StagingPlan
from aliyun_training.remote_runs import remote_run
from aliyun_training.seals import opened_state
from aliyun_training.stage_records import StagedDataset
from aliyun_training.staging.dataflow import DataFlowStager
from aliyun_training.staging.pod import PodStager
from aliyun_training.staging.registration import PaiDatasetRegistration, PvcRegistration
from aliyun_training.staging.volumes import CPFS_DRIVER, ensure_version_volume
from aliyun_training.triggers.remote_run import RemoteRunTrigger
from aliyun_training.validation import SpecError
from fakes.aiworkspace import AIWorkspaceEmulator
from fakes.base import ManualClock
from fakes.cloud import DLC_JOB_SETTINGS, arena_job, dlc_job, use_alibaba_connection
from fakes.dlc import DlcEmulator
from fakes.environment_files import resolve_configured
from fakes.kube import NS, kubernetes_fake
from fakes.kubernetes_fake import KubernetesFake, TrainingScript
from fakes.nas import NasDataFlowEmulator
from fakes.oss import OssEmulator
from tests.operator_harness import defer as defer_training
from tests.operator_harness import task_context

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

PROJECT_DIR = Path(__file__).resolve().parents[2]
AK, SK = "LTAI-staging-test", "staging-secret-value"
REGION = "cn-wulanchabu"
BUCKET = "ml-datasets"
VERSION = "2026-11-22"
SOURCE = f"oss://{BUCKET}/cifar10/{VERSION}/"
OBJECTS = {
    "train/data_batch_1.bin": b"\x01" * 3000,
    "train/data_batch_2.bin": b"\x02" * 2500,
    "test/test_batch.bin": b"\x03" * 1200,
    "batches.meta.txt": b"airplane\nautomobile\nbird\n",
}
WORKSPACE = "ws-1"
MOUNT_PATH = "/mnt/data/cifar10"
# Lingjun CPFS for the data flow, general-purpose CPFS (NFS) for ACK.
BMCPFS = "bmcpfs-0015abcd"
MOUNT_TARGET = "cpfs-0015abcd-vpc-0a1b2c.cn-wulanchabu.cpfs.aliyuncs.com"
DATA_FLOW = "df-194433a5be310001"
CPFS_SERVER = "cpfs-0123abcd.cn-wulanchabu.cpfs.aliyuncs.com"
K8S_CONN = "kubernetes_default"
#: What the training jobs that mount the staged dataset run.
JOB_COMMAND = "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK train.py --data $DATA_DIR"
IMAGE = "registry-vpc.cn-wulanchabu.aliyuncs.com/ml/aliyun-training:1.4.0"
T0 = 1_800_000_000.0


# -- the emulated account --------------------------------------------------------------------------


@dataclass
class Cloud:
    oss: OssEmulator
    workspace: AIWorkspaceEmulator
    nas: NasDataFlowEmulator
    dlc: DlcEmulator
    nas_clock: ManualClock
    filesystem: Path

    def upload(self, version: str = VERSION) -> None:
        for key, data in OBJECTS.items():
            self.oss.put(BUCKET, f"cifar10/{version}/{key}", data)

    def workspace_creates(self) -> int:
        return self.workspace.count("CreateDataset") + self.workspace.count("CreateDatasetVersion")


def _reader(oss: OssEmulator) -> Callable[[str, str], dict[str, bytes]]:
    """The NAS emulator's view of the bucket: the OSS emulator's store under the prefix."""

    def read(bucket: str, prefix: str) -> dict[str, bytes]:
        return {key[len(prefix) :]: oss.get(bucket, key) for key in oss.keys(bucket, prefix)}

    return read


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    keys = {AK: SK}
    filesystem = tmp_path / "bmcpfs"
    with OssEmulator(keys, region=REGION) as oss:
        clock = ManualClock(T0)
        with (
            AIWorkspaceEmulator(keys) as workspace,
            NasDataFlowEmulator(
                filesystem, _reader(oss), keys, pending_seconds=1.0, task_seconds=4.0, cancel_seconds=1.0
            ) as nas,
            DlcEmulator(keys) as dlc,
        ):
            nas.clock = clock
            nas.add_data_flow(
                BMCPFS, DATA_FLOW, file_system_path="/datasets/", source_storage=f"oss://{BUCKET}/"
            )
            endpoints = {
                "oss": oss.endpoint.removeprefix("http://"),
                "aiworkspace": workspace.endpoint,
                "nas": nas.endpoint,
                "dlc": dlc.endpoint,
            }
            use_alibaba_connection(
                monkeypatch,
                endpoints,
                AK,
                SK,
                retry={"max_attempts": 3, "base_delay": 0.01, "max_delay": 0.02},
            )
            yield Cloud(oss, workspace, nas, dlc, clock, filesystem)
            for emulator in (workspace, nas, dlc):
                assert emulator.internal_errors == []
        assert oss.internal_errors == [] and oss.unsupported == []


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, ManualClock(T0), conn_id=K8S_CONN) as fake:
        # The CPFS root volume the staging pod writes through.
        ensure_version_volume(
            K8S_CONN, namespace=NS, name="cpfs-root", kind="cpfs", server=CPFS_SERVER, path="/share"
        )
        yield fake


def core() -> client.CoreV1Api:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=K8S_CONN).core_v1_client


# -- driving the operator --------------------------------------------------------------------------


def deferred(op: DatasetStagingOperator, context: dict[str, Any]) -> RemoteRunTrigger:
    with pytest.raises(TaskDeferred) as raised:
        op.execute(context)
    assert raised.value.method_name == "execute_complete"
    trigger = raised.value.trigger
    assert isinstance(trigger, RemoteRunTrigger)
    assert (
        opened_state(context["task_state_store"][HANDLE_KEY], context["ti"], HANDLE_KEY)["handle"]
        == trigger.handle
    )
    return trigger


def fire(
    trigger: RemoteRunTrigger, clock: ManualClock, polls: Callable[[], int], step: float = 0.5
) -> dict[str, Any]:
    """Run the trigger (rebuilt from its serialized form, as the triggerer does) to its event.

    The emulator's clock moves ``step`` seconds after each poll the emulator saw (``polls`` counts
    them), so the trigger sees every stage of the run whatever the speed of this machine.
    """
    path, kwargs = trigger.serialize()
    assert path == "aliyun_training.triggers.remote_run.RemoteRunTrigger"
    rebuilt = RemoteRunTrigger(**json.loads(json.dumps(kwargs)))

    async def run() -> dict[str, Any]:
        async def first_event() -> dict[str, Any]:
            async for event in rebuilt.run():
                return event.payload
            raise AssertionError("the trigger finished without an event")

        task = asyncio.create_task(first_event())
        seen = polls()
        for _ in range(4000):
            if task.done():
                return task.result()
            if polls() > seen:
                seen = polls()
                clock.advance(step)
            await asyncio.sleep(0.002)
        task.cancel()
        raise AssertionError("the staging run never ended")

    return asyncio.run(run())


def pod_polls(kube: KubernetesFake, trigger: RemoteRunTrigger) -> Callable[[], int]:
    return lambda: kube.count("GET", f"/pods/{trigger.handle['pod']}")


def nas_polls(cloud: Cloud) -> Callable[[], int]:
    return lambda: cloud.nas.count("DescribeDataFlowTasks")


# -- direct mode + DLC -------------------------------------------------------------------------------


def direct_operator(target_root: Path) -> DatasetStagingOperator:
    registration = PaiDatasetRegistration(
        workspace_id=WORKSPACE,
        name="cifar10",
        uri_kind="cpfs",
        file_system_id="cpfs-0123abcd",
        protocol_service_id="ptc-0456",
        export_id="exp-0789",
        cpfs_path="/datasets/cifar10",
        provider_type="Lingjun",
        mount_path=MOUNT_PATH,
    )
    return DatasetStagingOperator(
        task_id="stage_dataset",
        staging=StagingPlan(
            mode="direct",
            source_uri=SOURCE,
            target_root=str(target_root),
            version=VERSION,
            registration=registration,
        ),
        workers=4,
    )


def test_direct_staging_from_oss_registers_a_pai_dataset_version_once(cloud: Cloud, tmp_path: Path) -> None:
    cloud.upload()
    target_root = tmp_path / "cpfs" / "datasets" / "cifar10"

    staged = direct_operator(target_root).execute(task_context())

    assert staged["mode"] == "direct" and staged["version"] == VERSION
    assert staged["files"] == len(OBJECTS) and staged["bytes"] == sum(map(len, OBJECTS.values()))
    assert staged["transferred_files"] == len(OBJECTS) and staged["checksum"]
    assert staged["uri"] == str(target_root / VERSION) and staged["source_uri"] == SOURCE
    for key, data in OBJECTS.items():
        assert (target_root / VERSION / key).read_bytes() == data
    dataset = cloud.workspace.dataset_named("cifar10", WORKSPACE)
    assert dataset is not None and staged["pai_dataset_id"] == dataset.dataset_id
    (version,) = dataset.versions
    assert staged["pai_dataset_version"] == version.version_name
    assert version.uri == f"cpfs://cpfs-0123abcd.{REGION}/ptc-0456/exp-0789/datasets/cifar10/{VERSION}/"
    assert json.loads(version.options or "{}") == {"mountPath": MOUNT_PATH}
    creates, gets = cloud.workspace_creates(), cloud.oss.count("GetObject")

    again = direct_operator(target_root).execute(task_context())

    assert again["transferred_files"] == 0 and again["transferred_bytes"] == 0
    assert cloud.oss.count("GetObject") == gets, "an unchanged version is not downloaded again"
    assert cloud.workspace_creates() == creates, "no second dataset or version is created"
    assert (again["pai_dataset_id"], again["pai_dataset_version"]) == (
        staged["pai_dataset_id"],
        staged["pai_dataset_version"],
    )
    assert again["checksum"] == staged["checksum"]
    StagedDataset.model_validate(again)


def dlc_spec() -> dict[str, Any]:
    return dlc_job(command=JOB_COMMAND, env={"EPOCHS": "3"}, output_dir="/mnt/output/run-1")


@pytest.mark.slow
def test_a_dlc_job_mounts_the_staged_pai_dataset_version_at_the_mount_path(
    cloud: Cloud, tmp_path: Path
) -> None:
    cloud.upload()
    staged = direct_operator(tmp_path / "cpfs" / "datasets" / "cifar10").execute(task_context())
    train = TrainingJobOperator(
        task_id="train",
        job={
            "spec": dlc_spec(),
            "backend_config": {"workspace_id": WORKSPACE, "job_settings": DLC_JOB_SETTINGS},
            "dataset_mount_path": MOUNT_PATH,
        },
        dataset=staged,
        poll_interval=0.05,
    )

    defer_training(train, task_context())

    (create,) = cloud.dlc.requests_for("CreateJob")
    body = create.body
    assert body["DataSources"] == [
        {
            "DataSourceId": staged["pai_dataset_id"],
            "DataSourceVersion": staged["pai_dataset_version"],
            "MountPath": MOUNT_PATH,
            "MountAccess": "RO",
        }
    ]
    assert body["Envs"]["DATA_DIR"] == MOUNT_PATH and body["Envs"]["EPOCHS"] == "3"


# -- pod mode + ACK ----------------------------------------------------------------------------------

PROGRESS = [
    "2026-11-22 10:00:01,000 INFO Staged 2/4 files, 0.0/0.0 MB, 1.0 MB/s, ETA 1 s",
    "2026-11-22 10:00:02,000 INFO Staged 4/4 files, 0.0/0.0 MB, 1.0 MB/s, ETA 0 s",
    f"2026-11-22 10:00:02,100 INFO Published /mnt/cpfs/datasets/cifar10/{VERSION} (4 files, 4 copied)",
]


def staged_line() -> str:
    record = StagedDataset(
        uri=f"/mnt/cpfs/datasets/cifar10/{VERSION}",
        version=VERSION,
        files=len(OBJECTS),
        bytes=sum(map(len, OBJECTS.values())),
        manifest_uri=f"/mnt/cpfs/datasets/cifar10/{VERSION}/_manifest.json",
        checksum="ab" * 32,
        transferred_files=len(OBJECTS),
        transferred_bytes=sum(map(len, OBJECTS.values())),
        seconds=2.1,
        source_uri=SOURCE,
    )
    return json.dumps(record.model_dump(mode="json"))


def pod_remote(**overrides: Any) -> dict[str, Any]:
    return {
        "kubernetes_conn_id": K8S_CONN,
        "namespace": NS,
        "image": IMAGE,
        "staging_pvc": "cpfs-root",
        "dataset": "cifar10",
        "region": REGION,
        "workers": 4,
        **overrides,
    }


def pvc_register() -> dict[str, Any]:
    return {
        "kind": "pvc",
        "kubernetes_conn_id": K8S_CONN,
        "namespace": NS,
        "dataset": "cifar10",
        "volume_kind": "cpfs",
        "server": CPFS_SERVER,
        "cpfs_path": "/share/datasets/cifar10",
    }


def pod_operator() -> DatasetStagingOperator:
    return DatasetStagingOperator(
        task_id="stage_dataset",
        staging=StagingPlan(
            mode="pod",
            source_uri=SOURCE,
            target_root="/mnt/cpfs/datasets/cifar10",
            version=VERSION,
            remote=pod_remote(),
            registration=PvcRegistration.model_validate(pvc_register()),
        ),
        poll_interval=0.01,
    )


def staging_pods() -> list[str]:
    return [
        p.metadata.name for p in core().list_namespaced_pod(NS).items if p.metadata.name.startswith("stage-")
    ]


def stage_by_pod(kube: KubernetesFake) -> dict[str, Any]:
    kube.script_for(
        "stage-",
        TrainingScript(phases=[("Created", 1.0), ("Running", 3.0)], log_lines=[*PROGRESS, staged_line()]),
    )
    op, context = pod_operator(), task_context()
    trigger = deferred(op, context)
    assert trigger.mode == "pod" and trigger.handle["pod"] in staging_pods()
    event = fire(trigger, kube.clock, pod_polls(kube, trigger))
    assert event["status"] == "succeeded", event
    return op.execute_complete(context, event)


@pytest.mark.slow
def test_pod_staging_defers_then_registers_the_version_as_its_own_bound_claim(
    kube: KubernetesFake, capfd: pytest.CaptureFixture[str]
) -> None:
    staged = stage_by_pod(kube)

    assert staged["mode"] == "pod" and staged["version"] == VERSION
    assert staged["files"] == len(OBJECTS) and staged["uri"] == f"/mnt/cpfs/datasets/cifar10/{VERSION}"
    assert staged["pvc"] == f"cifar10-{VERSION}"
    logged = capfd.readouterr().out
    assert any(line in logged for line in PROGRESS), "pod progress is logged while deferred"
    volume = core().read_persistent_volume(staged["pvc"])
    assert volume.spec.csi.driver == CPFS_DRIVER
    assert volume.spec.csi.volume_attributes["path"] == f"/share/datasets/cifar10/{VERSION}"
    assert volume.spec.csi.volume_attributes["server"] == CPFS_SERVER
    assert volume.spec.claim_ref.name == staged["pvc"] and volume.spec.claim_ref.namespace == NS
    claim = core().read_namespaced_persistent_volume_claim(staged["pvc"], NS)
    assert claim.status.phase == "Bound" and claim.spec.volume_name == staged["pvc"]
    assert staging_pods() == [], "the staging pod is deleted once its result is read"


@pytest.mark.slow
def test_a_failing_staging_pod_fails_the_task_with_its_error_line(kube: KubernetesFake) -> None:
    error = f"error: source {SOURCE} changed while it was copied (fix: retry once it is complete)"
    kube.script_for(
        "stage-",
        TrainingScript(
            phases=[("Created", 1.0), ("Running", 2.0)],
            outcome="Failed",
            exit_code=1,
            log_lines=[PROGRESS[0], error],
        ),
    )
    op, context = pod_operator(), task_context()
    trigger = deferred(op, context)
    event = fire(trigger, kube.clock, pod_polls(kube, trigger))
    assert event["status"] == "failed"

    with pytest.raises(AirflowException) as failure:
        op.execute_complete(context, event)

    message = str(failure.value)
    assert f"pod staging of {VERSION} failed" in message
    assert "exited with code 1" in message and error in message
    volumes = [pv.metadata.name for pv in core().list_persistent_volume().items]
    assert volumes == ["cpfs-root"], "nothing is registered for a failed staging"


@pytest.mark.slow
def test_an_ack_job_mounts_the_staged_claim_read_only_at_the_mount_path(kube: KubernetesFake) -> None:
    staged = stage_by_pod(kube)
    train = TrainingJobOperator(
        task_id="train",
        job={
            "spec": arena_job(command=JOB_COMMAND, output_dir="/mnt/data/outputs/run-1"),
            "backend_config": {"kubernetes_conn_id": K8S_CONN, "namespace": NS},
            "dataset_mount_path": MOUNT_PATH,
        },
        dataset=staged,
        poll_interval=0.05,
    )

    defer_training(train, task_context())

    hook_client = client.CustomObjectsApi(core().api_client)
    (job,) = hook_client.list_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs")["items"]
    for role, replica in job["spec"]["pytorchReplicaSpecs"].items():
        pod = replica["template"]["spec"]
        claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert claims == [{"name": staged["pvc"], "persistentVolumeClaim": {"claimName": staged["pvc"]}}], (
            role
        )
        (container,) = pod["containers"]
        mounts = [m for m in container["volumeMounts"] if m["name"] == staged["pvc"]]
        assert mounts == [{"name": staged["pvc"], "mountPath": MOUNT_PATH, "readOnly": True}], role
        assert {"name": "DATA_DIR", "value": MOUNT_PATH} in container["env"], role


# -- dataflow mode -----------------------------------------------------------------------------------


def dataflow_register() -> dict[str, Any]:
    return {
        "kind": "pai_dataset",
        "workspace_id": WORKSPACE,
        "name": "cifar10",
        "uri_kind": "bmcpfs",
        "file_system_id": BMCPFS,
        "mount_target": MOUNT_TARGET,
        "cpfs_path": "/datasets/cifar10",
        "provider_type": "Lingjun",
        "mount_path": MOUNT_PATH,
    }


def dataflow_operator() -> DatasetStagingOperator:
    return DatasetStagingOperator(
        task_id="stage_dataset",
        staging=StagingPlan(
            mode="dataflow",
            source_uri=SOURCE,
            target_root="/datasets/cifar10",
            version=VERSION,
            remote={"file_system_id": BMCPFS, "data_flow_id": DATA_FLOW},
            registration=PaiDatasetRegistration.model_validate(dataflow_register()),
        ),
        poll_interval=0.01,
    )


@pytest.mark.slow
def test_a_data_flow_import_is_verified_and_registered_as_a_pai_dataset_version(
    cloud: Cloud, capfd: pytest.CaptureFixture[str]
) -> None:
    cloud.upload()
    op, context = dataflow_operator(), task_context()
    trigger = deferred(op, context)
    assert trigger.mode == "dataflow" and trigger.handle["files"] == len(OBJECTS)

    event = fire(trigger, cloud.nas_clock, nas_polls(cloud))
    assert event["status"] == "succeeded", event
    staged = op.execute_complete(context, event)

    assert staged["mode"] == "dataflow" and staged["version"] == VERSION
    assert staged["files"] == len(OBJECTS) and staged["bytes"] == sum(map(len, OBJECTS.values()))
    assert staged["uri"] == f"/datasets/cifar10/{VERSION}" and staged["source_uri"] == SOURCE
    assert f"Data flow task {trigger.handle['task_id']} Executing" in capfd.readouterr().out
    for key, data in OBJECTS.items():
        assert (cloud.filesystem / "datasets" / "cifar10" / VERSION / key).read_bytes() == data
    (task,) = cloud.nas.tasks.values()
    assert (task.directory, task.dst_directory) == (f"/cifar10/{VERSION}/", f"/cifar10/{VERSION}/")
    assert task.conflict_policy == "OVERWRITE_EXISTING"
    dataset = cloud.workspace.dataset_named("cifar10", WORKSPACE)
    assert dataset is not None and staged["pai_dataset_id"] == dataset.dataset_id
    (version,) = dataset.versions
    assert staged["pai_dataset_version"] == version.version_name
    assert version.uri == f"bmcpfs://{MOUNT_TARGET}/datasets/cifar10/{VERSION}/"
    assert version.data_source_type == "BMCPFS"


def test_a_source_replaced_during_the_import_fails_the_task(cloud: Cloud) -> None:
    cloud.upload()
    op, context = dataflow_operator(), task_context()
    trigger = deferred(op, context)
    cloud.nas_clock.advance(1.5)
    cloud.nas.advance()  # the task is executing: it has read the source
    (task,) = cloud.nas.tasks.values()
    assert task.status == "Executing"
    key = f"cifar10/{VERSION}/train/data_batch_1.bin"
    cloud.oss.replace(BUCKET, key, b"\x09" * len(OBJECTS["train/data_batch_1.bin"]))

    event = fire(trigger, cloud.nas_clock, nas_polls(cloud))
    assert event["status"] == "succeeded"
    with pytest.raises(AirflowException, match="changed during the import"):
        op.execute_complete(context, event)
    assert cloud.workspace.dataset_named("cifar10", WORKSPACE) is None, "a mixed copy is never registered"


@pytest.mark.slow
def test_a_failed_import_task_fails_the_task_with_the_service_error(cloud: Cloud) -> None:
    cloud.upload()
    reason = "Failed to read the source storage: AccessDenied"
    cloud.nas.fail_next_task(reason)
    op, context = dataflow_operator(), task_context()

    event = fire(deferred(op, context), cloud.nas_clock, nas_polls(cloud))

    assert event["status"] == "failed"
    with pytest.raises(AirflowException) as failure:
        op.execute_complete(context, event)
    assert f"dataflow staging of {VERSION} failed" in str(failure.value) and reason in str(failure.value)


@pytest.mark.slow
def test_resubmitting_the_same_import_answers_the_same_task(cloud: Cloud) -> None:
    cloud.upload()
    first = deferred(dataflow_operator(), task_context())
    retry = deferred(dataflow_operator(), task_context())

    assert retry.handle == first.handle
    assert cloud.nas.count("CreateDataFlowTask") == 2 and len(cloud.nas.tasks) == 1
    tokens = {r.query["ClientToken"] for r in cloud.nas.requests_for("CreateDataFlowTask")}
    assert len(tokens) == 1


@pytest.mark.slow
def test_a_retry_after_a_failed_import_starts_a_new_task_and_succeeds(cloud: Cloud) -> None:
    cloud.upload()
    cloud.nas.fail_next_task("Failed to read the source storage: AccessDenied")
    failed = fire(deferred(dataflow_operator(), task_context()), cloud.nas_clock, nas_polls(cloud))
    assert failed["status"] == "failed"

    op, context = dataflow_operator(), task_context()
    retry = deferred(op, context)
    staged = op.execute_complete(context, fire(retry, cloud.nas_clock, nas_polls(cloud)))

    assert retry.handle["task_id"] != failed["handle"]["task_id"]
    tokens = [r.query["ClientToken"] for r in cloud.nas.requests_for("CreateDataFlowTask")]
    assert tokens[-1] == tokens[0] + "-r1" and len(set(tokens)) == 2
    assert staged["mode"] == "dataflow" and staged["files"] == staged["transferred_files"]


# -- killed while deferred -------------------------------------------------------------------------


def test_a_staging_pod_that_outlives_the_staging_timeout_is_stopped(kube: KubernetesFake) -> None:
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout

    kube.script_for(
        "stage-", TrainingScript(phases=[("Created", 1.0), ("Running", 60.0)], log_lines=PROGRESS)
    )
    op, context = pod_operator(), task_context()
    trigger = deferred(op, context)

    with pytest.raises(TaskDeferralTimeout):
        op.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, context)

    assert staging_pods() == []
    assert kube.count("DELETE", f"/pods/{trigger.handle['pod']}") == 1


def test_killing_a_deferred_pod_staging_deletes_the_pod(kube: KubernetesFake) -> None:
    kube.script_for(
        "stage-", TrainingScript(phases=[("Created", 1.0), ("Running", 60.0)], log_lines=PROGRESS)
    )
    trigger = deferred(pod_operator(), task_context())
    assert staging_pods() == [trigger.handle["pod"]]

    asyncio.run(trigger.on_kill())

    assert staging_pods() == []
    assert kube.count("DELETE", f"/pods/{trigger.handle['pod']}") == 1


@pytest.mark.slow
def test_killing_a_deferred_import_cancels_the_task(cloud: Cloud) -> None:
    cloud.upload()
    trigger = deferred(dataflow_operator(), task_context())

    asyncio.run(trigger.on_kill())

    (cancel,) = cloud.nas.requests_for("CancelDataFlowTask")
    assert cancel.query["TaskId"] == trigger.handle["task_id"]
    cloud.nas_clock.advance(2)
    cloud.nas.advance()
    assert cloud.nas.tasks[trigger.handle["task_id"]].status == "Canceled"


# -- environment files ----------------------------------------------------------------------------


DLC_CONFIGURED = {
    "quota_id": "quota1ab2",
    "gpu_type": "GU8TF",
    "image": "registry.example.com/train:1",
    "workspace_id": WORKSPACE,
}
# No data_pvc: with a staging block the job mounts each staged version's own claim.
ARENA_CONFIGURED = {"image": "registry.example.com/train:1", "namespace": NS}


def resolve(tmp_path: Path, backend: str, environment: dict[str, Any]) -> RunPlan:
    """resolve_run of an 8-GPU run of VERSION on ``backend`` whose environment file holds ``environment``."""
    return resolve_configured(
        tmp_path, environment, VERSION, backend=backend, gpus_per_node=8, dataset_version=VERSION
    )


def staging_operator(run: RunPlan) -> DatasetStagingOperator:
    assert run.staging is not None
    return DatasetStagingOperator(task_id="stage_dataset", staging=run.staging, poll_interval=0.01)


@pytest.mark.slow
def test_a_dlc_environment_with_a_data_flow_stages_and_registers_end_to_end(
    cloud: Cloud, tmp_path: Path
) -> None:
    cloud.upload()
    staging = {
        "mode": "dataflow",
        "source_uri": f"oss://{BUCKET}/{{dataset}}/{{version}}/",
        "target_root": "/datasets/cifar10",
        "file_system_id": BMCPFS,
        "data_flow_id": DATA_FLOW,
        "uri_kind": "bmcpfs",
        "mount_target": MOUNT_TARGET,
    }
    run = resolve(tmp_path, "dlc", {**DLC_CONFIGURED, "staging": staging})
    assert run.staging is not None and (run.staging.mode, run.staging.source_uri) == ("dataflow", SOURCE)
    assert run.job.dataset_mount_path == MOUNT_PATH
    op, context = staging_operator(run), task_context()
    assert isinstance(remote_run("staging", op.plan.mode, op.plan.remote_config()), DataFlowStager)

    event = fire(deferred(op, context), cloud.nas_clock, nas_polls(cloud))
    staged = op.execute_complete(context, event)

    assert staged["mode"] == "dataflow" and staged["pai_dataset_id"] and staged["pai_dataset_version"]
    (version,) = cloud.workspace.dataset_named("cifar10", WORKSPACE).versions
    assert version.uri.endswith(f".cpfs.aliyuncs.com/datasets/cifar10/{VERSION}/")
    assert json.loads(version.options or "{}") == {"mountPath": MOUNT_PATH}


@pytest.mark.slow
def test_an_arena_environment_with_a_staging_pod_stages_and_registers_end_to_end(
    kube: KubernetesFake, tmp_path: Path
) -> None:
    staging = {
        "mode": "pod",
        "source_uri": f"oss://{BUCKET}/{{dataset}}/{{version}}/",
        "target_root": "/mnt/cpfs/datasets/cifar10",
        "cpfs_path": "/share/datasets/cifar10",
        "staging_pvc": "cpfs-root",
        "image": IMAGE,
        "region": REGION,
        "volume_kind": "cpfs",
        "server": CPFS_SERVER,
    }
    run = resolve(tmp_path, "arena", {**ARENA_CONFIGURED, "staging": staging})
    assert run.staging is not None and (run.staging.mode, run.staging.source_uri) == ("pod", SOURCE)
    op, context = staging_operator(run), task_context()
    stager = remote_run("staging", op.plan.mode, op.plan.remote_config())
    assert isinstance(stager, PodStager) and stager.settings.staging_pvc == "cpfs-root"
    kube.script_for(
        "stage-",
        TrainingScript(phases=[("Created", 1.0), ("Running", 2.0)], log_lines=[*PROGRESS, staged_line()]),
    )

    trigger = deferred(op, context)
    event = fire(trigger, kube.clock, pod_polls(kube, trigger))
    staged = op.execute_complete(context, event)

    assert staged["mode"] == "pod" and staged["pvc"] == f"cifar10-{VERSION}"
    volume = core().read_persistent_volume(staged["pvc"])
    assert volume.spec.csi.volume_attributes["path"] == f"/share/datasets/cifar10/{VERSION}"
    assert run.job.dataset_mount_path == MOUNT_PATH


@pytest.mark.parametrize(
    ("backend", "staging", "field"),
    [
        ("dlc", {"mode": "pod"}, "staging.mode"),
        ("arena", {"mode": "dataflow"}, "staging.mode"),
        ("dlc", {"mode": "dataflow", "source_uri": "/data/cifar10/{version}/"}, "staging.source_uri"),
        ("arena", {"mode": "pod", "source_uri": "s3://b/{version}/"}, "staging.source_uri"),
        (
            "dlc",
            {"mode": "direct", "source_uri": "oss://ml-bucket/{version}/", "target_root": "cpfs/x"},
            "staging.target_root",
        ),
        (
            "arena",
            {"mode": "pod", "source_uri": "oss://ml-bucket/{version}/", "target_root": "mnt/x"},
            "staging.target_root",
        ),
        # Settings the copy or the registration needs fail at configure, not after the copy.
        ("dlc", {"mode": "direct"}, "staging.cpfs_path"),
        (
            "dlc",
            {"mode": "direct", "cpfs_path": "/datasets/cifar10", "file_system_id": BMCPFS},
            "staging.mount_target",
        ),
        (
            "dlc",
            {
                "mode": "direct",
                "cpfs_path": "/datasets/cifar10",
                "uri_kind": "cpfs",
                "file_system_id": "cpfs-1",
            },
            "staging.protocol_service_id",
        ),
        ("dlc", {"mode": "dataflow", "file_system_id": BMCPFS}, "data_flow_id"),
        ("arena", {"mode": "pod", "cpfs_path": "/share/datasets/cifar10"}, "image"),
        (
            "arena",
            {"mode": "direct", "cpfs_path": "/share/datasets/cifar10", "volume_kind": "cpfs"},
            "server",
        ),
    ],
)
def test_a_bad_staging_block_fails_naming_the_field(
    tmp_path: Path, backend: str, staging: dict[str, Any], field: str
) -> None:
    configured = DLC_CONFIGURED if backend == "dlc" else ARENA_CONFIGURED
    block = {
        "source_uri": "oss://ml-bucket/{dataset}/{version}/",
        "target_root": "/mnt/cpfs/datasets/cifar10",
        **staging,
    }
    with pytest.raises(SpecError, match=rf"(^|\s){re.escape(field)}:"):
        resolve(tmp_path, backend, {**configured, "staging": block})
