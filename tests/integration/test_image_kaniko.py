"""KanikoBuilder through the cncf KubernetesHook and AsyncKubernetesHook against the Kubernetes API fake."""

from __future__ import annotations

import base64
import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client

from aliyun_training.image.kaniko import (
    DEFAULT_BUILDER_IMAGE,
    KanikoBuilder,
    KanikoBuildError,
    KanikoSettings,
    build_context_map,
    build_pod,
    build_pod_name,
    context_key,
    failing_step,
    log_lines,
    mount_is_fatal,
    mount_problem,
)
from aliyun_training.validation import SpecError, validate_record
from fakes.kubernetes_fake import KubernetesFake, TrainingScript
from tests import pod_harness as harness
from tests.pod_harness import CONN_ID, NS, T0, SteppedClock, core, exists, kubernetes_fake, posts

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

REGISTRY = "myinst-registry-vpc.cn-wulanchabu.cr.aliyuncs.com"
REPOSITORY = f"{REGISTRY}/ml/train"
TAG = "3f9a0c1d2e4b5a67"
DESTINATION = f"{REPOSITORY}:{TAG}"
DIGEST = "sha256:" + "4e" * 32
DOCKERFILE = """ARG BASE_IMAGE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y libnl-3-dev libnl-route-3-dev iproute2 ethtool
COPY check_image.py /opt/aliyun-training/check_image.py
"""
CONTEXT = {"Dockerfile": DOCKERFILE, "check_image.py": "import json\nprint(json.dumps({'ok': True}))\n"}
PUSH_PASSWORD = "pUsH-t0ken-Fake-9f8e7d6c"
PUSH_AUTH = base64.b64encode(f"aliyun-push@1234567890:{PUSH_PASSWORD}".encode()).decode()
DOCKER_CONFIG = json.dumps(
    {
        "auths": {
            REGISTRY: {"username": "aliyun-push@1234567890", "password": PUSH_PASSWORD, "auth": PUSH_AUTH}
        }
    }
)
SECRET_VALUES = (PUSH_PASSWORD, PUSH_AUTH, base64.b64encode(DOCKER_CONFIG.encode()).decode())

BUILD_LOG = [
    "\x1b[36mINFO\x1b[0m[0000] Retrieving image manifest nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
    "INFO[0002] Built cross stage deps: map[]",
    "INFO[0002] Executing 0 build triggers",
    "INFO[0002] Building stage 'nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04' [idx: '0', base-idx: '-1']",
    f"INFO[0003] Checking for cached layer {REPOSITORY}/cache:8c1e7f...",
    "INFO[0003] No cached layer found for cmd RUN apt-get update && apt-get install -y libnl-3-dev",
    "INFO[0003] Unpacking rootfs as cmd RUN apt-get update && apt-get install -y libnl-3-dev requires it.",
    "INFO[0012] RUN apt-get update && apt-get install -y libnl-3-dev libnl-route-3-dev iproute2 ethtool",
    "INFO[0012] Initializing snapshotter ...",
    "INFO[0012] Cmd: /bin/sh",
    "INFO[0012] Args: [-c apt-get update && apt-get install -y libnl-3-dev libnl-route-3-dev iproute2]",
    "INFO[0012] Running: [/bin/sh -c apt-get update && apt-get install -y libnl-3-dev]",
    "Get:1 http://archive.ubuntu.com/ubuntu jammy InRelease [270 kB]",
]
SUCCESS_LOG = [
    *BUILD_LOG,
    "INFO[0030] Taking snapshot of full filesystem...",
    "INFO[0041] COPY check_image.py /opt/aliyun-training/check_image.py",
    "INFO[0041] Taking snapshot of files...",
    f"INFO[0042] Pushing image to {DESTINATION}",
    f"INFO[0047] Pushed {REPOSITORY}@{DIGEST}",
]
FAILURE_LOG = [
    *BUILD_LOG,
    *[f"Get:{i} http://archive.ubuntu.com/ubuntu jammy/main amd64 Packages [{i} kB]" for i in range(2, 30)],
    "INFO[0020] RUN apt-get install -y nic-lib-rdma-core",
    "INFO[0020] Cmd: /bin/sh",
    "INFO[0020] Running: [/bin/sh -c apt-get install -y nic-lib-rdma-core]",
    "Reading package lists...",
    "E: Unable to locate package nic-lib-rdma-core",
    "error building image: error building stage: failed to execute command: waiting for process to exit: "
    "exit status 100",
]


