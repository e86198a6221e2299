"""The Kubernetes fake speaks the clients' language: every test drives the real client libraries.

The sync ``kubernetes`` client, ``kubernetes_asyncio`` and the cncf provider's hooks load a
kubeconfig the fake wrote and talk HTTP to it. If a client could not reach, authenticate against or
parse the fake, or raised a different ``ApiException`` status than a cluster makes it raise, these
tests fail; code tested against the fake can then trust that what passes here is what the clients
do against a cluster. The clock is manual wherever timing matters, so no test sleeps for a job.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes_asyncio import client as async_client

from fakes.base import ManualClock
from fakes.kubernetes_fake import KubernetesFake, TrainingScript, volume_attachment_name

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

NS = "training"
GROUP = "kubeflow.org"
IMAGE = "registry.example.com/team/train:1.0"
#: A whole-second start, so log line times (and their RFC 3339 timestamps) are exact.
START = 1_750_000_000.0
JOB = "training.kubeflow.org/job-name"


# --------------------------------------------------------------------------------- bodies


def _template(container: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels or {}},
        "spec": {"containers": [{"name": container, "image": IMAGE, "command": ["sh", "-c", "train"]}]},
    }


def pytorch_job(name: str, workers: int = 2, run_policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A PyTorchJob as arena renders it: Master (Never) + Worker (OnFailure), arena labels."""
    labels = {"app": "pytorchjob", "release": name}
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "Never", "template": _template("pytorch", labels)},
            "Worker": {
                "replicas": workers,
                "restartPolicy": "OnFailure",
                "template": _template("pytorch", labels),
            },
        }
    }
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def tf_job(name: str) -> dict[str, Any]:
    specs = {
        rtype: {"replicas": count, "restartPolicy": "Never", "template": _template("tensorflow")}
        for rtype, count in (("Chief", 1), ("PS", 1), ("Worker", 2))
    }
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs},
    }


def mpi_job_v2beta1(name: str, worker_command: list[str] | None = None) -> dict[str, Any]:
    """An MPIJob v2beta1: the launcher runs mpirun; workers without a command run the operator's sshd."""
    worker = _template("worker")
    worker["spec"]["containers"][0].pop("command")
    if worker_command:
        worker["spec"]["containers"][0]["command"] = worker_command
    specs = {
        "Launcher": {"replicas": 1, "template": _template("launcher")},
        "Worker": {"replicas": 2, "template": worker},
    }
    return {
        "apiVersion": f"{GROUP}/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": specs},
    }


def mpi_job_v1alpha1(name: str) -> dict[str, Any]:
    """arena's mpijob chart: one pod template for launcher and workers, spec.replicas workers."""
    labels = {"app": "mpijob", "release": name}
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "MPIJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 2, "template": _template("mpi", labels)},
    }


# --------------------------------------------------------------------------------- fixtures


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def fake(clock: ManualClock) -> Iterator[KubernetesFake]:
    with KubernetesFake() as server:
        server.clock = clock
        yield server
        assert server.internal_errors == []


