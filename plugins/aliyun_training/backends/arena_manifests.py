"""The Kubeflow training CR and ConfigMap that ``arena submit`` would create for a ``TrainingJobSpec``.

Teams on ACK keep using ``arena list``, ``arena logs`` and ``arena delete`` on jobs this pipeline
submits, so the objects carry arena's labels, annotations, ConfigMap and ownerReference exactly as
arena's helm charts (kubeflow/arena ``charts/<type>/``) render them. Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.spec import Framework, SpecError, TrainingJobSpec

GROUP = "kubeflow.org"
#: The training container's name; the PyTorch operator requires ``pytorch``.
CONTAINER_NAMES = {
    Framework.PYTORCH: "pytorch",
    Framework.ELASTIC: "pytorch",
    Framework.TENSORFLOW: "tensorflow",
    Framework.MPI: "mpi",
}


@dataclass(frozen=True)
class JobKind:
    kind: str
    plural: str
    version: str
    replica_specs_key: str
    chart: str
    chart_version: str

    @property
    def arena_type(self) -> str:
        """arena's job type: the ConfigMap suffix and the ``app`` label."""
        return self.kind.lower()


#: Chart versions as in kubeflow/arena charts/{pytorchjob,tfjob,mpijob}/Chart.yaml.
PYTORCH_JOB = JobKind("PyTorchJob", "pytorchjobs", "v1", "pytorchReplicaSpecs", "pytorchjob", "0.5.2")
TF_JOB = JobKind("TFJob", "tfjobs", "v1", "tfReplicaSpecs", "tfjob", "0.26.0")
MPI_JOB_V2 = JobKind("MPIJob", "mpijobs", "v2beta1", "mpiReplicaSpecs", "mpijob", "0.14.0")
MPI_JOB_V1ALPHA1 = JobKind("MPIJob", "mpijobs", "v1alpha1", "mpiReplicaSpecs", "mpijob", "0.14.0")

#: Where the CR records the job's output directory, for the artifacts stage.
OUTPUT_DIR_ANNOTATION = "aliyun-training/output-dir"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ArenaSettings(BaseModel):
    """Cluster-level settings of the ACK backend (``backend_config``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conn_id: str = "kubernetes_default"
    namespace: str = "default"
    #: Extended resource that grants RDMA: ``rdma/hca`` on Lingjun nodes, ``aliyun/erdma`` on ECS.
    rdma_resource: str = "rdma/hca"
    host_network: bool = False
    nccl_env: dict[str, str] = Field(default_factory=dict)
    image_pull_secrets: list[str] = Field(default_factory=list)
    #: ``v2beta1`` for today's mpi-operator; ``v1alpha1`` for clusters on arena's old one.
    mpi_api_version: str = "v2beta1"
    #: GPUs in one node of the cluster's GPU node type; more per node can never schedule.
    max_gpus_per_node: int = 8
    #: PVC for a dataset mount whose URI names none (``pvc://<claim>/...`` does).
    default_pvc: str | None = None
    backoff_limit: int = 0
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: str = "Running"
    #: /dev/shm size when the spec asks for none: arena's ``--share-memory`` default.
    default_shm_gib: int = 2
    #: The Kubernetes user arena records as the job owner.
    username: str = "airflow"


def job_kind(spec: TrainingJobSpec, settings: ArenaSettings) -> JobKind:
    if spec.framework is Framework.TENSORFLOW:
        return TF_JOB
    if spec.framework is Framework.MPI:
        return MPI_JOB_V1ALPHA1 if settings.mpi_api_version == "v1alpha1" else MPI_JOB_V2
    return PYTORCH_JOB


def configmap_name(name: str, kind: JobKind) -> str:
    return f"{name}-{kind.arena_type}"


def check(spec: TrainingJobSpec, name: str, settings: ArenaSettings) -> None:
    """Reject what the cluster would only reject after pods sat Pending: before anything is created."""
    if not _DNS_LABEL.match(name):
        raise SpecError(f"name: {name!r} is not a DNS-1123 label under 63 characters")
    if spec.gpus_per_node > settings.max_gpus_per_node:
        raise SpecError(
            f"gpus_per_node: {spec.gpus_per_node} GPUs per node, but the cluster's GPU nodes have "
            f"{settings.max_gpus_per_node} (fix: use more nodes with fewer GPUs each, "
            "or set max_gpus_per_node)"
        )
    for mount in spec.datasets:
        claim_name(mount.uri, settings)


def claim_name(uri: str | None, settings: ArenaSettings) -> str:
    """The PVC of a dataset mount: ``pvc://<claim>[/...]``, else the configured default PVC."""
    if uri and uri.startswith("pvc://"):
        claim = uri.removeprefix("pvc://").split("/", 1)[0]
        if claim:
            return claim
    if settings.default_pvc:
        return settings.default_pvc
    raise SpecError(
        f"datasets: mount {uri!r} names no PVC (fix: use pvc://<claim-name>/..., or set default_pvc in the "
        "arena backend settings)"
    )


def build_job(spec: TrainingJobSpec, name: str, settings: ArenaSettings) -> dict[str, Any]:
    """The training CR as arena's chart renders it."""
    kind = job_kind(spec, settings)
    labels = arena_labels(name, kind, settings)
    annotations = arena_annotations(spec, settings)
    replicas = {
        role: {
            "replicas": count,
            "restartPolicy": restart,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": _pod_spec(spec, settings, gpus=gpus),
            },
        }
        for role, count, restart, gpus in _replica_roles(spec, kind)
        if count > 0
    }
    if kind == MPI_JOB_V1ALPHA1:
        # arena's old mpi-operator: one pod template for every replica, no replica specs.
        worker = replicas["Worker"]["template"]
        job_spec: dict[str, Any] = {
            "replicas": spec.nodes,
            "template": worker,
            "backoffLimit": settings.backoff_limit,
            "activeDeadlineSeconds": spec.timeout_minutes * 60,
        }
    else:
        job_spec = {"runPolicy": _run_policy(spec, settings), kind.replica_specs_key: replicas}
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{kind.version}",
        "kind": kind.kind,
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": {
                **annotations,
                **({OUTPUT_DIR_ANNOTATION: spec.output_dir} if spec.output_dir else {}),
            },
        },
        "spec": job_spec,
    }
    if kind == MPI_JOB_V2:
        body["spec"]["slotsPerWorker"] = spec.procs_per_node
    return body


