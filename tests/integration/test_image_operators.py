"""The image stages as a DAG runs them: ImageBuildOperator, ImageVerifyOperator, RdmaBandwidthOperator.

Everything goes through the real clients over HTTP: ``requests`` against the registry emulator,
the cncf Kubernetes hooks against the Kubernetes API fake (kaniko pods, PyTorchJobs), the cr and
pai-dlc SDKs against the ACR and DLC emulators. The operators are driven as Airflow drives them:
``execute`` defers, the trigger (rebuilt from its serialized form, as the triggerer does) runs to
its event after the emulator's manual clock moved past the scripted run, and ``execute_complete``
turns the event into the task's return value or error.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from aliyun_training.image.context import build_context, image_tag
from aliyun_training.image.jobs import check_command
from aliyun_training.operators.bandwidth import RdmaBandwidthOperator
from aliyun_training.operators.image import BUILD_HANDLE_KEY, ImageBuildOperator, ImageVerifyOperator
from aliyun_training.operators.training import HANDLE_KEY
from aliyun_training.plan.models import ImagePlan
from aliyun_training.runtime_probe import BANDWIDTH_TOOLS
from aliyun_training.seals import opened_state
from aliyun_training.stage_records import BandwidthCheck, BuiltImage, ImageRef
from aliyun_training.triggers.remote_run import RemoteRunTrigger
from aliyun_training.triggers.training import TrainingJobTrigger
from fakes.acr import AcrEmulator
from fakes.base import ManualClock
from fakes.cloud import DLC_JOB_SETTINGS, arena_job, dlc_job, use_alibaba_connection
from fakes.dlc import DlcEmulator, JobScript
from fakes.kube import NS, kubernetes_fake
from fakes.kubernetes_fake import KubernetesFake, TrainingScript
from fakes.registry import RegistryEmulator
from tests.operator_harness import task_context

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow.triggers.base import BaseTrigger
    from kubernetes import client

PROJECT_DIR = Path(__file__).resolve().parents[2]
CONTEXT_DIR = PROJECT_DIR / "include" / "docker"
DATA = PROJECT_DIR / "tests" / "data"

# -- the registry and its connection ---------------------------------------------------------------
REGISTRY_CONN = "image_registry"
LOGIN = "robot$ml-push"
PASSWORD = "Reg1stry-Pa55word-n0t-f0r-l0gs"
BUILD_ARGS = {"BASE_IMAGE": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"}
DIGEST = "sha256:" + "4e" * 32

# -- ACK -----------------------------------------------------------------------------------------
K8S_CONN = "kubernetes_default"
PUSH_SECRET = "acr-push"

# -- Alibaba Cloud -------------------------------------------------------------------------------
AK, SK = "LTAI-image-stages", "image-stages-secret-value"
INSTANCE = "cri-emulated0001"
#: ACR emulator: pending 2 s + 9 steps x 5 s + push 5 s.
ACR_BUILD_SECONDS = 52

VERIFIED_IMAGE = "myinst-registry-vpc.cn-wulanchabu.cr.aliyuncs.com/ml/train:3f9a0c1d2e4b5a67"
SPEC_IMAGE = "registry-vpc.cn-wulanchabu.aliyuncs.com/ml/aliyun-training:1.4.0"
GOOD_PROBE = {
    "python": "3.11.10",
    "torch": "2.5.1",
    "cuda": "12.4",
    "nccl": "2.21.5",
    "gpus": 1,
    "rdma_libs": ["ibverbs", "rdmacm", "mlx5"],
    "ibv_devices": ["mlx5_bond_0", "mlx5_bond_1"],
}
KANIKO_FAILURE_LOG = [
    "INFO[0000] Retrieving image manifest pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "INFO[0002] Building stage 'pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime' [idx: '0', base-idx: '-1']",
    "INFO[0012] RUN apt-get install -y nic-lib-rdma-core",
    "INFO[0012] Running: [/bin/sh -c apt-get install -y nic-lib-rdma-core]",
    "E: Unable to locate package nic-lib-rdma-core",
    "error building image: error building stage: failed to execute command: waiting for process to exit: "
    "exit status 100",
]


def sample(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def expected_tag(build_args: dict[str, str] = BUILD_ARGS) -> str:
    """The content-addressed tag, computed here from the same inputs the operator reads."""
    return image_tag(build_context(CONTEXT_DIR), build_args)


def secret_forms() -> list[str]:
    return [PASSWORD, base64.b64encode(f"{LOGIN}:{PASSWORD}".encode()).decode()]


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryEmulator]:
    with RegistryEmulator(users={LOGIN: PASSWORD}) as emulator:
        host, _, port = emulator.host.partition(":")
        connection = {"conn_type": "generic", "host": host, "port": int(port), "login": LOGIN}
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{REGISTRY_CONN.upper()}", json.dumps({**connection, "password": PASSWORD})
        )
        yield emulator


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, ManualClock(), conn_id=K8S_CONN) as fake:
        docker_config = json.dumps({"auths": {"registry": {"auth": "cHVzaDpwdXNo"}}})
        core().create_namespaced_secret(
            NS,
            {
                "metadata": {"name": PUSH_SECRET},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": docker_config},
            },
        )
        yield fake


@dataclass
class Acr:
    emulator: AcrEmulator
    repo_id: str
    rule_id: str


@pytest.fixture
def acr(registry: RegistryEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Acr]:
    """ACR Enterprise whose registry is the registry emulator: the tag check and the build agree."""
    with AcrEmulator({AK: SK}, instance_id=INSTANCE, registry=registry.host) as emulator:
        emulator.clock = ManualClock()
        use_alibaba_connection(
            monkeypatch, {"cr": emulator.endpoint}, AK, SK, retry={"max_attempts": 3, "base_delay": 0.001}
        )
        repo = emulator.add_repository("ml", "train")
        rule = emulator.add_build_rule(repo.repo_id, image_tag="latest")
        yield Acr(emulator, repo.repo_id, rule.rule_id)
        assert emulator.internal_errors == []


@pytest.fixture
def dlc(monkeypatch: pytest.MonkeyPatch) -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        emulator.clock = ManualClock()
        use_alibaba_connection(
            monkeypatch, {"dlc": emulator.endpoint}, AK, SK, retry={"max_attempts": 3, "base_delay": 0.001}
        )
        yield emulator
        assert emulator.internal_errors == []


def core() -> client.CoreV1Api:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=K8S_CONN).core_v1_client


def custom_objects(plural: str) -> list[dict[str, Any]]:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    api = KubernetesHook(conn_id=K8S_CONN).custom_object_client
    version = "v2beta1" if plural == "mpijobs" else "v1"
    return api.list_namespaced_custom_object("kubeflow.org", version, NS, plural)["items"]


def posted(fake: KubernetesFake, plural: str) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.method == "POST" and r.path.endswith(f"/{plural}")]


# -- driving the operators -----------------------------------------------------------------------


def deferred(op: Any, context: dict[str, Any]) -> Any:
    """``execute`` must defer to ``execute_complete``: the trigger it handed to the triggerer."""
    with pytest.raises(TaskDeferred) as raised:
        op.execute(context)
    assert raised.value.method_name == "execute_complete"
    return raised.value.trigger


def fire(trigger: BaseTrigger) -> dict[str, Any]:
    """The first event of the trigger rebuilt from ``serialize()`` (JSON round trip), as a triggerer."""
    path, kwargs = trigger.serialize()
    assert path == f"{type(trigger).__module__}.{type(trigger).__qualname__}"
    rebuilt = type(trigger)(**json.loads(json.dumps(kwargs)))

    async def first() -> dict[str, Any]:
        async for event in rebuilt.run():
            return event.payload
        raise AssertionError(f"{path} finished without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout=20))


def build_operator(**plan: Any) -> ImageBuildOperator:
    """The build stage of a plan with these ImagePlan fields (``mode=""``: no build)."""
    plan = {"mode": plan.pop("mode") or None, **plan} if "mode" in plan else plan
    return ImageBuildOperator(
        task_id="build_image",
        build=ImagePlan(
            **{
                "context_dir": str(CONTEXT_DIR),
                "build_args": BUILD_ARGS,
                "registry_conn_id": REGISTRY_CONN,
                **plan,
            }
        ),
        poll_interval=0.01,
    )


def kaniko_operator(registry: RegistryEmulator, **overrides: Any) -> ImageBuildOperator:
    builder = {"kubernetes_conn_id": K8S_CONN, "namespace": NS, "registry_secret": PUSH_SECRET}
    return build_operator(repository=f"{registry.host}/ml/train", mode="kaniko", builder=builder, **overrides)


def acr_operator(registry: RegistryEmulator, acr: Acr, **overrides: Any) -> ImageBuildOperator:
    builder = {"instance_id": INSTANCE, "repo_id": acr.repo_id, "build_rule_id": acr.rule_id}
    return build_operator(repository=f"{registry.host}/ml/train", mode="acr", builder=builder, **overrides)


def kaniko_build(lines: list[str] | None = None, **outcome: Any) -> TrainingScript:
    return TrainingScript(
        phases=[("Created", 1.0), ("Running", 5.0)],
        log_lines=lines or ["INFO[0000] Retrieving image manifest", f"INFO[0047] Pushed {DIGEST}"],
        **outcome,
    )


# -- ImageBuildOperator --------------------------------------------------------------------------


def kube_objects(kind: str) -> list[str]:
    """Names of the pods or ConfigMaps the cluster still holds in the test namespace."""
    listed = core().list_namespaced_pod(NS) if kind == "pods" else core().list_namespaced_config_map(NS)
    return [item.metadata.name for item in listed.items]


@pytest.mark.parametrize("mode", ["kaniko", "acr"])
def test_an_existing_tag_is_returned_with_the_registrys_digest_and_nothing_is_built(
    mode: str, registry: RegistryEmulator, kube: KubernetesFake, acr: Acr
) -> None:
    tag = expected_tag()
    digest = registry.put_manifest("ml/train", tag)
    op = kaniko_operator(registry) if mode == "kaniko" else acr_operator(registry, acr)
    ctx = task_context()

    result = op.execute(ctx)

    assert result == ImageRef(
        uri=f"{registry.host}/ml/train:{tag}", digest=digest, tag=tag, source="existing"
    ).model_dump(mode="json")
    assert registry.count("manifest", "HEAD") >= 1
    assert posted(kube, "pods") == [] and posted(kube, "configmaps") == []
    assert acr.emulator.count("CreateBuildRecordByRule") == 0 and acr.emulator.requests == []
    assert BUILD_HANDLE_KEY not in ctx["task_state_store"]


def test_the_tag_changes_with_the_build_args(registry: RegistryEmulator) -> None:
    registry.put_manifest("ml/train", expected_tag())
    other_args = {"BASE_IMAGE": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"}
    other = expected_tag(other_args)
    assert other != expected_tag()
    registry.put_manifest("ml/train", other)

    result = build_operator(
        repository=f"{registry.host}/ml/train", mode="kaniko", build_args=other_args
    ).execute(task_context())

    assert result["tag"] == other and result["uri"].endswith(f"/ml/train:{other}")


@pytest.mark.slow
def test_a_missing_tag_is_built_by_a_kaniko_pod_that_pushes_it(
    registry: RegistryEmulator, kube: KubernetesFake
) -> None:
    tag = expected_tag()
    kube.default_script = kaniko_build(termination_message=DIGEST)
    op, ctx = kaniko_operator(registry), task_context()

    trigger = deferred(op, ctx)

    assert isinstance(trigger, RemoteRunTrigger)
    assert (trigger.kind, trigger.mode) == ("image", "kaniko")
    assert (
        opened_state(ctx["task_state_store"][BUILD_HANDLE_KEY], ctx["ti"], BUILD_HANDLE_KEY)["handle"]
        == trigger.handle
    )
    (pod,) = posted(kube, "pods")
    (container,) = pod["spec"]["containers"]
    assert f"--destination={registry.host}/ml/train:{tag}" in container["args"]
    assert f"--build-arg=BASE_IMAGE={BUILD_ARGS['BASE_IMAGE']}" in container["args"]
    (config_map,) = posted(kube, "configmaps")
    assert set(config_map["data"]) == {"Dockerfile", "check_image.py"}
    assert config_map["data"]["Dockerfile"] == (CONTEXT_DIR / "Dockerfile").read_text()

    kube.clock.advance(10)  # type: ignore[attr-defined]
    event = fire(trigger)

    assert event["status"] == "succeeded" and event["handle"] == trigger.handle
    built = op.execute_complete(ctx, event)
    assert (built["source"], built["digest"], built["tag"]) == ("built", DIGEST, tag)
    assert built["uri"] == f"{registry.host}/ml/train:{tag}"
    assert not kube_objects("pods") and not kube_objects("configmaps"), "the build pod cleans up after itself"


def test_a_build_that_outlives_the_build_timeout_is_stopped(
    registry: RegistryEmulator, kube: KubernetesFake
) -> None:
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout

    kube.default_script = kaniko_build(termination_message=DIGEST)
    op, ctx = kaniko_operator(registry), task_context()
    deferred(op, ctx)
    assert kube_objects("pods") and kube_objects("configmaps")

    with pytest.raises(TaskDeferralTimeout):
        op.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, ctx)

    assert not kube_objects("pods") and not kube_objects("configmaps"), (
        "the build pod and its context are gone"
    )


@pytest.mark.slow
@pytest.mark.parametrize("force", [True, "true"])
def test_force_rebuild_builds_even_though_the_tag_exists(
    registry: RegistryEmulator, kube: KubernetesFake, force: Any
) -> None:
    registry.put_manifest("ml/train", expected_tag())
    kube.default_script = kaniko_build(termination_message=DIGEST)

    trigger = deferred(kaniko_operator(registry, force_rebuild=force), task_context())

    assert isinstance(trigger, RemoteRunTrigger)
    assert registry.count("manifest") == 0, "a forced rebuild does not ask the registry"
    assert len(posted(kube, "pods")) == 1


def test_a_pinned_image_is_used_as_is_without_asking_the_registry(
    registry: RegistryEmulator, kube: KubernetesFake
) -> None:
    pinned = "registry.example.com/ml/train:hotfix-1"

    result = kaniko_operator(registry, pinned=pinned).execute(task_context())

    assert result == ImageRef(uri=pinned, source="pinned").model_dump(mode="json")
    assert registry.calls == [] and posted(kube, "pods") == []


def test_a_build_context_changed_since_the_plan_fails_before_asking_the_registry(
    registry: RegistryEmulator, kube: KubernetesFake
) -> None:
    stale = "0" * 16

    with pytest.raises(
        AirflowFailException, match=rf"the build context changed since the run was planned \(tag {stale}"
    ):
        kaniko_operator(registry, tag=stale).execute(task_context())

    assert registry.calls == [] and posted(kube, "pods") == []


def test_without_a_build_mode_the_fixed_image_is_used_without_asking_the_registry(
    registry: RegistryEmulator,
) -> None:
    result = build_operator(fixed=SPEC_IMAGE, mode="").execute(task_context())

    assert result == ImageRef(uri=SPEC_IMAGE, source="existing").model_dump(mode="json")
    assert registry.calls == []
    with pytest.raises(AirflowFailException, match="names no image and builds none"):
        build_operator(mode=None).execute(task_context())


def test_a_failed_kaniko_build_fails_the_task_naming_the_failing_step(
    registry: RegistryEmulator, kube: KubernetesFake
) -> None:
    kube.default_script = kaniko_build(KANIKO_FAILURE_LOG, outcome="Failed", exit_code=1)
    op, ctx = kaniko_operator(registry), task_context()
    trigger = deferred(op, ctx)
    kube.clock.advance(10)  # type: ignore[attr-defined]
    event = fire(trigger)
    assert event["status"] == "failed"

    with pytest.raises(AirflowException) as failure:
        op.execute_complete(ctx, event)

    message = str(failure.value)
    assert message.startswith("Image build (kaniko) failed: image build pod")
    assert "failed at step 'RUN apt-get install -y nic-lib-rdma-core'" in message
    assert "exit status 100" in message and "exited with code 1" in message


@pytest.mark.slow
def test_an_acr_build_is_polled_to_success_and_pushes_the_tag(registry: RegistryEmulator, acr: Acr) -> None:
    tag = expected_tag()
    op, ctx = acr_operator(registry, acr), task_context()

    trigger = deferred(op, ctx)

    assert isinstance(trigger, RemoteRunTrigger) and (trigger.kind, trigger.mode) == ("image", "acr")
    assert acr.emulator.count("CreateBuildRecordByRule") == 1
    assert acr.emulator.rules[acr.rule_id].image_tag == tag
    acr.emulator.clock.advance(ACR_BUILD_SECONDS + 1)  # type: ignore[attr-defined]
    event = fire(trigger)

    assert event["status"] == "succeeded"
    assert (acr.repo_id, tag) in acr.emulator.tags
    built = op.execute_complete(ctx, event)
    assert (built["source"], built["tag"]) == ("built", tag)
    assert built["digest"] == "sha256:" + acr.emulator.tags[(acr.repo_id, tag)].digest.removeprefix("sha256:")


def test_a_failed_acr_build_fails_the_task_naming_the_failing_step(
    registry: RegistryEmulator, acr: Acr
) -> None:
    acr.emulator.fail_next_build(at_step=5, output=("E: Unable to locate package libnl-3-dev",))
    op, ctx = acr_operator(registry, acr), task_context()
    trigger = deferred(op, ctx)
    acr.emulator.clock.advance(ACR_BUILD_SECONDS + 1)  # type: ignore[attr-defined]
    event = fire(trigger)

    with pytest.raises(AirflowException) as failure:
        op.execute_complete(ctx, event)

    message = str(failure.value)
    assert message.startswith("Image build (acr) failed: ACR build")
    assert "at Step 5/9 : RUN apt-get install" in message
    assert "returned a non-zero code: 100" in message
    assert "E: Unable to locate package libnl-3-dev" in message


@pytest.mark.slow
def test_the_registry_password_never_reaches_logs_return_values_or_errors(
    registry: RegistryEmulator,
    kube: KubernetesFake,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Checked: the task's return value, trigger kwargs and event, the stored handle, what was sent to
    the cluster, the errors, and every log line (stdlib records and the task logger's output)."""
    caplog.set_level("DEBUG")
    seen: list[str] = []
    tag = expected_tag()
    registry.put_manifest("ml/train", tag)
    seen.append(json.dumps(kaniko_operator(registry).execute(task_context())))

    # A build: the trigger's kwargs, the stored handle and the failure message.
    kube.default_script = kaniko_build(KANIKO_FAILURE_LOG, outcome="Failed")
    ctx = task_context()
    op = kaniko_operator(registry, force_rebuild=True)
    trigger = deferred(op, ctx)
    kube.clock.advance(10)  # type: ignore[attr-defined]
    event = fire(trigger)
    seen += [json.dumps(trigger.serialize()), json.dumps(dict(ctx["task_state_store"])), json.dumps(event)]
    with pytest.raises(AirflowException) as build_failure:
        op.execute_complete(ctx, event)
    seen.append(str(build_failure.value))
    seen += [json.dumps(r.body) for r in kube.requests if r.body is not None and "/secrets" not in r.path]

    # The registry refusing the password: the error names the connection, never the password.
    registry.users[LOGIN] = "rotated-password"
    with pytest.raises(AirflowFailException) as refused:  # no retry: only new credentials help
        kaniko_operator(registry).execute(task_context())
    assert f"connection {REGISTRY_CONN}" in str(refused.value)
    seen.append(str(refused.value))

    seen += [record.getMessage() for record in caplog.records]
    output = capfd.readouterr()
    seen += [output.out, output.err]
    assert f"Building {registry.host}/ml/train:{tag} with kaniko" in output.out  # the task log is read
    for secret in secret_forms():
        assert not any(secret in text for text in seen)