@pytest.fixture
def kubeconfig(fake: KubernetesFake, tmp_path: Path) -> Path:
    return fake.write_kubeconfig(tmp_path / "kubeconfig.yaml")


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def k8s_conn(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow connection to the fake, by id.

    The sync hook loads the kubeconfig into the client's process-wide default Configuration, so
    that default is put back after the test.
    """
    extra = {"kube_config_path": str(kubeconfig), "namespace": NS}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_FAKE", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    return "k8s_fake"


def _create(custom: client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    version = body["apiVersion"].split("/")[1]
    return custom.create_namespaced_custom_object(GROUP, version, NS, f"{body['kind'].lower()}s", body)


def _get_job(custom: client.CustomObjectsApi, plural: str, name: str, version: str = "v1") -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, version, NS, plural, name)


def _pods(core: client.CoreV1Api, selector: str) -> dict[str, client.V1Pod]:
    return {pod.metadata.name: pod for pod in core.list_namespaced_pod(NS, label_selector=selector).items}


def _conditions(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]


def _log(core: client.CoreV1Api, pod: str, **options: Any) -> str:
    """A pod log as text. The v36 sync client returns ``str(bytes)`` for preloaded logs, so read raw."""
    return core.read_namespaced_pod_log(pod, NS, _preload_content=False, **options).data.decode()


def _raw_log(api: client.ApiClient, pod: str, query: list[tuple[str, str]]) -> str:
    """A pod log with query parameters the generated client lacks (sinceTime)."""
    response = api.call_api(
        "/api/v1/namespaces/{namespace}/pods/{name}/log",
        "GET",
        path_params={"namespace": NS, "name": pod},
        query_params=query,
        header_params={"Accept": "text/plain"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return response.data.decode()


def _status_of(error: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(error.value.body)


# --------------------------------------------------------------------------------- connection and discovery


def test_kubeconfig_token_and_discovery_serve_the_clients(
    fake: KubernetesFake, api: client.ApiClient, tmp_path: Path
) -> None:
    assert client.VersionApi(api).get_code().major == "1"
    assert [g.name for g in client.ApisApi(api).get_api_versions().groups] == [GROUP]
    core_resources = {r.name for r in client.CoreV1Api(api).get_api_resources().resources}
    assert {"pods", "pods/log", "configmaps", "events", "persistentvolumes"} <= core_resources

    dynamic = DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
    for api_version, kind in (("v1", "PyTorchJob"), ("v2beta1", "MPIJob"), ("v1alpha1", "MPIJob")):
        assert dynamic.resources.get(api_version=f"{GROUP}/{api_version}", kind=kind).namespaced
    assert fake.count("GET", f"/apis/{GROUP}/v1alpha1") == 1
    assert all(r.status == 200 for r in fake.requests)


def test_requests_without_the_bearer_token_get_401(fake: KubernetesFake) -> None:
    configuration = client.Configuration(host=fake.url)
    with client.ApiClient(configuration) as anonymous, pytest.raises(ApiException) as error:
        client.CoreV1Api(anonymous).list_namespaced_pod(NS)
    assert error.value.status == 401
    assert fake.requests[-1].status == 401


def test_an_issued_token_is_accepted_until_it_expires_then_answered_401(
    fake: KubernetesFake, clock: ManualClock, tmp_path: Path
) -> None:
    fake.issue_token("short-lived", expires_at=clock() + 10)
    configuration = client.Configuration()
    kubeconfig = fake.write_kubeconfig(tmp_path / "short.yaml", {"token": "short-lived"})
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as short:
        assert client.CoreV1Api(short).list_namespaced_pod(NS).items == []
        clock.advance(10)
        with pytest.raises(ApiException) as expired:
            client.CoreV1Api(short).list_namespaced_pod(NS)
    assert expired.value.status == 401 and _status_of(expired)["reason"] == "Unauthorized"
    fake.issue_token("short-lived")  # issued again, for good
    with client.ApiClient(configuration) as renewed:
        assert client.CoreV1Api(renewed).list_namespaced_pod(NS).items == []


# --------------------------------------------------------------------------------- PyTorchJob lifecycle


def test_pytorchjob_creates_labelled_pods_and_walks_created_running_succeeded(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, clock: ManualClock
) -> None:
    created = _create(custom, pytorch_job("train-resnet"))
    meta = created["metadata"]
    assert meta["uid"] and meta["generation"] == 1 and int(meta["resourceVersion"]) > 0
    assert meta["creationTimestamp"].endswith("Z")

    pods = _pods(core, f"{JOB}=train-resnet")
    assert sorted(pods) == ["train-resnet-master-0", "train-resnet-worker-0", "train-resnet-worker-1"]
    master = pods["train-resnet-master-0"]
    assert master.metadata.labels["training.kubeflow.org/replica-type"] == "master"
    assert master.metadata.labels["training.kubeflow.org/replica-index"] == "0"
    assert master.metadata.labels["training.kubeflow.org/job-role"] == "master"
    assert master.metadata.labels["release"] == "train-resnet"  # the template's own labels
    assert "training.kubeflow.org/job-role" not in pods["train-resnet-worker-1"].metadata.labels
    assert master.metadata.owner_references[0].uid == meta["uid"]
    assert master.spec.containers[0].name == "pytorch" and master.spec.containers[0].image == IMAGE
    assert (
        master.spec.restart_policy == "Never"
        and pods["train-resnet-worker-0"].spec.restart_policy == "OnFailure"
    )
    assert master.status.phase == "Pending"
    assert master.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert _conditions(_get_job(custom, "pytorchjobs", "train-resnet")) == [
        ("Created", "True", "PyTorchJobCreated")
    ]

    clock.advance(0.1)
    job = _get_job(custom, "pytorchjobs", "train-resnet")
    assert _conditions(job) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "True", "PyTorchJobRunning"),
    ]
    assert job["status"]["replicaStatuses"] == {"Master": {"active": 1}, "Worker": {"active": 2}}
    assert core.read_namespaced_pod("train-resnet-master-0", NS).status.container_statuses[0].state.running

    clock.advance(1)
    job = _get_job(custom, "pytorchjobs", "train-resnet")
    assert _conditions(job) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "False", "PyTorchJobRunning"),
        ("Succeeded", "True", "PyTorchJobSucceeded"),
    ]
    succeeded = job["status"]["conditions"][-1]
    assert succeeded["message"] == "PyTorchJob training/train-resnet successfully completed."
    assert succeeded["lastTransitionTime"] and succeeded["lastUpdateTime"]
    assert job["status"]["replicaStatuses"] == {"Master": {"succeeded": 1}, "Worker": {"succeeded": 2}}
    assert job["status"]["startTime"] <= job["status"]["completionTime"]
    terminated = (
        core.read_namespaced_pod("train-resnet-master-0", NS).status.container_statuses[0].state.terminated
    )
    assert (terminated.reason, terminated.exit_code) == ("Completed", 0)

    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=train-resnet").items
    assert [e.reason for e in events].count("SuccessfulCreatePod") == 3
    assert "PyTorchJobSucceeded" in [e.reason for e in events]


def test_logs_honour_timestamps_since_time_since_seconds_tail_and_container(
    fake: KubernetesFake, api: client.ApiClient, core: client.CoreV1Api, clock: ManualClock
) -> None:
    lines = [f"step {i}" for i in range(5)]
    fake.script_for("logs-", TrainingScript(phases=[("Created", 1), ("Running", 50)], log_lines=lines))
    core.create_namespaced_pod(
        NS, {"metadata": {"name": "logs-pod"}, "spec": {"containers": [{"name": "main", "image": IMAGE}]}}
    )

    with pytest.raises(ApiException) as waiting:
        core.read_namespaced_pod_log("logs-pod", NS)
    assert waiting.value.status == 400
    assert (
        _status_of(waiting)["message"]
        == 'container "main" in pod "logs-pod" is waiting to start: ContainerCreating'
    )

    clock.advance(31)  # running from START+1, a line every 10 s: three emitted by START+31
    assert _log(core, "logs-pod") == "step 0\nstep 1\nstep 2\n"
    stamped = _log(core, "logs-pod", timestamps=True).splitlines()
    assert stamped[0] == "2025-06-15T15:06:51.000000000Z step 0"  # START + 1 s created + 10 s
    clock.advance(20)
    assert _log(core, "logs-pod", tail_lines=2) == "step 3\nstep 4\n"
    assert _log(core, "logs-pod", since_seconds=5) == "step 4\n"  # now START+51, line 4 at START+51
    third = stamped[2].split(" ")[0]
    assert _raw_log(api, "logs-pod", [("sinceTime", third)]) == "step 2\nstep 3\nstep 4\n"
    # sinceTime reaches the kubelet in whole seconds: half a second later still includes that line
    later = third.replace(".000000000Z", ".500000000Z")
    assert (
        _raw_log(api, "logs-pod", [("sinceTime", later), ("timestamps", "true")]).splitlines()[0]
        == stamped[2]
    )
    assert _log(core, "logs-pod", container="main", limit_bytes=4) == "step"

    with pytest.raises(ApiException) as wrong:
        core.read_namespaced_pod_log("logs-pod", NS, container="sidecar")
    assert (wrong.value.status, _status_of(wrong)["message"]) == (
        400,
        "container sidecar is not valid for pod logs-pod",
    )
    assert fake.requests[-1].status == 400


def test_sync_client_v36_returns_the_repr_of_bytes_for_a_preloaded_log(
    core: client.CoreV1Api, clock: ManualClock
) -> None:
    """kubernetes-client/python#2596: the fake answers text/plain, the client mangles it.

    When this fails, the client was fixed and preloaded logs can be read directly again.
    """
    core.create_namespaced_pod(
        NS, {"metadata": {"name": "repr"}, "spec": {"containers": [{"name": "c", "image": IMAGE}]}}
    )
    clock.advance(1)
    assert core.read_namespaced_pod_log("repr", NS).startswith("b'Starting training")
    assert _log(core, "repr").startswith("Starting training")


@pytest.mark.slow
def test_follow_streams_lines_until_the_container_terminates(tmp_path: Path) -> None:
    with KubernetesFake() as fake:  # real clock: the stream has to wait for lines
        fake.script_for(
            "follow-", TrainingScript(phases=[("Created", 0.05), ("Running", 0.3)], log_lines=["a", "b", "c"])
        )
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(fake.write_kubeconfig(tmp_path / "kc")), client_configuration=configuration
        )
        core = client.CoreV1Api(client.ApiClient(configuration))
        core.create_namespaced_pod(
            NS, {"metadata": {"name": "follow-1"}, "spec": {"containers": [{"name": "c", "image": IMAGE}]}}
        )
        while core.read_namespaced_pod("follow-1", NS).status.phase == "Pending":
            time.sleep(0.01)
        assert list(watch.Watch().stream(core.read_namespaced_pod_log, name="follow-1", namespace=NS)) == [
            "a",
            "b",
            "c",
        ]
        assert core.read_namespaced_pod("follow-1", NS).status.phase == "Succeeded"
        assert fake.internal_errors == []


# --------------------------------------------------------------------------------- API semantics


def test_errors_carry_the_api_server_status_codes(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", "absent")
    assert missing.value.status == 404
    status = _status_of(missing)
    assert status.pop("details") == {"name": "absent", "group": GROUP, "kind": "pytorchjobs"}
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pytorchjobs.kubeflow.org "absent" not found',
        "reason": "NotFound",
        "code": 404,
    }
    _create(custom, pytorch_job("dup"))
    with pytest.raises(ApiException) as duplicate:
        _create(custom, pytorch_job("dup"))
    assert (duplicate.value.status, _status_of(duplicate)["reason"]) == (409, "AlreadyExists")

    cm = core.create_namespaced_config_map(
        NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"), data={"a": "1"})
    )
    core.patch_namespaced_config_map("cm", NS, {"data": {"a": "2"}})
    cm.data = {"a": "3"}
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_config_map("cm", NS, cm)
    assert (stale.value.status, _status_of(stale)["reason"]) == (409, "Conflict")

    with pytest.raises(ApiException) as recreated:
        core.create_namespaced_config_map(NS, core.read_namespaced_config_map("cm", NS))
    assert recreated.value.status == 500  # resourceVersion should not be set on objects to be created

    job = _get_job(custom, "pytorchjobs", "dup")
    del job["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as unconditional:
        custom.replace_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", "dup", job)
    assert unconditional.value.status == 422  # custom resources need a resourceVersion to PUT

    with pytest.raises(ApiException) as bad_name:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "Bad_Name"}})
    assert (bad_name.value.status, _status_of(bad_name)["reason"]) == (422, "Invalid")

    body = pytorch_job("no-pytorch-container")
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] = "main"
    with pytest.raises(ApiException) as rejected:
        _create(custom, body)
    # The training-operator's validating webhook denies it: 403, its message after the webhook's name.
    assert (rejected.value.status, _status_of(rejected)["message"]) == (
        403,
        'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '
        "spec.pytorchReplicaSpecs[Master].template.spec.containers: Required value: must have at least one "
        "container with name pytorch",
    )

    with pytest.raises(ApiException) as watching:
        core.list_namespaced_pod(NS, watch=True, _preload_content=False)
    assert watching.value.status == 403


def test_label_and_field_selectors(core: client.CoreV1Api, fake: KubernetesFake) -> None:
    for name, labels in (
        ("a", {"app": "x", "tier": "1"}),
        ("b", {"app": "y", "tier": "2"}),
        ("c", {"app": "x"}),
    ):
        core.create_namespaced_config_map(NS, {"metadata": {"name": name, "labels": labels}})
    core.create_namespaced_config_map("elsewhere", {"metadata": {"name": "d", "labels": {"app": "x"}}})

    def names(selector: str, field: str = "") -> list[str]:
        return [
            cm.metadata.name
            for cm in core.list_namespaced_config_map(NS, label_selector=selector, field_selector=field).items
        ]

    assert names("app=x") == ["a", "c"]
    assert names("app==x,tier=1") == ["a"]
    assert names("app!=x") == ["b"]
    assert names("tier in (1, 2)") == ["a", "b"]
    assert names("tier notin (1)") == ["b", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    assert names("", "metadata.name=b") == ["b"]
    assert names("", "metadata.name!=b") == ["a", "c"]
    assert fake.requests[-1].query["fieldSelector"] == "metadata.name!=b"

    listed = core.list_config_map_for_all_namespaces(label_selector="app=x")
    assert listed.kind == "ConfigMapList" and listed.api_version == "v1" and listed.metadata.resource_version
    assert [(i.metadata.namespace, i.metadata.name) for i in listed.items] == [
        ("elsewhere", "d"),
        (NS, "a"),
        (NS, "c"),
    ]

    first = core.list_namespaced_config_map(NS, limit=2)
    rest = core.list_namespaced_config_map(NS, limit=2, _continue=first.metadata._continue)
    assert [i.metadata.name for i in first.items + rest.items] == ["a", "b", "c"]

    for bad in ("app in x", "app=x=y"):
        with pytest.raises(ApiException) as error:
            names(bad)
        assert error.value.status == 400
    with pytest.raises(ApiException) as unsupported:
        names("", "data.a=1")
    assert _status_of(unsupported)["message"] == "field label not supported: data.a"


def test_patches_by_media_type_bump_resource_version(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, fake: KubernetesFake
) -> None:
    pod = core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "patched"},
            "spec": {"containers": [{"name": "a", "image": IMAGE}, {"name": "b", "image": IMAGE}]},
        },
    )
    # a dict body goes out as a strategic merge patch: containers merge by name
    merged = core.patch_namespaced_pod(
        "patched", NS, {"spec": {"containers": [{"name": "b", "image": "other:2"}]}}
    )
    assert [(c.name, c.image) for c in merged.spec.containers] == [("a", IMAGE), ("b", "other:2")]
    assert int(merged.metadata.resource_version) > int(pod.metadata.resource_version)
    assert merged.metadata.generation == 2
    assert fake.requests[-1].content_type == "application/strategic-merge-patch+json"

    core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}, "data": {"a": "1", "b": "2"}})
    ops = [{"op": "replace", "path": "/data/a", "value": "9"}, {"op": "remove", "path": "/data/b"}]
    assert core.patch_namespaced_config_map("cm", NS, ops).data == {
        "a": "9"
    }  # a list goes out as a JSON patch
    assert fake.requests[-1].content_type == "application/json-patch+json"
    with pytest.raises(ApiException) as failed_test:
        core.patch_namespaced_config_map("cm", NS, [{"op": "test", "path": "/data/a", "value": "0"}])
    assert failed_test.value.status == 422

    job = _create(custom, pytorch_job("patch-me"))
    patched = custom.patch_namespaced_custom_object(
        GROUP, "v1", NS, "pytorchjobs", "patch-me", {"metadata": {"labels": {"x": "y"}}}
    )
    assert fake.requests[-1].content_type == "application/merge-patch+json"
    assert (
        patched["metadata"]["labels"]["x"] == "y"
        and patched["metadata"]["generation"] == job["metadata"]["generation"]
    )
    with pytest.raises(ApiException) as strategic:
        custom.patch_namespaced_custom_object(
            GROUP,
            "v1",
            NS,
            "pytorchjobs",
            "patch-me",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert strategic.value.status == 415
    stale = {"metadata": {"resourceVersion": job["metadata"]["resourceVersion"], "labels": {"x": "z"}}}
    with pytest.raises(ApiException) as conflict:
        custom.patch_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", "patch-me", stale)
    assert conflict.value.status == 409


def test_deleting_a_job_collects_its_pods_and_owned_config_map(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    job = _create(custom, pytorch_job("gc-job"))
    owner = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "PyTorchJob",
        "name": "gc-job",
        "uid": job["metadata"]["uid"],
    }
    core.create_namespaced_config_map(
        NS, {"metadata": {"name": "gc-job-pytorchjob", "ownerReferences": [owner]}}
    )
    core.create_namespaced_config_map(
        NS, {"metadata": {"name": "kept-job-cm", "ownerReferences": [{**owner, "uid": "x"}]}}
    )
    assert len(_pods(core, f"{JOB}=gc-job")) == 3

    answer = custom.delete_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", "gc-job")
    assert answer["status"] == "Success" and answer["details"]["uid"] == job["metadata"]["uid"]
    assert _pods(core, f"{JOB}=gc-job") == {}
    assert [
        cm.metadata.name for cm in core.list_namespaced_config_map(NS).items
    ] == []  # a dangling owner too
    with pytest.raises(ApiException) as again:
        custom.delete_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", "gc-job")
    assert again.value.status == 404

    orphaned = _create(custom, pytorch_job("orphan-job"))
    owner["uid"] = orphaned["metadata"]["uid"]
    core.create_namespaced_config_map(NS, {"metadata": {"name": "survivor", "ownerReferences": [owner]}})
    custom.delete_namespaced_custom_object(
        GROUP, "v1", NS, "pytorchjobs", "orphan-job", propagation_policy="Orphan"
    )
    assert core.read_namespaced_config_map("survivor", NS).metadata.owner_references in (None, [])
    assert len(_pods(core, f"{JOB}=orphan-job")) == 3
    deleted_pod = core.delete_namespaced_pod("orphan-job-worker-0", NS)
    assert deleted_pod.metadata.name == "orphan-job-worker-0"  # pods answer the deleted object


def _bare_pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": IMAGE}], **spec}}


def test_a_deleted_running_pod_terminates_as_long_as_its_containers_take_at_most_its_grace_period(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    fake.script_for("slow-", TrainingScript(phases=[("Running", 3600.0)], stop_seconds=45.0))
    fake.script_for("quick-", TrainingScript(phases=[("Running", 3600.0)], stop_seconds=5.0))
    core.create_namespaced_pod(NS, _bare_pod("slow-pod", terminationGracePeriodSeconds=40))
    core.create_namespaced_pod(NS, _bare_pod("quick-pod"))
    clock.advance(1)

    answered = core.delete_namespaced_pod("slow-pod", NS)
    core.delete_namespaced_pod("quick-pod", NS)
    terminating = core.read_namespaced_pod("slow-pod", NS)

    assert answered.metadata.deletion_grace_period_seconds == 40
    assert answered.metadata.deletion_timestamp.timestamp() == clock() + 40
    assert terminating.metadata.deletion_timestamp and terminating.status.phase == "Running"
    clock.advance(5)
    assert sorted(p.metadata.name for p in core.list_namespaced_pod(NS).items) == ["slow-pod"]
    clock.advance(34)
    assert core.read_namespaced_pod("slow-pod", NS).metadata.deletion_timestamp
    clock.advance(1)  # the grace period is over: the kubelet killed the containers
    assert core.list_namespaced_pod(NS).items == []


def test_unscheduled_finished_and_zero_grace_pods_are_deleted_at_once(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    fake.script_for("stuck-", TrainingScript(outcome="Unschedulable"))
    fake.script_for("long-", TrainingScript(phases=[("Running", 3600.0)], stop_seconds=60.0))
    for name in ("stuck-pod", "done-pod", "long-pod"):
        core.create_namespaced_pod(NS, _bare_pod(name))
    clock.advance(1)
    assert core.read_namespaced_pod("done-pod", NS).status.phase == "Succeeded"

    core.delete_namespaced_pod("stuck-pod", NS)
    core.delete_namespaced_pod("done-pod", NS)
    core.delete_namespaced_pod("long-pod", NS, grace_period_seconds=0)

    assert core.list_namespaced_pod(NS).items == []


def test_finalizers_hold_a_deleted_object_until_they_are_removed(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "held", "finalizers": ["x.io/hold"]}})

    core.delete_namespaced_config_map("held", NS)
    held = core.read_namespaced_config_map("held", NS)
    core.patch_namespaced_config_map("held", NS, {"metadata": {"finalizers": []}})

    assert held.metadata.deletion_timestamp and held.metadata.finalizers == ["x.io/hold"]
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("held", NS)
    assert gone.value.status == 404


def test_foreground_deletion_holds_the_job_until_its_pods_are_gone(
    fake: KubernetesFake, core: client.CoreV1Api, custom: client.CustomObjectsApi, clock: ManualClock
) -> None:
    fake.script_for("fg-", TrainingScript(phases=[("Created", 0.05), ("Running", 3600.0)], stop_seconds=5.0))
    _create(custom, pytorch_job("fg-job"))
    clock.advance(1)

    answer = custom.delete_namespaced_custom_object(
        GROUP, "v1", NS, "pytorchjobs", "fg-job", propagation_policy="Foreground"
    )
    clock.advance(1)
    held = _get_job(custom, "pytorchjobs", "fg-job")
    pods = _pods(core, f"{JOB}=fg-job")

    assert answer["metadata"]["finalizers"] == ["foregroundDeletion"] == held["metadata"]["finalizers"]
    assert held["metadata"]["deletionTimestamp"] and len(pods) == 3
    assert all(pod.metadata.deletion_timestamp for pod in pods.values())
    assert held["status"] == answer["status"], "the operator leaves a job being deleted alone"
    clock.advance(4)
    assert _pods(core, f"{JOB}=fg-job") == {}
    with pytest.raises(ApiException) as gone:
        _get_job(custom, "pytorchjobs", "fg-job")
    assert gone.value.status == 404


def test_background_deletion_removes_the_job_at_once_and_its_pods_after_their_stop(
    fake: KubernetesFake, core: client.CoreV1Api, custom: client.CustomObjectsApi, clock: ManualClock
) -> None:
    fake.script_for("bg-", TrainingScript(phases=[("Created", 0.05), ("Running", 3600.0)], stop_seconds=5.0))
    _create(custom, pytorch_job("bg-job"))
    clock.advance(1000)  # the first log lines are out

    custom.delete_namespaced_custom_object(GROUP, "v1", NS, "pytorchjobs", "bg-job")

    with pytest.raises(ApiException) as gone:
        _get_job(custom, "pytorchjobs", "bg-job")
    assert gone.value.status == 404
    pods = _pods(core, f"{JOB}=bg-job")
    assert len(pods) == 3 and all(pod.metadata.deletion_timestamp for pod in pods.values())
    assert _log(core, "bg-job-master-0"), "a terminating pod's log is still there"
    clock.advance(5)
    assert _pods(core, f"{JOB}=bg-job") == {}


# --------------------------------------------------------------------------------- test hook


def test_on_create_gets_the_stored_training_job_and_holds_its_answer_while_others_are_served(
    fake: KubernetesFake, kubeconfig: Path, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    release, hooked = threading.Event(), threading.Event()
    created: list[dict[str, Any]] = []

    def hold(job: dict[str, Any]) -> None:
        created.append(job)
        hooked.set()
        release.wait(10)

    fake.on_create = hold
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with ThreadPoolExecutor(max_workers=1) as pool, client.ApiClient(configuration) as other:
        pending = pool.submit(_create, custom, pytorch_job("held-answer"))
        assert hooked.wait(10)
        stored = _get_job(client.CustomObjectsApi(other), "pytorchjobs", "held-answer")
        answered_early = pending.done()
        release.set()
        answer = pending.result(timeout=10)

    assert not answered_early
    assert created[0]["metadata"]["uid"] == stored["metadata"]["uid"] == answer["metadata"]["uid"]
    assert created[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    core.create_namespaced_config_map(NS, {"metadata": {"name": "not-a-job"}})
    with pytest.raises(ApiException):
        _create(custom, pytorch_job("held-answer"))
    assert len(created) == 1, "only training CRs that were stored reach the hook"


# --------------------------------------------------------------------------------- failure scripts


def test_oom_killed_worker_fails_the_job(
    fake: KubernetesFake, core: client.CoreV1Api, custom: client.CustomObjectsApi, clock: ManualClock
) -> None:
    fake.script_for("oom-", TrainingScript(outcome="OOMKilled", failing_replica="worker"))
    _create(custom, pytorch_job("oom-job"))
    clock.advance(1)

    worker = core.read_namespaced_pod("oom-job-worker-0", NS)
    terminated = worker.status.container_statuses[0].state.terminated
    assert (worker.status.phase, terminated.reason, terminated.exit_code) == ("Failed", "OOMKilled", 137)
    assert core.read_namespaced_pod("oom-job-master-0", NS).status.phase == "Running"
    job = _get_job(custom, "pytorchjobs", "oom-job")
    assert _conditions(job)[-2:] == [
        ("Running", "False", "PyTorchJobRunning"),
        ("Failed", "True", "PyTorchJobFailed"),
    ]
    assert (
        job["status"]["conditions"][-1]["message"]
        == "PyTorchJob oom-job is failed because 1 Worker replica(s) failed."
    )
    assert job["status"]["replicaStatuses"]["Worker"] == {"active": 1, "failed": 1}
    events = {
        e.reason: e.message
        for e in core.list_namespaced_event(NS, field_selector="involvedObject.name=oom-job").items
    }
    assert events["ExitedWithCode"] == "Pod: training.oom-job-worker-0 exited with code 137"


def test_exit_code_failure_of_the_master(
    fake: KubernetesFake, core: client.CoreV1Api, custom: client.CustomObjectsApi, clock: ManualClock
) -> None:
    fake.script_for(
        "exit-", TrainingScript(outcome="ExitCode", exit_code=3, failing_replica="master", message="boom")
    )
    _create(custom, pytorch_job("exit-job", workers=1))
    clock.advance(1)
    terminated = (
        core.read_namespaced_pod("exit-job-master-0", NS).status.container_statuses[0].state.terminated
    )
    assert (terminated.reason, terminated.exit_code) == ("Error", 3)
    assert _get_job(custom, "pytorchjobs", "exit-job")["status"]["conditions"][-1]["message"] == "boom"


def test_unschedulable_job_stays_created_with_pending_pods_and_an_event(
    fake: KubernetesFake, core: client.CoreV1Api, custom: client.CustomObjectsApi, clock: ManualClock
) -> None:
    fake.script_for("big-", TrainingScript(outcome="Unschedulable"))
    _create(custom, pytorch_job("big-job"))
    clock.advance(3600)

    pod = core.read_namespaced_pod("big-job-worker-1", NS)
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    scheduled = pod.status.conditions[0]
    assert (scheduled.type, scheduled.status, scheduled.reason) == ("PodScheduled", "False", "Unschedulable")
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=big-job-worker-1").items
    assert [(e.type, e.reason, e.message) for e in events] == [
        ("Warning", "FailedScheduling", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    ]
    assert events[0].involved_object.kind == "Pod" and events[0].source.component == "default-scheduler"
    assert _conditions(_get_job(custom, "pytorchjobs", "big-job")) == [
        ("Created", "True", "PyTorchJobCreated")
    ]
    with pytest.raises(ApiException) as no_host:
        core.read_namespaced_pod_log("big-job-master-0", NS)
    assert _status_of(no_host)["message"] == "pod big-job-master-0 does not have a host assigned"


def test_image_pull_backoff_keeps_containers_waiting(
    fake: KubernetesFake, core: client.CoreV1Api, custom: client.CustomObjectsApi, clock: ManualClock
) -> None:
    fake.script_for("pull-", TrainingScript(outcome="ImagePullBackOff"))
    _create(custom, pytorch_job("pull-job", workers=1))
    clock.advance(600)

    status = core.read_namespaced_pod("pull-job-master-0", NS).status
    assert status.phase == "Pending"
    waiting = status.container_statuses[0].state.waiting
    assert (waiting.reason, waiting.message) == ("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
    reasons = [
        e.reason
        for e in core.list_namespaced_event(NS, field_selector="involvedObject.name=pull-job-master-0").items
    ]
    assert reasons == ["Scheduled", "Failed", "BackOff"]
    assert _conditions(_get_job(custom, "pytorchjobs", "pull-job")) == [
        ("Created", "True", "PyTorchJobCreated")
    ]
    with pytest.raises(ApiException) as not_started:
        core.read_namespaced_pod_log("pull-job-master-0", NS)
    assert _status_of(not_started)["message"].endswith(
        "is waiting to start: trying and failing to pull image"
    )


def test_an_evicted_pod_fails_with_the_kubelets_reason_and_disruption_condition(
    fake: KubernetesFake, core: client.CoreV1Api, custom: client.CustomObjectsApi, clock: ManualClock
) -> None:
    fake.script_for("evict-", TrainingScript(outcome="Evicted", failing_replica="master"))
    _create(custom, pytorch_job("evict-job", workers=1))
    clock.advance(1)

    status = core.read_namespaced_pod("evict-job-master-0", NS).status
    disruption = next(c for c in status.conditions if c.type == "DisruptionTarget")
    terminated = status.container_statuses[0].state.terminated

    assert (status.phase, status.reason) == ("Failed", "Evicted")
    assert status.message.startswith("The node was low on resource: memory.")
    assert (disruption.status, disruption.reason, disruption.message) == (
        "True",
        "TerminationByKubelet",
        status.message,
    )
    assert terminated.exit_code == 137
    assert _conditions(_get_job(custom, "pytorchjobs", "evict-job"))[-1] == (
        "Failed",
        "True",
        "PyTorchJobFailed",
    )


def test_a_failed_mount_keeps_the_pod_container_creating_with_the_kubelets_warning(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    fake.script_for("mount-", TrainingScript(outcome="FailedMount"))
    mounted = _bare_pod(
        "mount-pod", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "nas"}}]
    )
    mounted["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/mnt/data"}]
    core.create_namespaced_pod(NS, mounted)
    clock.advance(600)

    pod = core.read_namespaced_pod("mount-pod", NS)
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=mount-pod").items

    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert [(e.type, e.reason, e.message) for e in events if e.type == "Warning"] == [
        (
            "Warning",
            "FailedMount",
            'MountVolume.SetUp failed for volume "data" : rpc error: code = Internal desc = mount failed: '
            "exit status 32",
        )
    ]


# --------------------------------------------------------------------------------- other job kinds


def test_tfjob_runs_chief_ps_and_workers(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, clock: ManualClock
) -> None:
    _create(custom, tf_job("tf-job"))
    pods = _pods(core, f"{JOB}=tf-job")
    assert sorted(pods) == ["tf-job-chief-0", "tf-job-ps-0", "tf-job-worker-0", "tf-job-worker-1"]
    roles = {name: pod.metadata.labels.get("training.kubeflow.org/job-role") for name, pod in pods.items()}
    assert roles == {
        "tf-job-chief-0": "master",
        "tf-job-ps-0": None,
        "tf-job-worker-0": None,
        "tf-job-worker-1": None,
    }
    clock.advance(1)
    job = _get_job(custom, "tfjobs", "tf-job")
    assert _conditions(job)[-1] == ("Succeeded", "True", "TFJobSucceeded")
    assert job["status"]["replicaStatuses"]["PS"] == {"succeeded": 1}


def elastic_job(name: str, **policy: Any) -> dict[str, Any]:
    """An elastic PyTorchJob as the training-operator's examples write it: Worker replicas only."""
    body = pytorch_job(name, workers=2)
    del body["spec"]["pytorchReplicaSpecs"]["Master"]
    body["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 4, "rdzvBackend": "c10d", **policy}
    return body


WEBHOOK = 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '


def _without_workers(body: dict[str, Any]) -> dict[str, Any]:
    del body["spec"]["pytorchReplicaSpecs"]["Worker"]
    return body


def _with(body: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("body", "denied"),
    [
        (
            _without_workers(elastic_job("no-workers")),
            "spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if elastic policy is used",
        ),
        (
            _with(elastic_job("both-nproc", nProcPerNode=8), ["spec", "nprocPerNode"], "8"),
            "spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode",
        ),
        (
            _with(pytorch_job("two-masters"), ["spec", "pytorchReplicaSpecs", "Master", "replicas"], 2),
            "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1",
        ),
        (
            pytorch_job("9-starts-with-a-digit"),
            'metadata.name: Invalid value: "9-starts-with-a-digit": should match: a DNS-1035 label',
        ),
    ],
)
def test_the_pytorchjob_webhook_denies_what_the_training_operator_denies(
    custom: client.CustomObjectsApi, body: dict[str, Any], denied: str
) -> None:
    with pytest.raises(ApiException) as rejected:
        _create(custom, body)
    assert rejected.value.status == 403 and _status_of(rejected)["reason"] == "Forbidden"
    assert _status_of(rejected)["message"].startswith(WEBHOOK + denied)


def _env(pod: client.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def test_pytorchjob_pods_get_the_operators_master_or_rendezvous_variables(
    custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    _create(custom, pytorch_job("ranks", workers=2))
    worker = _env(core.read_namespaced_pod("ranks-worker-1", NS))
    assert {k: worker[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES")} == {
        "MASTER_ADDR": "ranks-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "3",
        "RANK": "2",
        "PET_NNODES": "3",
    }
    assert worker["PET_NPROC_PER_NODE"] == "auto" and worker["PYTHONUNBUFFERED"] == "1"

    _create(custom, elastic_job("stretch", nProcPerNode=8))
    pods = _pods(core, f"{JOB}=stretch")
    assert sorted(pods) == ["stretch-worker-0", "stretch-worker-1"]
    env = _env(pods["stretch-worker-1"])
    assert "MASTER_ADDR" not in env and "RANK" not in env and "WORLD_SIZE" not in env
    assert {k: v for k, v in env.items() if k.startswith("PET_")} == {
        "PET_RDZV_ENDPOINT": "stretch-worker-0:23456",
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "1:4",
        "PET_NPROC_PER_NODE": "8",
    }
    port = pods["stretch-worker-0"].spec.containers[0].ports[0]
    assert (port.name, port.container_port) == ("pytorchjob-port", 23456)


def test_mpijob_v2beta1_has_a_launcher_and_workers(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, clock: ManualClock
) -> None:
    _create(custom, mpi_job_v2beta1("mpi-job"))
    pods = _pods(core, f"{JOB}=mpi-job")
    launcher = next(name for name in pods if name.startswith("mpi-job-launcher-"))
    assert len(launcher) == len("mpi-job-launcher-") + 5
    assert sorted(set(pods) - {launcher}) == ["mpi-job-worker-0", "mpi-job-worker-1"]
    assert pods[launcher].metadata.labels["training.kubeflow.org/job-role"] == "launcher"
    assert pods["mpi-job-worker-1"].metadata.labels["training.kubeflow.org/replica-index"] == "1"
    clock.advance(1)
    job = _get_job(custom, "mpijobs", "mpi-job", "v2beta1")
    assert _conditions(job)[-1] == ("Succeeded", "True", "MPIJobSucceeded")
    assert job["status"]["replicaStatuses"] == {"Launcher": {"succeeded": 1}, "Worker": {"succeeded": 2}}
    assert _log(core, launcher).endswith("Training finished\n")


def test_mpijob_v1alpha1_reports_launcher_status(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, clock: ManualClock
) -> None:
    _create(custom, mpi_job_v1alpha1("old-mpi"))
    pods = _pods(core, "release=old-mpi,app=mpijob")  # how arena finds them
    assert sorted(p.metadata.labels["mpi_role_type"] for p in pods.values()) == [
        "launcher",
        "worker",
        "worker",
    ]
    clock.advance(0.1)
    assert _get_job(custom, "mpijobs", "old-mpi", "v1alpha1")["status"] == {
        "launcherStatus": "Active",
        "workerReplicas": 2,
    }
    clock.advance(1)
    job = _get_job(custom, "mpijobs", "old-mpi", "v1alpha1")
    assert job["apiVersion"] == f"{GROUP}/v1alpha1" and job["status"]["launcherStatus"] == "Succeeded"


def test_mpijob_v2beta1_workers_without_a_command_run_the_operators_sshd(
    custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    _create(custom, mpi_job_v2beta1("ssh-ok"))
    pods = _pods(core, f"{JOB}=ssh-ok")
    launcher = next(pod for name, pod in pods.items() if "-launcher-" in name)
    assert pods["ssh-ok-worker-0"].spec.containers[0].command == ["/usr/sbin/sshd", "-De"]
    assert launcher.spec.containers[0].command == ["sh", "-c", "train"]


def test_mpijob_v2beta1_workers_with_a_command_leave_the_launchers_mpirun_unanswered(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, clock: ManualClock
) -> None:
    """mpi-operator newWorker starts sshd only in a worker whose command and args are both empty."""
    _create(custom, mpi_job_v2beta1("ssh-refused", worker_command=["sh", "-c", "train"]))
    pods = _pods(core, f"{JOB}=ssh-refused")
    launcher = next(name for name in pods if "-launcher-" in name)
    assert pods["ssh-refused-worker-0"].spec.containers[0].command == ["sh", "-c", "train"]
    clock.advance(1)

    log = _log(core, launcher)
    assert (
        "ssh: connect to host ssh-refused-worker-0.ssh-refused.training.svc port 22: Connection refused"
        in log
    )
    assert "ssh-refused-worker-1.ssh-refused.training.svc port 22" in log
    assert "ORTE was unable to reliably start one or more daemons." in log
    terminated = core.read_namespaced_pod(launcher, NS).status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code) == ("Error", 1)
    job = _get_job(custom, "mpijobs", "ssh-refused", "v2beta1")
    failed = job["status"]["conditions"][-1]
    assert (failed["type"], failed["status"], failed["reason"]) == ("Failed", "True", "BackoffLimitExceeded/")
    assert failed["message"] == "Job has reached the specified backoff limit: "
    assert core.read_namespaced_pod("ssh-refused-worker-0", NS).status.phase == "Running"


def test_mpijob_v1alpha1_workers_sleep_while_the_launcher_runs_the_template_command(
    custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    """arena's old mpi-operator (v1alpha1 newWorker) runs every worker as `sleep 365d`."""
    _create(custom, mpi_job_v1alpha1("old-sleep"))
    pods = _pods(core, "release=old-sleep")
    roles = {p.metadata.labels["mpi_role_type"]: p.spec.containers[0] for p in pods.values()}
    assert (roles["worker"].command, roles["worker"].args) == (["sleep"], ["365d"])
    assert roles["launcher"].command == ["sh", "-c", "train"]


def test_clean_pod_policy_and_ttl_after_finished(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, clock: ManualClock
) -> None:
    _create(
        custom, pytorch_job("ttl-job", run_policy={"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60})
    )
    clock.advance(1)
    assert _conditions(_get_job(custom, "pytorchjobs", "ttl-job"))[-1][0] == "Succeeded"
    assert _pods(core, f"{JOB}=ttl-job") == {}
    clock.advance(60)
    with pytest.raises(ApiException) as gone:
        _get_job(custom, "pytorchjobs", "ttl-job")
    assert gone.value.status == 404


# --------------------------------------------------------------------------------- volumes, secrets, faults


def test_claim_binds_to_a_static_volume_by_selector(core: client.CoreV1Api) -> None:
    volume = {
        "metadata": {"name": "cpfs-pv", "labels": {"alicloud-pvname": "cpfs-pv"}},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": "nasplugin.csi.alibabacloud.com", "volumeHandle": "cpfs-pv"},
        },
    }
    core.create_persistent_volume(volume)
    claim = {
        "metadata": {"name": "cpfs-data"},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "20Gi"}},
            "selector": {"matchLabels": {"alicloud-pvname": "cpfs-pv"}},
        },
    }
    assert core.create_namespaced_persistent_volume_claim(NS, claim).status.phase == "Pending"
    bound = core.read_namespaced_persistent_volume_claim("cpfs-data", NS)
    assert (bound.status.phase, bound.spec.volume_name, bound.status.capacity) == (
        "Bound",
        "cpfs-pv",
        {"storage": "100Gi"},
    )
    assert core.read_persistent_volume("cpfs-pv").spec.claim_ref.name == "cpfs-data"
    core.delete_namespaced_persistent_volume_claim("cpfs-data", NS)
    assert core.read_persistent_volume("cpfs-pv").status.phase == "Released"


def test_lists_page_by_key_with_one_resource_version_and_count_only_unselected_lists(
    core: client.CoreV1Api,
) -> None:
    for name in ("a", "b", "c", "d"):
        core.create_namespaced_config_map(NS, {"metadata": {"name": name, "labels": {"app": "x"}}})

    first = core.list_namespaced_config_map(NS, limit=2)
    assert [i.metadata.name for i in first.items] == ["a", "b"]
    assert first.metadata.remaining_item_count == 2 and first.metadata._continue
    core.delete_namespaced_config_map("b", NS)  # deleted between pages: nothing after it is skipped
    core.create_namespaced_config_map(NS, {"metadata": {"name": "e"}})
    rest = core.list_namespaced_config_map(NS, limit=2, _continue=first.metadata._continue)
    assert [i.metadata.name for i in rest.items] == ["c", "d"]
    assert rest.metadata.resource_version == first.metadata.resource_version
    last = core.list_namespaced_config_map(NS, limit=2, _continue=rest.metadata._continue)
    assert [i.metadata.name for i in last.items] == ["e"] and not last.metadata._continue

    selected = core.list_namespaced_config_map(NS, limit=1, label_selector="app=x")
    assert selected.metadata._continue and selected.metadata.remaining_item_count is None
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_config_map(NS, limit=1, _continue="not-a-token")
    assert bad.value.status == 400


def _lingjun_volume(name: str, handle: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"alicloud-pvname": name}},
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteMany"],
            "csi": {"driver": "bmcpfsplugin.csi.alibabacloud.com", "volumeHandle": handle},
            "claimRef": {"namespace": NS, "name": name},
        },
    }


def _claim(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Ti"}},
            "storageClassName": "",
            "volumeName": name,
        },
    }


