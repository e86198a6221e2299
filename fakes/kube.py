"""A Kubernetes connection pointed at the Kubernetes API fake, for the tests that drive the cncf hooks
(with the kubeconfig's token, a token file, or an exec plugin); and ``arena delete`` as arena runs
it, to prove jobs this project submits are arena's to delete."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fakes.kubernetes_fake import KubernetesFake

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import pytest

    from fakes.base import ManualClock

NS = "training"
CONN_ID = "kubernetes_default"
#: The ExecCredential version the exec plugins here speak (client.authentication.k8s.io, the
#: version both Python clients accept without an ``interactiveMode``).
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"


@contextmanager
def kubernetes_fake(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock: ManualClock | None = None,
    *,
    conn_id: str = CONN_ID,
    user: dict[str, Any] | None = None,
) -> Iterator[KubernetesFake]:
    """A KubernetesFake (on ``clock``, where given) that connection ``conn_id`` points at, namespace NS,
    authenticating as ``user`` (a kubeconfig user, e.g. :func:`token_file_user`) or with the fake's
    own token.

    On leaving, the fake must have answered every request without an internal error.
    """
    with KubernetesFake() as server:
        if clock is not None:
            server.clock = clock
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig.yaml", user)
        extra = {"kube_config_path": str(kubeconfig), "namespace": NS}
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
        )
        # The hook loads the kubeconfig into the default configuration: restore it afterwards.
        monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
        yield server
        assert server.internal_errors == []


def token_file_user(path: Path, token: str) -> dict[str, Any]:
    """A kubeconfig user reading its bearer token from ``path`` (``tokenFile``), as a projected
    service-account token is read; ``token`` is written there (call again to rotate it)."""
    path.write_text(token)
    return {"tokenFile": str(path)}


def exec_user(path: Path, token: str) -> dict[str, Any]:
    """A kubeconfig user whose exec plugin prints the ExecCredential in ``path`` (``cat``), which
    names ``token`` (call again to have the plugin hand out another)."""
    credential = {"apiVersion": EXEC_API_VERSION, "kind": "ExecCredential", "status": {"token": token}}
    path.write_text(json.dumps(credential))
    return {"exec": {"apiVersion": EXEC_API_VERSION, "command": "cat", "args": [str(path)]}}


def core(conn_id: str = CONN_ID) -> client.CoreV1Api:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=conn_id).core_v1_client


def kube_configuration(kubeconfig: Path) -> client.Configuration:
    """A client configuration from ``kubeconfig``, leaving the default configuration alone."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return configuration


def cpfs_volume(name: str) -> dict:
    """A static CPFS (general-purpose) PV as the ACK + CPFS guide creates it."""
    attributes = {
        "mountProtocol": "cpfs-nfs",
        "server": "cpfs-0123.cn-wulanchabu.cpfs.aliyuncs.com",
        "path": "/share",
        "volumeAs": "subpath",
    }
    return _static_volume(name, "nasplugin.csi.alibabacloud.com", attributes)


def oss_volume(name: str, uri: str, region: str = "cn-wulanchabu") -> dict:
    """A static OSS PV as the ACK OSS CSI guide creates it, for the bucket and path of ``uri``."""
    bucket, _, path = uri.removeprefix("oss://").partition("/")
    attributes = {
        "bucket": bucket,
        "url": f"oss-{region}-internal.aliyuncs.com",
        "path": f"/{path}",
        "otherOpts": "-o max_stat_cache_size=0 -o allow_other",
    }
    return _static_volume(name, "ossplugin.csi.alibabacloud.com", attributes)


def _static_volume(name: str, driver: str, attributes: dict[str, str]) -> dict:
    """A PV of ``driver`` labelled so that the claim of the same name binds to it."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"alicloud-pvname": name}},
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteMany"],
            "csi": {"driver": driver, "volumeHandle": name, "volumeAttributes": attributes},
        },
    }


def bound_claim(name: str) -> dict:
    """A PVC that binds to the PV of the same name through its alicloud-pvname label."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Ti"}},
            "selector": {"matchLabels": {"alicloud-pvname": name}},
            "storageClassName": "",
        },
    }


# -- arena delete --------------------------------------------------------------------------------


class ArenaDeleteError(AssertionError):
    """``arena delete`` would exit non-zero: the errors kubectl printed, one per failed element."""