def build_configmap(
    spec: TrainingJobSpec, name: str, settings: ArenaSettings, owner_uid: str
) -> dict[str, Any]:
    """The ConfigMap ``arena delete`` needs: what was submitted and which resources belong to the job."""
    kind = job_kind(spec, settings)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(name, kind),
            "namespace": settings.namespace,
            "labels": {"createdBy": "arena"},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{kind.version}",
                    "kind": kind.kind,
                    "name": name,
                    "uid": owner_uid,
                }
            ],
        },
        "data": {
            "values": yaml.safe_dump(submit_values(spec, settings), sort_keys=True),
            "app": f"{kind.arena_type}.{GROUP}/{name}\n",
            kind.chart: kind.chart_version,
        },
    }


def arena_labels(name: str, kind: JobKind, settings: ArenaSettings) -> dict[str, str]:
    return {
        "app": kind.arena_type,
        "release": name,
        "chart": f"{kind.chart}-{kind.chart_version}",
        "heritage": "Helm",
        "createdBy": kind.kind,
        "arena.kubeflow.org/uid": hashlib.md5(settings.username.encode(), usedforsecurity=False).hexdigest(),
    }


def arena_annotations(spec: TrainingJobSpec, settings: ArenaSettings) -> dict[str, str]:
    return {
        "arena.kubeflow.org/username": settings.username,
        "requestGPUsOfJobOwner": str(spec.nodes * spec.gpus_per_node),
    }


def submit_values(spec: TrainingJobSpec, settings: ArenaSettings) -> dict[str, Any]:
    """The chart values ``arena submit`` would have used, kept in the ConfigMap's ``values``."""
    return {
        "image": spec.image,
        "workers": spec.nodes,
        "gpuCount": spec.gpus_per_node,
        "cpu": str(spec.cpu),
        "memory": f"{spec.memory_gib}Gi",
        "command": spec.command,
        "workingDir": spec.working_dir or "/root",
        "envs": _env(spec, settings),
        "dataset": {claim_name(m.uri, settings): m.mount_path for m in spec.datasets},
        "shmSize": f"{_shm_gib(spec, settings)}Gi",
        "enableRDMA": spec.rdma,
        "useHostNetwork": settings.host_network,
        "cleanPodPolicy": settings.clean_pod_policy,
        "imagePullSecrets": settings.image_pull_secrets,
    }


def _replica_roles(spec: TrainingJobSpec, kind: JobKind) -> list[tuple[str, int, str, bool]]:
    """(replica type, replicas, restartPolicy, gets GPUs) for each role of the job kind."""
    if kind.kind == "PyTorchJob":
        return [("Master", 1, "Never", True), ("Worker", spec.nodes - 1, "OnFailure", True)]
    if kind.kind == "MPIJob":
        return [("Launcher", 1, "Never", False), ("Worker", spec.nodes, "Never", True)]
    return [("Worker", spec.nodes, "Never", True)]


def _run_policy(spec: TrainingJobSpec, settings: ArenaSettings) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "activeDeadlineSeconds": spec.timeout_minutes * 60,
        "backoffLimit": settings.backoff_limit,
        "cleanPodPolicy": settings.clean_pod_policy,
    }
    if settings.ttl_seconds_after_finished is not None:
        policy["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    return policy


def _env(spec: TrainingJobSpec, settings: ArenaSettings) -> dict[str, str]:
    output = {"OUTPUT_DIR": spec.output_dir} if spec.output_dir else {}
    return {**(settings.nccl_env if spec.rdma else {}), **spec.env, **output}


def _pod_spec(spec: TrainingJobSpec, settings: ArenaSettings, gpus: bool) -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": str(spec.cpu), "memory": f"{spec.memory_gib}Gi"}
    if gpus and spec.gpus_per_node:
        resources["nvidia.com/gpu"] = str(spec.gpus_per_node)
    if gpus and spec.rdma:
        resources[settings.rdma_resource] = "1"
    container: dict[str, Any] = {
        "name": CONTAINER_NAMES[spec.framework],
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "workingDir": spec.working_dir or "/root",
        "command": ["sh", "-c", spec.command],
        "env": [{"name": key, "value": value} for key, value in sorted(_env(spec, settings).items())],
        "resources": {"requests": resources, "limits": dict(resources)},
        "volumeMounts": [
            {"name": claim_name(m.uri, settings), "mountPath": m.mount_path, "readOnly": m.read_only}
            for m in spec.datasets
        ],
    }
    if gpus and spec.rdma:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    volumes: list[dict[str, Any]] = [
        {
            "name": claim_name(m.uri, settings),
            "persistentVolumeClaim": {"claimName": claim_name(m.uri, settings)},
        }
        for m in spec.datasets
    ]
    volumes.append(
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{_shm_gib(spec, settings)}Gi"}}
    )
    container["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if settings.host_network:
        pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": secret} for secret in settings.image_pull_secrets]
    return pod


def _shm_gib(spec: TrainingJobSpec, settings: ArenaSettings) -> int:
    return spec.shared_memory_gib or settings.default_shm_gib