def _pod_with_claims(name: str, node: str, claims: list[str]) -> dict[str, Any]:
    mounts = [{"name": c, "mountPath": f"/mnt/{c}"} for c in claims]
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": IMAGE, "volumeMounts": mounts}],
            "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims],
        },
    }


def test_two_volumes_with_one_handle_do_not_both_attach_to_a_node(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    """The attacher names a VolumeAttachment after (handle, driver, node): a second PV with the
    same handle on the node finds the name taken, and its pod never starts."""
    fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 60.0)])
    for name in ("v1", "v2", "v3"):
        handle = "bmcpfs-0123" if name != "v3" else "bmcpfs-0123+/v3"
        core.create_persistent_volume(_lingjun_volume(name, handle))
        core.create_namespaced_persistent_volume_claim(NS, _claim(name))
    core.create_namespaced_pod(NS, _pod_with_claims("first", "node-a", ["v1"]))
    clock.advance(0.1)
    core.create_namespaced_pod(NS, _pod_with_claims("second", "node-a", ["v2", "v3"]))
    core.create_namespaced_pod(NS, _pod_with_claims("elsewhere", "node-b", ["v2"]))
    clock.advance(0.1)

    driver = "bmcpfsplugin.csi.alibabacloud.com"
    shared = volume_attachment_name("bmcpfs-0123", driver, "node-a")
    assert shared == "csi-" + hashlib.sha256(f"bmcpfs-0123{driver}node-a".encode()).hexdigest()
    attachments = {name: a["persistentVolumeName"] for name, a in fake.volume_attachments.items()}
    assert attachments == {
        shared: "v1",
        volume_attachment_name("bmcpfs-0123+/v3", driver, "node-a"): "v3",
        volume_attachment_name("bmcpfs-0123", driver, "node-b"): "v2",
    }
    assert core.read_namespaced_pod("first", NS).status.phase == "Running"
    assert core.read_namespaced_pod("elsewhere", NS).status.phase == "Running"
    second = core.read_namespaced_pod("second", NS).status
    assert (
        second.phase == "Pending" and second.container_statuses[0].state.waiting.reason == "ContainerCreating"
    )
    (event,) = core.list_namespaced_event(NS, field_selector="involvedObject.name=second,type=Warning").items
    assert (event.reason, event.source.component) == ("FailedAttachVolume", "attachdetach-controller")
    assert event.message.startswith(
        'AttachVolume.Attach failed for volume "v2" : volume handle "bmcpfs-0123"'
    )
    assert f'as PersistentVolume "v1" (VolumeAttachment {shared})' in event.message

    core.delete_namespaced_pod("first", NS)  # detached: the handle is free on the node again
    clock.advance(0.1)
    assert core.read_namespaced_pod("second", NS).status.phase == "Running"
    assert fake.volume_attachments[shared]["persistentVolumeName"] == "v2"