def arena_delete(name: str, job_type: str, namespace: str = NS, conn_id: str = CONN_ID) -> list[str]:
    """Do what ``arena delete <name> --type <job_type>`` does; return the resources it deleted.

    kubeflow/arena ``pkg/workflow/workflow.go`` ``DeleteJob``: read ``data.app`` of ConfigMap
    ``<name>-<type>`` (``kubectl get configmap -o=jsonpath='{.data.app}'``, verbatim), split it on
    ``\\n`` and run ``kubectl delete <element> --namespace <ns>`` for every element
    (``pkg/util/kubectl`` ``UninstallAppsWithAppInfoFile``), where a NotFound answer is no error and
    any other failure (kubectl's own, for an empty or malformed element) fails the command; then
    delete the ConfigMap, NotFound again being fine.
    """
    api = core(conn_id).api_client
    configmap = f"{name}-{job_type}"
    app = (client.CoreV1Api(api).read_namespaced_config_map(configmap, namespace).data or {}).get("app", "")
    elements = app.split("\n")
    errors = []
    for element in elements:
        try:
            _kubectl_delete(api, element, namespace)
        except ApiException as exc:
            if exc.status != 404:
                errors.append(f"Error from server: {exc.status} {exc.reason} ({element})")
        except ValueError as exc:
            errors.append(str(exc))
    if errors:
        raise ArenaDeleteError("\n".join(errors))
    try:
        client.CoreV1Api(api).delete_namespaced_config_map(configmap, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
    return elements


def _kubectl_delete(api: client.ApiClient, element: str, namespace: str) -> None:
    """``kubectl delete <resource>[.<group>]/<name>``: the resource found through discovery as kubectl
    finds it (plural, singular or short name; the preferred version first); ValueError with
    kubectl's message when the argument names nothing to delete."""
    if not element.strip():
        raise ValueError("error: You must provide one or more resources by argument or filename.")
    resource, slash, obj = element.partition("/")
    if not slash or not obj:
        raise ValueError("error: resource(s) were provided, but no name was specified")
    kind, _, group = resource.partition(".")
    match, base = _resolve(api, kind, group)
    if match is None:
        raise ValueError(f'error: the server doesn\'t have a resource type "{resource}"')
    scope = f"/namespaces/{namespace}" if match["namespaced"] else ""
    path = f"{base}{scope}/{match['name']}/{obj}"
    api.call_api(path, "DELETE", auth_settings=["BearerToken"], _preload_content=False)


def _resolve(api: client.ApiClient, kind: str, group: str) -> tuple[dict[str, Any] | None, str]:
    """The served resource ``kind`` names in ``group`` and its API path, searching the group's
    versions preferred first, as kubectl's REST mapper does."""
    if group:
        document = _discover(api, f"/apis/{group}")
        versions = [document["preferredVersion"]["version"], *(v["version"] for v in document["versions"])]
    else:
        versions = ["v1"]
    for version in dict.fromkeys(versions):
        base = f"/apis/{group}/{version}" if group else "/api/v1"
        for served in _discover(api, base)["resources"]:
            if kind in (served["name"], served["singularName"], *served.get("shortNames", [])):
                return served, base
    return None, ""


def _discover(api: client.ApiClient, path: str) -> dict[str, Any]:
    response = api.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False)
    return json.loads(response[0].data if isinstance(response, tuple) else response.data)


def replay_recorded(case: dict[str, Any], job: str, namespace: str = NS, conn_id: str = CONN_ID) -> None:
    """Write what a real cluster recorded for a failed training job onto job ``job`` (a PyTorchJob
    the fake runs with the "Recorded" outcome), through the API as the kubelet, the scheduler and the
    training-operator would: each pod's status (``replica``/``index`` name the pod), the CR's
    conditions, then the events, oldest first. A case with no pods is a job whose pods the operator
    already deleted (cleanPodPolicy). ``case`` is one of tests/data/kubernetes/recorded_failures.json.
    """
    from kubernetes.client import CustomObjectsApi

    core_api = core(conn_id)
    custom = CustomObjectsApi(core_api.api_client)
    pods = {
        (
            pod["metadata"]["labels"].get("training.kubeflow.org/replica-type"),
            pod["metadata"]["labels"].get("training.kubeflow.org/replica-index"),
        ): pod
        for pod in core_api.api_client.sanitize_for_serialization(
            core_api.list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={job}")
        )["items"]
    }
    recorded = {(pod["replica"], str(pod["index"])) for pod in case["pods"]}
    for key, pod in pods.items():
        if key not in recorded:
            core_api.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=0)
    for entry in case["pods"]:
        pod = pods[(entry["replica"], str(entry["index"]))]
        status = _with_kubelet_fields(entry["status"], pod)
        core_api.replace_namespaced_pod_status(pod["metadata"]["name"], namespace, {**pod, "status": status})
    if case.get("job_conditions"):
        custom.patch_namespaced_custom_object_status(
            "kubeflow.org",
            "v1",
            namespace,
            "pytorchjobs",
            job,
            {"status": {"conditions": case["job_conditions"]}},
        )
    for number, event in enumerate(case.get("events") or []):
        target = event["object"]
        name = job if target == "job" else f"{job}-{target}"
        kind = "PyTorchJob" if target == "job" else "Pod"
        core_api.create_namespaced_event(
            namespace,
            {
                "metadata": {"name": f"{name}.recorded{number:03d}", "namespace": namespace},
                "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
                "type": event["type"],
                "reason": event["reason"],
                "message": event["message"],
            },
        )


def _with_kubelet_fields(status: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """A recorded pod status with the container fields the kubelet always writes and a recording
    may leave out (``image``, ``imageID``, ``ready``, ``restartCount``: core/v1 ContainerStatus
    requires them), taken from the pod's spec."""
    images = {container["name"]: container.get("image", "") for container in pod["spec"]["containers"]}
    containers = [
        {
            "image": images.get(container["name"], ""),
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            **container,
        }
        for container in status.get("containerStatuses") or []
    ]
    return {**status, **({"containerStatuses": containers} if containers else {})}