# -- ImageVerifyOperator and RdmaBandwidthOperator: the jobs ---------------------------------------


JOB_COMMAND = "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK train.py"


def dlc_spec(**overrides: Any) -> dict[str, Any]:
    dataset = {"dataset_id": "d-cifar10", "dataset_version": "v3", "mount_path": "/mnt/data"}
    job = dlc_job(rdma=True, image=SPEC_IMAGE, command=JOB_COMMAND, datasets=[dataset])
    return {**job, **overrides}


def ack_spec(**overrides: Any) -> dict[str, Any]:
    dataset = {"uri": "pvc://cpfs-train", "mount_path": "/mnt/data"}
    job = arena_job(rdma=True, image=SPEC_IMAGE, command=JOB_COMMAND, datasets=[dataset])
    return {**job, **overrides}


def job_args(backend: str, **overrides: Any) -> dict[str, Any]:
    if backend == "dlc":
        return {
            "spec": dlc_spec(**overrides),
            "backend_config": {"workspace_id": "ws-1", "job_settings": DLC_JOB_SETTINGS},
        }
    return {
        "spec": ack_spec(**overrides),
        "backend_config": {"kubernetes_conn_id": K8S_CONN, "namespace": NS},
    }


@pytest.fixture(params=["dlc", "arena"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@dataclass
class Cluster:
    """The run's backend (DLC or ACK), scripted the same way for both."""

    backend: str
    dlc: DlcEmulator | None = None
    kube: KubernetesFake | None = None

    def script(self, lines: list[str]) -> None:
        if self.dlc is not None:
            self.dlc.default_script = JobScript(
                phases=[("Creating", 1.0), ("EnvPreparing", 1.0), ("Running", 5.0)], log_lines=lines
            )
        else:
            assert self.kube is not None
            self.kube.default_script = TrainingScript(
                phases=[("Created", 1.0), ("Running", 5.0)], log_lines=lines
            )

    def finish(self) -> None:
        emulator: Any = self.dlc if self.dlc is not None else self.kube
        emulator.clock.advance(30)

    def jobs_created(self) -> int:
        if self.dlc is not None:
            return self.dlc.count("CreateJob")
        assert self.kube is not None
        return len([r for r in self.kube.requests if r.method == "POST" and "/kubeflow.org/" in r.path])


@pytest.fixture
def cluster(backend: str, request: pytest.FixtureRequest) -> Cluster:
    if backend == "dlc":
        return Cluster(backend, dlc=request.getfixturevalue("dlc"))
    return Cluster(backend, kube=request.getfixturevalue("kube"))


def image_ref(source: str = "built") -> dict[str, Any]:
    return ImageRef(
        uri=VERIFIED_IMAGE, digest=DIGEST, tag=VERIFIED_IMAGE.rsplit(":", 1)[1], source=source
    ).model_dump(mode="json")


def verify_operator(backend: str, image: Any = None) -> ImageVerifyOperator:
    return ImageVerifyOperator(
        task_id="verify_image",
        image=image or image_ref(),
        poll_interval=0.01,
        job={**job_args(backend), "output_root": "/mnt/data/outputs"},
    )


def run_check(op: Any, cluster: Cluster) -> dict[str, Any]:
    """Submit the job, let it finish, fire the trigger and complete the task."""
    ctx = task_context()
    trigger = deferred(op, ctx)
    assert isinstance(trigger, TrainingJobTrigger)
    assert ctx["task_state_store"][HANDLE_KEY] == trigger.handle
    cluster.finish()
    event = fire(trigger)
    assert event["status"] == "succeeded", event
    return op.execute_complete(ctx, event)


def probe_log(**report: Any) -> list[str]:
    """A verify pod's log: nvidia-smi, the probe's JSON line, then other output."""
    return [
        "+ nvidia-smi -L",
        "GPU 0: NVIDIA H800 (UUID: GPU-5c1e7a0b-93d2-4f3e-8a61-0d2b7c9e4f10)",
        "+ python3 /opt/aliyun-training/check_image.py",
        json.dumps({**GOOD_PROBE, **report}),
        '{"level": "info", "msg": "runtime probe finished", "elapsed_s": 2.46}',
    ]


def test_a_good_image_is_verified_with_its_versions(cluster: Cluster) -> None:
    cluster.script(sample("probe/verify_pod.log"))

    result = run_check(verify_operator(cluster.backend), cluster)

    assert result == BuiltImage(
        uri=VERIFIED_IMAGE,
        digest=DIGEST,
        python="3.11.10",
        torch="2.5.1",
        cuda="12.4",
        nccl="2.21.5",
        rdma_libs=["ibverbs", "rdmacm", "mlx5"],
        ibv_devices=["mlx5_bond_0", "mlx5_bond_1"],
        tools=["ib_write_bw", "mpirun", "all_reduce_perf"],
        verified=True,
    ).model_dump(mode="json")


@pytest.mark.slow
def test_the_verify_job_is_one_node_with_one_gpu_running_the_check_in_the_image(cluster: Cluster) -> None:
    cluster.script(probe_log())
    ctx = task_context()
    deferred(verify_operator(cluster.backend), ctx)

    if cluster.dlc is not None:
        (create,) = cluster.dlc.requests_for("CreateJob")
        body = create.body
        assert body["JobType"] == "PyTorchJob"
        assert [(s["Type"], s["PodCount"]) for s in body["JobSpecs"]] == [("Master", 1)]
        (job_spec,) = body["JobSpecs"]
        assert job_spec["ResourceConfig"]["GPU"] == "1"
        assert job_spec["Image"] == BY_DIGEST, "the image runs by the digest the build stage recorded"
        assert body["UserCommand"] == check_command()
        assert "DataSources" not in body or not body["DataSources"]
    else:
        (job,) = custom_objects("pytorchjobs")
        replicas = job["spec"]["pytorchReplicaSpecs"]
        assert {role: spec["replicas"] for role, spec in replicas.items()} == {"Master": 1}
        (container,) = replicas["Master"]["template"]["spec"]["containers"]
        assert container["image"] == BY_DIGEST
        assert container["command"] == ["sh", "-c", check_command()]
        assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
        assert all(m["mountPath"] != "/mnt/data" for m in container["volumeMounts"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ({"cuda": "11.1"}, ["CUDA 11.1 is older than the required 11.2"]),
        # torch's int form of NCCL 2.10.3, as older probes and other tools report it.
        ({"nccl": 21003}, ["NCCL 2.10.3 is older than the required 2.12.10"]),
        (
            {"rdma_libs": [], "ibv_devices": []},
            ["RDMA libraries missing: libibverbs, librdmacm, libmlx5", "no RDMA device visible"],
        ),
    ],
    ids=["old-cuda", "old-nccl-int", "no-rdma-libs"],
)
def test_a_bad_image_fails_without_retry_naming_what_is_wrong(
    cluster: Cluster, report: dict[str, Any], expected: list[str]
) -> None:
    cluster.script(probe_log(**report))

    with pytest.raises(AirflowFailException) as failure:
        run_check(verify_operator(cluster.backend), cluster)

    message = str(failure.value)
    assert message.startswith(f"Image {VERIFIED_IMAGE} cannot run this training:")
    for text in expected:
        assert text in message


def test_a_pinned_image_is_passed_through_unverified_without_a_job(cluster: Cluster) -> None:
    pinned = ImageRef(uri="registry.example.com/ml/train:hotfix-1", source="pinned").model_dump(mode="json")

    result = verify_operator(cluster.backend, image=pinned).execute(task_context())

    assert result == BuiltImage(
        uri="registry.example.com/ml/train:hotfix-1", digest="", python=""
    ).model_dump(mode="json")
    assert result["verified"] is False
    assert cluster.jobs_created() == 0


# -- RdmaBandwidthOperator -----------------------------------------------------------------------


BY_DIGEST = f"{VERIFIED_IMAGE.rpartition(':')[0]}@{DIGEST}"


def rdma_operator(backend: str, line_rate_gbps: Any = 200, **overrides: Any) -> RdmaBandwidthOperator:
    nodes = overrides.pop("nodes", 2)
    verified = BuiltImage(
        uri=VERIFIED_IMAGE, digest=DIGEST, python="3.11.10", verified=True, tools=list(BANDWIDTH_TOOLS)
    )
    return RdmaBandwidthOperator(
        task_id="check_rdma",
        image=overrides.pop("image", verified.model_dump(mode="json")),
        check={"line_rate_gbps": line_rate_gbps, **overrides},
        poll_interval=0.01,
        job={**job_args(backend, nodes=nodes), "output_root": "/mnt/data/outputs"},
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line_rate", "verdict"),
    [(200, "PASS"), (250, "WARN")],
)
def test_ack_measures_ib_write_bw_between_two_pods(
    kube: KubernetesFake, line_rate: int, verdict: str
) -> None:
    cluster = Cluster("arena", kube=kube)
    cluster.script(sample("rdma/ib_write_bw_server.txt"))

    result = run_check(rdma_operator("arena", line_rate_gbps=line_rate), cluster)

    check = BandwidthCheck.model_validate(result)
    assert (check.verdict, check.tool, check.transport) == (verdict, "ib_write_bw", "ib")
    assert check.measured_gbps == 188.91 and check.line_rate_gbps == line_rate
    assert check.message.startswith(
        f"188.91 Gb/s = {188.91 / line_rate:.0%} of the {line_rate} Gb/s line rate"
    )
    (job,) = custom_objects("pytorchjobs")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert sum(spec["replicas"] for spec in replicas.values()) == 2
    for spec in replicas.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["image"] == BY_DIGEST
        command = container["command"][-1]
        assert "ib_write_bw -d mlx5_0 -x 3 -F --report_gbits -D 15" in command
        assert '"$MASTER_ADDR"' in command


def test_the_rdma_device_reaches_the_check_command_quoted() -> None:
    """The environment validates the device name; the command quotes it anyway, as any shell word."""
    command = rdma_operator("arena", device="mlx5_0; reboot")._spec().command

    assert "ib_write_bw -d 'mlx5_0; reboot' -x 3" in command
    assert "-d mlx5_0; reboot" not in command


@pytest.mark.slow
def test_dlc_runs_all_reduce_perf_as_an_mpi_job_over_rdma(dlc: DlcEmulator) -> None:
    cluster = Cluster("dlc", dlc=dlc)
    cluster.script(sample("rdma/all_reduce_perf_2x8.txt"))

    result = run_check(rdma_operator("dlc", line_rate_gbps=800), cluster)

    check = BandwidthCheck.model_validate(result)
    assert (check.verdict, check.tool, check.transport) == ("PASS", "all_reduce_perf", "ib")
    assert check.measured_gbps == pytest.approx(95.65 * 8) and check.line_rate_gbps == 800
    (create,) = dlc.requests_for("CreateJob")
    body = create.body
    assert body["JobType"] == "MPIJob"
    assert [(s["Type"], s["PodCount"]) for s in body["JobSpecs"]] == [("Launcher", 1), ("Worker", 2)]
    assert all(s["Image"] == BY_DIGEST for s in body["JobSpecs"])
    assert "all_reduce_perf" in body["UserCommand"] and "-np 16 -npernode 8" in body["UserCommand"]
    assert body["Envs"]["NCCL_DEBUG"] == "INFO"


@pytest.mark.slow
def test_nccl_falling_back_to_sockets_fails_saying_rdma_is_not_in_use(dlc: DlcEmulator) -> None:
    cluster = Cluster("dlc", dlc=dlc)
    cluster.script(sample("rdma/nccl_socket_fallback.txt"))

    with pytest.raises(AirflowFailException) as failure:
        run_check(rdma_operator("dlc", line_rate_gbps=800), cluster)

    message = str(failure.value)
    assert message.startswith("RDMA bandwidth check failed: NCCL fell back to NET/Socket (TCP)")
    assert "RDMA is not in use" in message


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"skip": True}, "skipped by the trigger form"),
        ({"skip": "True"}, "skipped by the trigger form"),
        ({"nodes": 1}, "a single-node run uses no RDMA link"),
        (
            {"image": {"uri": VERIFIED_IMAGE, "digest": "", "python": "", "verified": False}},
            "the image was pinned",
        ),
        (
            {
                "image": {
                    "uri": VERIFIED_IMAGE,
                    "digest": DIGEST,
                    "python": "3.11",
                    "verified": True,
                    "tools": [],
                }
            },
            "the image lacks",
        ),
    ],
    ids=["skip", "skip-rendered", "one-node", "pinned-image", "no-test-programs"],
)
def test_a_skipped_or_single_node_check_creates_no_job(
    cluster: Cluster, overrides: dict[str, Any], why: str
) -> None:
    result = rdma_operator(cluster.backend, **overrides).execute(task_context())

    assert result["verdict"] == "SKIPPED" and result["message"].startswith(why)
    assert cluster.jobs_created() == 0


def test_a_run_without_rdma_or_without_gpus_on_dlc_gets_no_bandwidth_job(cluster: Cluster) -> None:
    no_rdma = RdmaBandwidthOperator(
        task_id="check_rdma",
        image=rdma_operator(cluster.backend).image,
        check={"line_rate_gbps": 200},
        job={
            **job_args(cluster.backend, nodes=2),
            "spec": {**job_args(cluster.backend, nodes=2)["spec"], "rdma": False},
        },
    ).execute(task_context())

    assert no_rdma["verdict"] == "SKIPPED" and "does not use RDMA" in no_rdma["message"]
    if cluster.backend == "dlc":
        spec = {**job_args("dlc", nodes=2)["spec"], "gpus_per_node": 0}
        cpu_only = RdmaBandwidthOperator(
            task_id="check_rdma",
            image=rdma_operator("dlc").image,
            check={"line_rate_gbps": 200},
            job={**job_args("dlc", nodes=2), "spec": spec},
        ).execute(task_context())
        assert "all_reduce_perf needs GPUs" in cpu_only["message"]
    assert cluster.jobs_created() == 0