def test_secret_string_data_is_encoded_and_bad_base64_refused(core: client.CoreV1Api) -> None:
    secret = core.create_namespaced_secret(NS, {"metadata": {"name": "s"}, "stringData": {"token": "abc"}})
    assert secret.data == {"token": "YWJj"} and secret.string_data is None
    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_secret(NS, {"metadata": {"name": "t"}, "data": {"token": "not base64!"}})
    assert invalid.value.status == 422


def test_a_missing_secret_key_keeps_a_bare_pod_waiting_in_create_container_config_error(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    fake.script_for("env-", TrainingScript(phases=[("Created", 1.0), ("Running", 1.0)], log_lines=["ok"]))

    def pod(name: str, key: str, optional: bool = False) -> dict[str, Any]:
        ref = {"name": "creds", "key": key, **({"optional": True} if optional else {})}
        env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": ref}}]
        return {
            "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": IMAGE, "env": env}]},
        }

    for name, key, optional in (("env-no-secret", "token", False), ("env-optional", "token", True)):
        core.create_namespaced_pod(NS, pod(name, key, optional))
    clock.advance(10)
    waiting = core.read_namespaced_pod("env-no-secret", NS).status.container_statuses[0].state.waiting
    assert (waiting.reason, waiting.message) == ("CreateContainerConfigError", 'secret "creds" not found')
    assert core.read_namespaced_pod("env-no-secret", NS).status.phase == "Pending"
    assert core.read_namespaced_pod("env-optional", NS).status.phase == "Succeeded"
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=env-no-secret").items
    assert [(e.reason, e.message) for e in events][-1] == ("Failed", 'Error: secret "creds" not found')
    with pytest.raises(ApiException) as not_started:
        core.read_namespaced_pod_log("env-no-secret", NS)
    assert _status_of(not_started)["message"].endswith("is waiting to start: CreateContainerConfigError")

    core.create_namespaced_secret(NS, {"metadata": {"name": "creds"}, "stringData": {"other": "x"}})
    waiting = core.read_namespaced_pod("env-no-secret", NS).status.container_statuses[0].state.waiting
    assert waiting.message == f"couldn't find key token in Secret {NS}/creds"

    core.patch_namespaced_secret("creds", NS, {"stringData": {"token": "abc"}})
    assert core.read_namespaced_pod("env-no-secret", NS).status.phase == "Succeeded"
    core.delete_namespaced_secret("creds", NS)  # a started container keeps its environment
    assert core.read_namespaced_pod("env-no-secret", NS).status.phase == "Succeeded"