clock = harness.stepped_clock


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: SteppedClock) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, clock) as server:
        create_registry_secret()
        yield server


def create_registry_secret() -> None:
    core().create_namespaced_secret(
        NS,
        {
            "metadata": {"name": "acr-push"},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": DOCKER_CONFIG},
        },
    )


def settings(**overrides: Any) -> dict[str, Any]:
    return {
        "kubernetes_conn_id": CONN_ID,
        "namespace": NS,
        "destination": DESTINATION,
        "tag": TAG,
        "context_files": CONTEXT,
        "build_args": {"BASE_IMAGE": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", "PIP_INDEX": "aliyun"},
        "registry_secret": "acr-push",
        **overrides,
    }


def succeeding(lines: list[str] | None = None, digest: str = DIGEST) -> TrainingScript:
    """Created 1 s, Running one second per log line, then Succeeded with the digest as termination message."""
    lines = SUCCESS_LOG if lines is None else lines
    return TrainingScript(
        phases=[("Created", 1.0), ("Running", float(len(lines)))],
        log_lines=lines,
        termination_message=digest,
    )


def failing() -> TrainingScript:
    return TrainingScript(
        phases=[("Created", 1.0), ("Running", 10.0)], outcome="Failed", exit_code=1, log_lines=FAILURE_LOG
    )


# -- the pod and ConfigMap as sent --------------------------------------------------------------


def test_the_pod_runs_kaniko_on_the_context_map_and_pushes_with_the_mounted_secret(
    fake: KubernetesFake,
) -> None:
    fake.default_script = succeeding()
    builder = KanikoBuilder(
        **settings(
            node_selector={"pool": "cpu"}, extra_args=["--snapshot-mode=redo", "--compressed-caching=false"]
        )
    )
    handle = builder.submit()

    (sent,) = posts(fake, "pods")
    assert sent == build_pod(builder.settings)
    assert sent["metadata"]["name"] == handle["pod"] == builder.pod_name
    assert re.fullmatch(rf"kaniko-train-{TAG}-[0-9a-f]{{8}}", handle["pod"])
    assert sent["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "aliyun-training",
        "app.kubernetes.io/component": "image-build",
        "aliyun-training/image-repository": "train",
        "aliyun-training/image-tag": TAG,
    }
    assert sent["metadata"]["annotations"]["aliyun-training/image"] == DESTINATION
    spec = sent["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert spec["nodeSelector"] == {"pool": "cpu"}
    (container,) = spec["containers"]
    assert container["name"] == "kaniko" and container["image"] == DEFAULT_BUILDER_IMAGE
    assert "command" not in container  # the executor image's entrypoint
    assert container["args"] == [
        "--context=dir:///kaniko/buildcontext",
        "--dockerfile=Dockerfile",
        f"--destination={DESTINATION}",
        "--cache=true",
        f"--cache-repo={REPOSITORY}/cache",
        "--build-arg=BASE_IMAGE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
        "--build-arg=PIP_INDEX=aliyun",
        "--digest-file=/dev/termination-log",
        "--snapshot-mode=redo",
        "--compressed-caching=false",
    ]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}
    assert spec["volumes"] == [
        {"name": "workspace", "emptyDir": {}},
        {"name": "context", "configMap": {"name": f"{handle['pod']}-context"}},
        {
            "name": "registry-auth",
            "secret": {
                "secretName": "acr-push",
                "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
            },
        },
    ]
    # Each context file is mounted as itself (subPath), not as the kubelet's ..data symlink.
    assert container["volumeMounts"] == [
        {"name": "workspace", "mountPath": "/kaniko/buildcontext"},
        {
            "name": "context",
            "mountPath": "/kaniko/buildcontext/Dockerfile",
            "subPath": "Dockerfile",
            "readOnly": True,
        },
        {
            "name": "context",
            "mountPath": "/kaniko/buildcontext/check_image.py",
            "subPath": "check_image.py",
            "readOnly": True,
        },
        {"name": "registry-auth", "mountPath": "/kaniko/.docker", "readOnly": True},
    ]
    assert "env" not in container and "envFrom" not in container


def test_the_context_map_holds_the_context_files_and_is_owned_by_nothing(fake: KubernetesFake) -> None:
    fake.default_script = succeeding()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()

    (sent,) = posts(fake, "configmaps")
    assert sent == build_context_map(builder.settings)
    stored = core().read_namespaced_config_map(f"{handle['pod']}-context", NS)
    assert stored.data == CONTEXT
    assert stored.metadata.owner_references is None
    assert stored.metadata.labels["app.kubernetes.io/component"] == "image-build"
    assert handle == {
        "mode": "kaniko",
        "namespace": NS,
        "pod": builder.pod_name,
        "uid": handle["uid"],
        "config_map": f"{builder.pod_name}-context",
        "config_map_uid": stored.metadata.uid,
    }
    # The ConfigMap is created before the pod that mounts it.
    paths = [r.path for r in fake.requests if r.method == "POST"]
    assert [p.rsplit("/", 1)[-1] for p in paths if "/secrets" not in p] == ["configmaps", "pods"]


def test_files_in_subdirectories_get_unique_keys_and_are_mounted_at_their_path() -> None:
    files = {**CONTEXT, "scripts/install_rdma.sh": "#!/bin/sh\n", "scripts__install_rdma.sh": "x"}
    pod = build_pod(settings(context_files=files))
    data = build_context_map(settings(context_files=files))["data"]
    key = context_key("scripts/install_rdma.sh")
    assert re.fullmatch(r"[0-9a-f]{12}-install_rdma\.sh", key) and data[key] == "#!/bin/sh\n"
    assert data["scripts__install_rdma.sh"] == "x" and len(data) == 4
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {
        "name": "context",
        "mountPath": "/kaniko/buildcontext/scripts/install_rdma.sh",
        "subPath": key,
        "readOnly": True,
    } in (mounts)


def test_cache_service_account_and_resources_are_settings() -> None:
    pod = build_pod(
        settings(
            cache=False,
            build_args={},
            service_account="image-builder",
            image_pull_secrets=["acr-pull"],
            ephemeral_storage="60Gi",
            builder_image="registry-vpc.cn-wulanchabu.aliyuncs.com/mirror/kaniko-executor:v1.23.2",
        )
    )
    container = pod["spec"]["containers"][0]
    assert container["args"] == [
        "--context=dir:///kaniko/buildcontext",
        "--dockerfile=Dockerfile",
        f"--destination={DESTINATION}",
        "--digest-file=/dev/termination-log",
    ]
    assert container["image"].endswith("/mirror/kaniko-executor:v1.23.2")
    assert container["resources"]["requests"]["ephemeral-storage"] == "60Gi"
    assert pod["spec"]["serviceAccountName"] == "image-builder"
    assert pod["spec"]["automountServiceAccountToken"] is True
    assert pod["spec"]["imagePullSecrets"] == [{"name": "acr-pull"}]
    cached = build_pod(settings(cache_repo=f"{REGISTRY}/ml/train-cache"))
    assert f"--cache-repo={REGISTRY}/ml/train-cache" in cached["spec"]["containers"][0]["args"]


@pytest.mark.slow
def test_no_registry_credential_is_ever_sent_returned_logged_or_reported(
    fake: KubernetesFake, clock: SteppedClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    fake.default_script = succeeding()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(30)
    assert harness.polled(builder, handle).state == "succeeded"
    result = builder.result(handle)

    fake.default_script = failing()
    other = KanikoBuilder(**settings(tag="0123456789abcdef", destination=f"{REPOSITORY}:0123456789abcdef"))
    other_handle = other.submit()
    clock.advance(30)
    status = harness.polled(other, other_handle)
    assert status.state == "failed"

    bodies = harness.sent_bodies(fake)
    assert bodies  # the pods and ConfigMaps were recorded
    assert not any("/secrets" in r.path for r in fake.requests[1:])  # only the fixture's create
    seen = [*bodies, json.dumps(handle), json.dumps(builder.config), json.dumps(result), status.message]
    seen += [record.getMessage() for record in caplog.records]
    harness.assert_none_contains(SECRET_VALUES, seen)


# -- lifecycle -----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_build_runs_to_success_and_its_termination_message_is_the_digest(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    fake.default_script = succeeding()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()

    clock.advance(0.5)
    status = await builder.apoll(handle)
    assert (status.state, status.progress) == (
        "running",
        f"pod {NS}/{builder.pod_name} Pending: waiting for the container to start",
    )
    clock.advance(1.6)  # the first log line, in kaniko's colours: the progress is plain text
    status = await builder.apoll(handle)
    assert (status.state, status.progress) == (
        "running",
        "INFO[0000] Retrieving image manifest nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
    )
    clock.advance(8)
    assert (await builder.apoll(handle)).progress == BUILD_LOG[8]
    clock.advance(30)
    assert (await builder.apoll(handle)).state == "succeeded"

    rebuilt = KanikoBuilder(**json.loads(json.dumps(builder.config)))  # as in the triggerer, then the worker
    result = rebuilt.result(handle)
    plain = log_lines("\n".join(SUCCESS_LOG))  # kaniko's colour codes removed
    assert plain[0].startswith("INFO[0000] Retrieving image manifest")
    assert result == {"image": DESTINATION, "digest": DIGEST, "log_tail": plain[-20:]}
    assert not exists("pod", handle["pod"]) and not exists("configmap", handle["config_map"])
    assert fake.count("DELETE", f"/pods/{handle['pod']}") == 1
    assert fake.count("DELETE", f"/configmaps/{handle['config_map']}") == 1


def test_submitting_again_reattaches_instead_of_creating_a_second_pod(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    harness.assert_submitting_again_reattaches(fake, KanikoBuilder(**settings()), succeeding(), clock, 5, 65)
    assert len(posts(fake, "configmaps")) == 1 and fake.count("PUT") == 0


@pytest.mark.slow
async def test_a_failed_build_names_the_failing_step_and_is_replaced_on_resubmit(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    fake.default_script = failing()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(5)
    assert (await builder.apoll(handle)).state == "running"
    clock.advance(10)
    status = await builder.apoll(handle)
    assert status.state == "failed"
    assert status.message.startswith(
        f"image build pod {NS}/{builder.pod_name} failed at step 'RUN apt-get install -y nic-lib-rdma-core': "
        "error building image: error building stage: failed to execute command: waiting for process to exit: "
        "exit status 100; container kaniko exited with code 1 (Error); last log lines:\n"
    )
    tail = status.message.split("last log lines:\n", 1)[1].splitlines()
    assert [line.strip() for line in tail] == FAILURE_LOG[-20:]
    assert "E: Unable to locate package nic-lib-rdma-core" in status.message

    replacement = await harness.assert_a_resubmit_replaces_the_failed_pod(fake, builder, handle, succeeding())
    assert replacement["config_map_uid"] == handle["config_map_uid"]  # same files: reused
    assert len(posts(fake, "pods")) == 2 and len(posts(fake, "configmaps")) == 1
    assert fake.count("DELETE", f"/pods/{builder.pod_name}") == 1 and fake.count("PUT") == 0


async def test_the_failure_is_read_from_the_termination_message_when_the_log_is_gone(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    fake.default_script = failing()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(15)
    fake.fail_next("GET", "/log", status=404)  # e.g. the node was drained: only the status is left
    status = await builder.apoll(handle)
    assert "failed at step 'RUN apt-get install -y nic-lib-rdma-core': error building image" in status.message
    assert "exited with code 1 (Error)" in status.message


@pytest.mark.slow
async def test_an_oom_killed_build_suggests_more_memory(fake: KubernetesFake, clock: SteppedClock) -> None:
    fake.default_script = TrainingScript(phases=[("Running", 2.0)], outcome="OOMKilled", log_lines=BUILD_LOG)
    builder = KanikoBuilder(**settings(memory="16Gi"))
    handle = builder.submit()
    clock.advance(5)
    status = await builder.apoll(handle)
    assert "failed at step 'RUN apt-get update && apt-get install -y libnl-3-dev" in status.message
    assert "exited with code 137 (OOMKilled), killed, usually for memory (fix: raise memory from 16Gi)" in (
        status.message
    )


def test_a_context_map_with_other_files_is_replaced_and_a_foreign_one_is_refused(
    fake: KubernetesFake,
) -> None:
    fake.default_script = succeeding()
    builder = KanikoBuilder(**settings())
    stale = build_context_map(settings(context_files={**CONTEXT, "Dockerfile": "FROM scratch\n"}))
    created = core().create_namespaced_config_map(NS, stale)
    handle = builder.submit()
    stored = core().read_namespaced_config_map(handle["config_map"], NS)
    assert stored.data == CONTEXT and stored.metadata.uid == created.metadata.uid
    assert fake.count("PUT", "/configmaps/") == 1 and len(posts(fake, "configmaps")) == 1

    other = KanikoBuilder(**settings(tag="fedcba9876543210", destination=f"{REPOSITORY}:fedcba9876543210"))
    core().create_namespaced_config_map(NS, {"metadata": {"name": other.config_map_name}, "data": {"a": "b"}})
    with pytest.raises(KanikoBuildError, match="is not an image build configmap of this pipeline"):
        other.submit()
    assert not exists("pod", other.pod_name)


def test_a_pod_built_from_other_inputs_is_replaced(fake: KubernetesFake, clock: SteppedClock) -> None:
    fake.default_script = succeeding()
    first = KanikoBuilder(**settings(extra_args=["--snapshot-mode=redo"])).submit()
    clock.advance(5)
    second = KanikoBuilder(**settings()).submit()
    assert second["pod"] == first["pod"] and second["uid"] != first["uid"]
    assert len(posts(fake, "pods")) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("secret", "error"),
    [
        (None, 'secret "acr-push" not found'),
        ({"stringData": {"config.json": "{}"}}, "references non-existent secret key: .dockerconfigjson"),
    ],
)
async def test_a_missing_registry_secret_or_key_fails_the_build_with_the_kubelets_failed_mount(
    fake: KubernetesFake, clock: SteppedClock, secret: dict[str, Any] | None, error: str
) -> None:
    core().delete_namespaced_secret("acr-push", NS)
    if secret is not None:
        core().create_namespaced_secret(NS, {"metadata": {"name": "acr-push"}, **secret})
    fake.default_script = succeeding()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(30)
    pod = core().read_namespaced_pod(handle["pod"], NS)
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    status = await builder.apoll(handle)
    assert status.state == "failed"
    assert status.message.startswith(
        f"image build pod {NS}/{builder.pod_name} cannot start: FailedMount: MountVolume.SetUp failed for "
        f'volume "registry-auth" : {error} (fix: create the kubernetes.io/dockerconfigjson Secret acr-push'
    )


async def test_the_failed_mount_is_found_on_a_later_page_of_the_pods_events(
    fake: KubernetesFake, clock: SteppedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One event a page: the scheduler's event fills the first, the kubelet's FailedMount the next."""
    from aliyun_training.hooks import kubernetes as kube_hooks

    monkeypatch.setattr(kube_hooks, "LIST_PAGE_SIZE", 1)
    core().delete_namespaced_secret("acr-push", NS)
    fake.default_script = succeeding()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(30)

    status = await builder.apoll(handle)

    assert (
        status.state == "failed"
        and 'FailedMount: MountVolume.SetUp failed for volume "registry-auth"' in (status.message)
    )
    event_lists = [r for r in fake.requests if r.method == "GET" and r.path.endswith("/events")]
    assert [r.query.get("limit") for r in event_lists] == ["1", "1"]
    assert "continue" not in event_lists[0].query and event_lists[1].query["continue"]


def test_the_default_builder_is_a_pinned_release_of_a_maintained_kaniko_fork(fake: KubernetesFake) -> None:
    """Upstream kaniko (gcr.io/kaniko-project) was archived in June 2025; the image stays a setting."""
    fake.default_script = succeeding()
    KanikoBuilder(**settings()).submit()
    mirror = "registry-vpc.cn-wulanchabu.aliyuncs.com/mirror/kaniko:v1.28.3"
    mirrored = build_pod(KanikoSettings(**settings(builder_image=mirror)))

    (sent,) = posts(fake, "pods")
    image = sent["spec"]["containers"][0]["image"]
    assert re.fullmatch(r"ghcr\.io/osscontainertools/kaniko:v\d+\.\d+\.\d+", image)
    assert mirrored["spec"]["containers"][0]["image"] == mirror


async def test_a_secret_created_since_the_failed_mount_no_longer_fails_the_reattached_build(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    core().delete_namespaced_secret("acr-push", NS)
    fake.default_script = TrainingScript(phases=[("Created", 1.0)], outcome="ImagePullBackOff")
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(5)
    assert (await builder.apoll(handle)).state == "failed"
    create_registry_secret()
    retried = KanikoBuilder(**settings()).submit()  # the task's retry reattaches to the Pending pod
    assert retried == handle
    status = await builder.apoll(retried)  # the old FailedMount event is still listed, but stale
    assert status.state == "running"
    assert status.progress.startswith(f"pod {NS}/{builder.pod_name} Pending: ImagePullBackOff")


def _event(reason: str, message: str, at: int, component: str = "kubelet") -> client.CoreV1Event:
    from datetime import UTC, datetime

    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=f"e{at}"),
        involved_object=client.V1ObjectReference(uid="u"),
        reason=reason,
        message=message,
        source=client.V1EventSource(component=component),
        last_timestamp=datetime.fromtimestamp(T0 + at, UTC),
    )


def test_the_current_mount_problem_is_the_kubelets_latest_and_a_fatal_cause_wins() -> None:
    missing = 'MountVolume.SetUp failed for volume "registry-auth" : secret "acr-push" not found'
    timeout = "Unable to attach or mount volumes: unmounted volumes=[registry-auth]: timed out waiting"
    scheduled = _event("Scheduled", "Successfully assigned", 0, "default-scheduler")
    assert mount_problem([]) == ("", False)
    assert mount_problem([scheduled, _event("FailedMount", missing, 1)]) == (missing, True)
    assert mount_problem(
        [scheduled, _event("FailedMount", missing, 1), _event("FailedMount", timeout, 120)]
    ) == (missing, True)
    assert mount_problem([scheduled, _event("FailedMount", timeout, 1)]) == (timeout, False)
    # Listed out of time order: the kubelet pulled the image after the mount failed.
    assert mount_problem([_event("Pulling", "Pulling image", 30), _event("FailedMount", missing, 1)]) == (
        "",
        False,
    )


def test_only_missing_objects_or_keys_are_fatal_mount_problems() -> None:
    assert mount_is_fatal('MountVolume.SetUp failed for volume "context" : configmap "x" not found')
    assert mount_is_fatal(
        'MountVolume.SetUp failed for volume "context" : configmap references non-existent config key: a'
    )
    assert not mount_is_fatal(
        'MountVolume.SetUp failed for volume "workspace" : mount failed: exit status 32 (timed out)'
    )


async def test_a_deleted_context_map_fails_the_build_and_a_resubmit_recreates_it(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    fake.default_script = succeeding()
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    core().delete_namespaced_config_map(handle["config_map"], NS)  # before the kubelet mounted it
    clock.advance(3)
    status = await builder.apoll(handle)
    assert status.state == "failed" and "retry the task to create it again" in status.message
    # A resubmit (the task's retry) recreates the ConfigMap, and the waiting pod starts.
    again = KanikoBuilder(**settings()).submit()
    assert again["uid"] == handle["uid"] and exists("configmap", handle["config_map"])
    clock.advance(60)
    assert (await builder.apoll(again)).state == "succeeded"


@pytest.mark.slow
@pytest.mark.parametrize(("outcome", "expected"), harness.CANNOT_START_YET)
async def test_a_pod_that_cannot_start_keeps_running_with_the_reason_as_progress(
    fake: KubernetesFake, clock: SteppedClock, outcome: str, expected: str
) -> None:
    await harness.assert_a_pod_that_cannot_start_waits(
        fake, KanikoBuilder(**settings()), clock, outcome, expected
    )


async def test_a_deleted_pod_is_a_failure(fake: KubernetesFake) -> None:
    await harness.assert_a_deleted_pod_fails(fake, KanikoBuilder(**settings()), succeeding(), "image build")


def test_stop_deletes_the_pod_and_the_context_map_and_gone_is_fine(fake: KubernetesFake) -> None:
    handle = harness.stop_twice(
        fake, KanikoBuilder(**settings()), succeeding()
    )  # gone the second time: no error
    assert not exists("configmap", handle["config_map"])
    assert fake.count("DELETE", "/pods/") == 2 and fake.count("DELETE", "/configmaps/") == 2


def test_stop_never_deletes_a_newer_attempts_pod_or_its_context(fake: KubernetesFake) -> None:
    handle = harness.stop_an_older_handle(fake, KanikoBuilder(**settings()), succeeding())
    assert exists("configmap", handle["config_map"])


def test_a_succeeded_build_without_a_digest_is_an_error_and_is_removed(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    fake.default_script = succeeding(digest="")
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(60)
    with pytest.raises(KanikoBuildError, match="succeeded but left no sha256 digest") as raised:
        builder.result(handle)
    assert SUCCESS_LOG[-1] in str(raised.value)
    assert not exists("pod", handle["pod"]) and not exists("configmap", handle["config_map"])


def test_result_before_success_is_an_error(fake: KubernetesFake) -> None:
    handle = harness.assert_result_before_success_fails(fake, KanikoBuilder(**settings()), succeeding())
    assert exists("configmap", handle["config_map"])


def test_a_foreign_pod_under_the_name_is_never_touched(fake: KubernetesFake) -> None:
    harness.assert_a_foreign_pod_is_never_touched(fake, KanikoBuilder(**settings()), "image build")
    assert posts(fake, "configmaps") == []


# -- kaniko's log --------------------------------------------------------------------------------


def test_the_failing_step_is_the_last_step_before_kanikos_error() -> None:
    assert failing_step(FAILURE_LOG) == (
        "RUN apt-get install -y nic-lib-rdma-core",
        "error building image: error building stage: failed to execute command: waiting for process to exit: "
        "exit status 100",
    )
    coloured = log_lines(
        b"\x1b[36mINFO\x1b[0m[0004] COPY check_image.py /opt/\n"
        b"\x1b[31mERRO\x1b[0m[0005] error building image: copying file: no such file\n"
    )
    assert failing_step(coloured) == (
        "COPY check_image.py /opt/",
        "error building image: copying file: no such file",
    )
    # "Cmd:", "Running:" and "Unpacking rootfs as cmd RUN ..." are kaniko's own lines, not steps.
    assert failing_step([*BUILD_LOG[:7], "INFO[0012] Cmd: /bin/sh"]) == ("", "")
    push = [
        "INFO[0001] Retrieving image manifest ubuntu:22.04",
        "error checking push permissions -- UNAUTHORIZED",
    ]
    assert failing_step(push) == ("", "error checking push permissions -- UNAUTHORIZED")


async def test_a_push_permission_error_before_the_first_step_says_so(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    lines = [
        "INFO[0000] Retrieving image manifest nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
        "error checking push permissions -- make sure you entered the correct tag name, and that you are "
        f'authenticated correctly, and try again: checking push permission for "{DESTINATION}": POST '
        f"https://{REGISTRY}/v2/ml/train/blobs/uploads/: UNAUTHORIZED: authentication required",
    ]
    fake.default_script = TrainingScript(phases=[("Running", 2.0)], outcome="Failed", log_lines=lines)
    builder = KanikoBuilder(**settings())
    handle = builder.submit()
    clock.advance(5)
    status = await builder.apoll(handle)
    assert status.message.startswith(
        f"image build pod {NS}/{builder.pod_name} failed before its first build step: error checking push "
        "permissions"
    )
    assert f"(fix: give Secret acr-push push access to {REPOSITORY})" in status.message


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"destination": f"{REPOSITORY}:other"}, f"destination: {REPOSITORY}:other is not tagged {TAG}"),
        ({"destination": "train:" + TAG}, "destination:"),
        ({"destination": f"{REPOSITORY}@{DIGEST}"}, "destination:"),
        ({"tag": "bad tag"}, "tag:"),
        ({"context_files": {"check_image.py": "x"}}, "dockerfile: Dockerfile is not among the context files"),
        ({"context_files": {**CONTEXT, "../etc/passwd": "x"}}, "context_files:"),
        ({"context_files": {**CONTEXT, "/abs": "x"}}, "context_files:"),
        ({"context_files": {**CONTEXT, "big.bin": "x" * 1_000_001}}, "more than a ConfigMap holds"),
        ({"build_args": {"BAD-NAME": "x"}}, "build_args:"),
        ({"extra_args": ["--destination=evil/repo:tag"]}, "--destination is set by the builder"),
        ({"extra_args": ["--no-push"]}, "--no-push is set by the builder"),
        ({"extra_args": ["verbosity"]}, "is not a flag"),
        ({"registry_secret": ""}, "registry_secret:"),
        ({"cache_repo": f"{REPOSITORY}:cache"}, "cache_repo:"),
        ({"password": "x"}, "password:"),
    ],
)
def test_bad_settings_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=re.escape(field)):
        KanikoBuilder(**settings(**overrides))


def test_settings_without_context_are_valid_but_cannot_be_submitted() -> None:
    """The pipeline checks a builder's settings before the context exists (no context_files)."""
    builder = KanikoBuilder(destination=DESTINATION, tag=TAG, registry_secret="acr-push", namespace=NS)
    assert builder.settings.cache_repository == f"{REPOSITORY}/cache"
    with pytest.raises(SpecError, match="context_files: the build context is empty"):
        builder.submit()


def test_pod_names_are_stable_dns_labels_that_differ_per_repository() -> None:
    name = build_pod_name(validate_record(KanikoSettings, settings()))
    assert name == build_pod_name(validate_record(KanikoSettings, settings(build_args={})))
    other = settings(destination=f"{REGISTRY}/ml/other:{TAG}")
    assert name != build_pod_name(validate_record(KanikoSettings, other))
    long = settings(destination=f"{REGISTRY}/ml/{'An-Extremely_long.Repository' * 3}".lower() + f":{TAG}")
    long_name = build_pod_name(validate_record(KanikoSettings, long))
    harness.assert_dns_label(long_name)