def test_missing_config_map_or_secret_volumes_keep_a_pod_container_creating_with_failed_mount(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    fake.script_for("vol-", TrainingScript(phases=[("Created", 1.0), ("Running", 1.0)], log_lines=["ok"]))
    volumes = [
        {"name": "context", "configMap": {"name": "ctx"}},
        {
            "name": "auth",
            "secret": {"secretName": "push", "items": [{"key": ".dockerconfigjson", "path": "c"}]},
        },
        {"name": "maybe", "secret": {"secretName": "absent", "optional": True}},
    ]
    mounts = [{"name": v["name"], "mountPath": f"/m/{v['name']}"} for v in volumes]
    container = {"name": "c", "image": IMAGE, "volumeMounts": mounts}
    pod = {
        "metadata": {"name": "vol-pod"},
        "spec": {"restartPolicy": "Never", "containers": [container], "volumes": volumes},
    }
    core.create_namespaced_pod(NS, pod)
    clock.advance(10)

    def failed_mounts() -> list[str]:
        events = core.list_namespaced_event(NS, field_selector="involvedObject.name=vol-pod").items
        return [e.message for e in events if e.reason == "FailedMount" and e.type == "Warning"]

    read = core.read_namespaced_pod("vol-pod", NS)
    assert read.status.phase == "Pending"
    assert read.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert failed_mounts() == [
        'MountVolume.SetUp failed for volume "context" : configmap "ctx" not found',
        'MountVolume.SetUp failed for volume "auth" : secret "push" not found',
    ]
    with pytest.raises(ApiException) as not_started:
        core.read_namespaced_pod_log("vol-pod", NS)
    assert _status_of(not_started)["message"].endswith("is waiting to start: ContainerCreating")

    core.create_namespaced_config_map(NS, {"metadata": {"name": "ctx"}, "data": {"Dockerfile": "FROM x"}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "push"}, "stringData": {"config.json": "{}"}})
    assert core.read_namespaced_pod("vol-pod", NS).status.phase == "Pending"
    assert failed_mounts()[-1] == (
        'MountVolume.SetUp failed for volume "auth" : references non-existent secret key: .dockerconfigjson'
    )
    core.patch_namespaced_secret("push", NS, {"stringData": {".dockerconfigjson": "{}"}})
    assert core.read_namespaced_pod("vol-pod", NS).status.phase == "Succeeded"
    core.delete_namespaced_config_map("ctx", NS)  # a started pod keeps its volumes
    assert core.read_namespaced_pod("vol-pod", NS).status.phase == "Succeeded"


def test_a_missing_config_map_key_in_items_is_a_failed_mount(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "ctx"}, "data": {"a": "1"}})
    volume = {"name": "context", "configMap": {"name": "ctx", "items": [{"key": "b", "path": "b"}]}}
    container = {"name": "c", "image": IMAGE, "volumeMounts": [{"name": "context", "mountPath": "/ctx"}]}
    core.create_namespaced_pod(
        NS, {"metadata": {"name": "cm-key"}, "spec": {"containers": [container], "volumes": [volume]}}
    )
    clock.advance(10)
    events = core.list_namespaced_event(
        NS, field_selector="involvedObject.name=cm-key,reason=FailedMount"
    ).items
    assert [e.message for e in events] == [
        'MountVolume.SetUp failed for volume "context" : configmap references non-existent config key: b'
    ]
    assert core.read_namespaced_pod("cm-key", NS).status.phase == "Pending"


def test_volume_mounts_must_name_a_volume_of_the_pod(core: client.CoreV1Api) -> None:
    container = {"name": "c", "image": IMAGE, "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}
    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_pod(
            NS, {"metadata": {"name": "bad-mount"}, "spec": {"containers": [container]}}
        )
    assert invalid.value.status == 422
    assert 'spec.containers[0].volumeMounts[0].name: Not found: "nope"' in _status_of(invalid)["message"]
    twice = [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_pod(
            NS,
            {
                "metadata": {"name": "dup"},
                "spec": {"containers": [{"name": "c", "image": IMAGE}], "volumes": twice},
            },
        )
    assert 'spec.volumes[1].name: Duplicate value: "v"' in _status_of(duplicate)["message"]


def test_termination_messages_come_from_the_script_or_the_log_tail_on_error(
    fake: KubernetesFake, core: client.CoreV1Api, clock: ManualClock
) -> None:
    digest = "sha256:" + "ab" * 32
    fake.script_for(
        "push-", TrainingScript(phases=[("Running", 1.0)], log_lines=["pushed"], termination_message=digest)
    )
    lines = [f"line {i}" for i in range(100)]
    fake.script_for(
        "fail-", TrainingScript(phases=[("Running", 1.0)], outcome="Failed", exit_code=3, log_lines=lines)
    )

    def pod(name: str, policy: str | None = None) -> dict[str, Any]:
        container = {"name": "c", "image": IMAGE, **({"terminationMessagePolicy": policy} if policy else {})}
        return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}}

    for name, policy in (
        ("push-ok", None),
        ("fail-fallback", "FallbackToLogsOnError"),
        ("fail-file", "File"),
    ):
        core.create_namespaced_pod(NS, pod(name, policy))
    clock.advance(5)

    def terminated(name: str) -> client.V1ContainerStateTerminated:
        return core.read_namespaced_pod(name, NS).status.container_statuses[0].state.terminated

    assert (terminated("push-ok").exit_code, terminated("push-ok").message) == (0, digest)
    fallback = terminated("fail-fallback").message
    assert fallback.splitlines() == lines[-80:] and fallback.endswith("line 99\n")
    assert terminated("fail-file").message is None


def test_injected_faults_answer_before_touching_state(core: client.CoreV1Api, fake: KubernetesFake) -> None:
    fake.fail_next("POST", "/configmaps", status=503)
    with pytest.raises(ApiException) as unavailable:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "once"}})
    assert (unavailable.value.status, _status_of(unavailable)["reason"]) == (503, "ServiceUnavailable")
    core.create_namespaced_config_map(NS, {"metadata": {"name": "once"}})
    assert fake.count("POST", "/configmaps") == 2
    assert [r.status for r in fake.requests if r.method == "POST"] == [503, 201]


# --------------------------------------------------------------------------------- the cncf provider's hooks


def test_kubernetes_hook_reads_the_connection_kubeconfig(k8s_conn: str, clock: ManualClock) -> None:
    hook = KubernetesHook(conn_id=k8s_conn)
    assert hook.get_namespace() == NS and not hook.is_in_cluster
    hook.create_custom_object(GROUP, "v1", "pytorchjobs", pytorch_job("hook-job"))
    assert hook.get_custom_object(GROUP, "v1", "pytorchjobs", "hook-job")["metadata"]["namespace"] == NS
    listed = hook.custom_object_client.list_namespaced_custom_object(
        GROUP, "v1", NS, "pytorchjobs", label_selector="release=hook-job"
    )
    assert [item["metadata"]["name"] for item in listed["items"]] == ["hook-job"]
    assert listed["kind"] == "PyTorchJobList" and listed["items"][0]["kind"] == "PyTorchJob"
    pods = hook.core_v1_client.list_namespaced_pod(NS)
    assert len(pods.items) == 3
    clock.advance(1)
    assert hook.get_pod_logs("hook-job-master-0").data.decode().endswith("Training finished\n")
    assert hook.get_pod("hook-job-master-0", NS).status.phase == "Succeeded"


async def test_async_kubernetes_hook_through_kubernetes_asyncio(
    k8s_conn: str, fake: KubernetesFake, clock: ManualClock
) -> None:
    hook = AsyncKubernetesHook(conn_id=k8s_conn)
    async with hook.get_conn() as api_client:
        custom_api = async_client.CustomObjectsApi(api_client)
        await custom_api.create_namespaced_custom_object(
            GROUP, "v1", NS, "pytorchjobs", pytorch_job("async-job")
        )
        listed = await custom_api.list_namespaced_custom_object(
            GROUP, "v1", NS, "pytorchjobs", label_selector="app=pytorchjob"
        )
        assert [item["metadata"]["name"] for item in listed["items"]] == ["async-job"]

        # kubernetes_asyncio sends a dict patch of a custom object as a JSON patch, which the API refuses
        with pytest.raises(async_client.ApiException) as refused:
            await custom_api.patch_namespaced_custom_object(
                GROUP, "v1", NS, "pytorchjobs", "async-job", {"metadata": {"labels": {"a": "b"}}}
            )
        assert refused.value.status == 400
        assert fake.requests[-1].content_type == "application/json-patch+json"
        patched = await custom_api.patch_namespaced_custom_object(
            GROUP,
            "v1",
            NS,
            "pytorchjobs",
            "async-job",
            {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/merge-patch+json",
        )
        assert patched["metadata"]["labels"]["a"] == "b"

        core_api = async_client.CoreV1Api(api_client)
        pods = await core_api.list_namespaced_pod(
            NS, label_selector=f"{JOB}=async-job,training.kubeflow.org/job-role=master"
        )
        assert [pod.metadata.name for pod in pods.items] == ["async-job-master-0"]
        clock.advance(1)
        assert (
            await core_api.read_namespaced_pod_log("async-job-master-0", NS, tail_lines=1)
        ) == "Training finished\n"
        with pytest.raises(async_client.ApiException) as missing:
            await core_api.read_namespaced_config_map("absent", NS)
        assert missing.value.status == 404

    lines = await hook.read_logs("async-job-master-0", NS)
    assert len(lines) == 5 and lines[-1].endswith("Z Training finished")
    events = await hook.get_pod_events("async-job-master-0", NS)
    assert [e.reason for e in events.items] == ["Scheduled", "Started"]
