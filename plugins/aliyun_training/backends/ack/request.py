"""The Kubeflow training CR and ConfigMap that ``arena submit`` would create for a ``TrainingJobSpec``.

Teams on ACK keep using ``arena list``, ``arena logs`` and ``arena delete`` on jobs this pipeline
submits, so the objects carry arena's labels, annotations, ConfigMap and ownerReference exactly as
arena's helm charts (kubeflow/arena ``charts/<type>/``) render them. Pure functions, no I/O.

Two kinds arena's charts do not render follow their operators' own specs: elastic PyTorch (arena
has no elastic pytorchjob; the training-operator's ``elasticPolicy``) and MPIJob ``v2beta1``
(arena's mpijob chart renders only ``v1alpha1``, and arena reads MPI jobs only through
``v1alpha1``, so ``arena list`` does not show a ``v2beta1`` job; ``arena delete`` still works, it
reads the ConfigMap).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr

from aliyun_training.connections import KUBERNETES_DEFAULT_CONN_ID
from aliyun_training.kubernetes.names import (
    ANNOTATION_PREFIX,
    INSTALLATION_LABEL,
    LABEL_MAX,
    OWNED,
    OWNED_LABEL,
    is_dns1035_label,
    is_dns_label,
    is_dns_subdomain,
    is_extended_resource_name,
    json_schema,
    owner_annotations,
)
from aliyun_training.spec import INJECTED_ENV_VARS, Framework, TrainingJobSpec, invalid_env_names
from aliyun_training.validation import SpecError, field_fix, validate_record, whole_string_pattern

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


#: Chart versions as in kubeflow/arena charts/{pytorchjob,tfjob,mpijob}/Chart.yaml (master, 2026).
PYTORCH_JOB = JobKind("PyTorchJob", "pytorchjobs", "v1", "pytorchReplicaSpecs", "pytorchjob", "0.5.2")
TF_JOB = JobKind("TFJob", "tfjobs", "v1", "tfReplicaSpecs", "tfjob", "0.39.1")
MPI_JOB_V2 = JobKind("MPIJob", "mpijobs", "v2beta1", "mpiReplicaSpecs", "mpijob", "0.28.0")
MPI_JOB_V1ALPHA1 = JobKind("MPIJob", "mpijobs", "v1alpha1", "mpiReplicaSpecs", "mpijob", "0.28.0")
KINDS = (PYTORCH_JOB, TF_JOB, MPI_JOB_V2, MPI_JOB_V1ALPHA1)

#: Where the CR records the job's output directory, for the artifacts stage.
OUTPUT_DIR_ANNOTATION = f"{ANNOTATION_PREFIX}output-dir"
#: torchrun's rendezvous backend for elastic jobs; the operator points it at ``<job>-worker-0``.
ELASTIC_RDZV_BACKEND = "c10d"
#: Variables the platform or this pipeline sets on every node, which ``nccl_env`` must not override:
#: the rendezvous (``spec.INJECTED_ENV_VARS``), the training-operator's torchrun ``PET_*``
#: variables, and the job's data and output directories.
RESERVED_ENV_VARS = INJECTED_ENV_VARS | {"OUTPUT_DIR", "DATA_DIR"}
RESERVED_ENV_PREFIX = "PET_"


#: The GPUs of one node of the cluster's GPU node type: the one bound the environment file and the
#: backend's settings share (no GPU node type offers more than 64 GPUs).
MaxGpusPerNode = Annotated[
    StrictInt,
    Field(ge=1, le=64, json_schema_extra=field_fix("give the GPUs of one GPU node, a whole number up to 64")),
]


def _namespace_is_a_label(namespace: str) -> str:
    if not is_dns_label(namespace):
        raise ValueError(f"{namespace!r} is not a DNS-1123 label, as namespace names must be")
    return namespace


def _secret_names(names: list[str]) -> list[str]:
    bad = [name for name in names if not is_dns_subdomain(name)]
    if bad:
        raise ValueError(f"{bad} are not DNS-1123 subdomains, as Secret names must be")
    return names


def _claim_name(name: str) -> str:
    if not is_dns_subdomain(name):
        raise ValueError(f"{name!r} is not a DNS-1123 subdomain, as PersistentVolumeClaim names must be")
    return name


def _http_base_url(url: str | None) -> str | None:
    """An http(s) base URL with no user or password: the URL travels in the run's plan and the
    trigger's arguments, where no secret may."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"the URL of {parts.hostname} carries a user or password, which would travel in the run's "
            "plan; name a Prometheus reachable without them (from inside the cluster's network)"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{url!r} is not an http(s) base URL")
    return url


def _nccl_names(env: dict[str, str]) -> dict[str, str]:
    bad = invalid_env_names(env)
    if bad:
        raise ValueError(f"{bad} are not environment variable names (letters, digits and _)")
    reserved = sorted(n for n in env if n in RESERVED_ENV_VARS or n.startswith(RESERVED_ENV_PREFIX))
    if reserved:
        raise ValueError(
            f"{reserved} are set on every node by the training operator or this pipeline (the "
            f"rendezvous {sorted(INJECTED_ENV_VARS)}, torchrun's {RESERVED_ENV_PREFIX}*, OUTPUT_DIR, "
            "DATA_DIR); remove them"
        )
    return env


def _extended_resource(name: str) -> str:
    if not is_extended_resource_name(name):
        raise ValueError(
            f"{name!r} is not an extended resource name (<domain>/<name>, a domain outside "
            "kubernetes.io, as device plugins advertise them)"
        )
    return name


# The ACK settings an environment file (``environments.AckEnvironment``) and the backend's own
# settings (``AckSettings``) both hold, each defined once with the rule the cluster applies.
Namespace = Annotated[
    str,
    AfterValidator(_namespace_is_a_label),
    Field(
        json_schema_extra={
            **field_fix("use the namespace's name, e.g. training (lowercase, digits, '-')"),
            **json_schema("label"),
        }
    ),
]
PullSecrets = Annotated[
    list[Annotated[str, Field(json_schema_extra=json_schema("subdomain"))]],
    AfterValidator(_secret_names),
    Field(json_schema_extra=field_fix("name docker-registry Secrets of the namespace")),
]
NcclEnv = Annotated[
    dict[StrictStr, StrictStr],
    AfterValidator(_nccl_names),
    Field(
        json_schema_extra=field_fix(
            'give NCCL variables as names to string values, e.g. {"NCCL_DEBUG": "INFO"}'
        )
    ),
]
#: Extended resource that grants RDMA: ``rdma/hca`` on Lingjun nodes, ``aliyun/erdma`` on ECS.
RdmaResource = Annotated[
    str,
    AfterValidator(_extended_resource),
    Field(json_schema_extra=field_fix("use the device plugin's resource, e.g. rdma/hca or aliyun/erdma")),
]
#: ``v2beta1`` for today's mpi-operator; ``v1alpha1`` for clusters on arena's old one.
MpiApiVersion = Annotated[
    Literal["v2beta1", "v1alpha1"],
    Field(json_schema_extra=field_fix("use v2beta1 (mpi-operator v0.3+) or v1alpha1 (arena's old operator)")),
]
#: The Kubernetes user arena records as the job owner.
Username = Annotated[
    str, Field(min_length=1, max_length=253, json_schema_extra=field_fix("name the submitting user"))
]
#: The Prometheus HTTP API (its base URL) that holds the DCGM exporter's metrics of the cluster's
#: GPUs: where the backend reads a running job's GPU use. None: GPU use is not read.
GpuMetricsUrl = Annotated[
    str | None,
    AfterValidator(_http_base_url),
    Field(
        json_schema_extra={
            **field_fix(
                "give the base URL of a Prometheus holding the DCGM exporter's metrics, e.g. "
                "http://prometheus-server.monitoring:9090, or leave it unset"
            ),
            # For editors: what the validator accepts (no user, password, query or fragment).
            "pattern": whole_string_pattern(r"^https?://[^/?#@\s]+(/[^?#\s]*)?$"),
        }
    ),
]
DEFAULT_RDMA_RESOURCE = "rdma/hca"
DEFAULT_MPI_API_VERSION: Literal["v2beta1", "v1alpha1"] = "v2beta1"


class AckSettings(BaseModel):
    """Cluster-level settings of the ACK backend (``backend_config``), checked as the cluster would.

    Every rule is one the API server, the training-operator or the kubelet applies only once a job
    is submitted; here it fails ``configure`` (through :func:`ack_settings`) naming the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubernetes_conn_id: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("name a kubernetes connection"))
    ] = KUBERNETES_DEFAULT_CONN_ID
    namespace: Namespace = "default"
    rdma_resource: RdmaResource = DEFAULT_RDMA_RESOURCE
    host_network: bool = False
    nccl_env: NcclEnv = Field(default_factory=dict)
    image_pull_secrets: PullSecrets = Field(default_factory=list)
    mpi_api_version: MpiApiVersion = DEFAULT_MPI_API_VERSION
    #: GPUs in one node of the cluster's GPU node type; more per node can never schedule.
    max_gpus_per_node: MaxGpusPerNode = 8
    #: PVC for a dataset mount whose URI names none (``pvc://<claim>/...`` does).
    default_pvc: Annotated[
        Annotated[str, AfterValidator(_claim_name)] | None,
        Field(json_schema_extra=field_fix("name a PersistentVolumeClaim of the namespace")),
    ] = None
    backoff_limit: Annotated[StrictInt, Field(ge=0, json_schema_extra=field_fix("use 0 or more retries"))] = 0
    ttl_seconds_after_finished: Annotated[
        StrictInt | None, Field(ge=0, json_schema_extra=field_fix("use 0 or more seconds, or leave it unset"))
    ] = None
    clean_pod_policy: Annotated[
        Literal["None", "Running", "All"], Field(json_schema_extra=field_fix("use None, Running or All"))
    ] = "Running"
    #: /dev/shm size when the spec asks for none: arena's ``--share-memory`` default.
    default_shm_gib: Annotated[StrictInt, Field(ge=1, json_schema_extra=field_fix("use 1 GiB or more"))] = 2
    username: Username = "airflow"
    gpu_metrics_url: GpuMetricsUrl = None


def ack_settings(config: AckSettings | dict[str, Any]) -> AckSettings:
    """The ACK backend's settings from ``config``; ``SpecError`` naming each bad field and its fix."""
    return validate_record(AckSettings, config)


def job_kind(spec: TrainingJobSpec, settings: AckSettings) -> JobKind:
    if spec.framework is Framework.TENSORFLOW:
        return TF_JOB
    if spec.framework is Framework.MPI:
        return MPI_JOB_V1ALPHA1 if settings.mpi_api_version == "v1alpha1" else MPI_JOB_V2
    return PYTORCH_JOB


def configmap_name(name: str, kind: JobKind) -> str:
    return f"{name}-{kind.arena_type}"


def check(spec: TrainingJobSpec, name: str, settings: AckSettings) -> None:
    """Reject what the cluster would only reject after pods sat Pending: before anything is created."""
    for host in replica_hostnames(spec, name, settings):
        if not is_dns1035_label(host):
            raise SpecError(
                f"name: job {name!r} would name a replica's pod and Service {host!r}, which is not a "
                f"DNS-1035 label (a lowercase letter first, then lowercase letters, digits and '-', at most "
                f"{LABEL_MAX} characters), so the training operator could not create it (fix: the job name "
                "comes from the DAG id and task id: start them with a letter and shorten them)"
            )
    if spec.gpus_per_node > settings.max_gpus_per_node:
        raise SpecError(
            f"gpus_per_node: {spec.gpus_per_node} GPUs per node, but the cluster's GPU nodes have "
            f"{settings.max_gpus_per_node} (fix: use more nodes with fewer GPUs each, "
            "or set max_gpus_per_node)"
        )
    for mount in spec.datasets:
        claim_name(mount.uri, settings)


def replica_hostnames(spec: TrainingJobSpec, name: str, settings: AckSettings) -> list[str]:
    """The job name and the longest pod hostnames and Service names its operator derives from it.

    The training-operator names each replica's pod and Service ``<job>-<type>-<index>`` and its
    webhook wants the job name a DNS-1035 label; the mpi-operator checks ``<job>-worker-<n-1>``
    (pkg/apis/kubeflow/validation) and names the launcher ``<job>-launcher``. An elastic job's
    workers may grow to ``max_nodes``.
    """
    kind = job_kind(spec, settings)
    hosts = [name]
    for role, count, _restart, _gpus in _replica_roles(spec, kind):
        if role == "Launcher":
            hosts.append(f"{name}-launcher")
        elif count > 0:
            last = (spec.elastic_max_nodes if spec.framework is Framework.ELASTIC else count) - 1
            hosts.append(f"{name}-{role.lower()}-{last}")
    return hosts


def claim_name(uri: str | None, settings: AckSettings) -> str:
    """The PVC of a dataset mount: ``pvc://<claim>[/...]``, else the configured default PVC."""
    if uri and uri.startswith("pvc://"):
        claim = uri.removeprefix("pvc://").split("/", 1)[0]
        if claim and not is_dns_subdomain(claim):
            raise SpecError(
                f"datasets: mount {uri!r} names PVC {claim!r}, which is not a DNS-1123 subdomain as "
                "PersistentVolumeClaim names are (fix: use pvc://<claim-name>/... with the claim's name)"
            )
        if claim:
            return claim
    if settings.default_pvc:
        return settings.default_pvc
    raise SpecError(
        f"datasets: mount {uri!r} names no PVC (fix: use pvc://<claim-name>/..., or set default_pvc in the "
        "arena backend settings)"
    )


def build_job(spec: TrainingJobSpec, name: str, settings: AckSettings) -> dict[str, Any]:
    """The training CR as arena's chart renders it (elastic PyTorch and MPIJob v2beta1: as their
    operators define them, arena's charts having neither)."""
    kind = job_kind(spec, settings)
    labels = {**arena_labels(name, kind, settings), **owned_labels(spec)}
    annotations = {**arena_annotations(spec, settings), **owned_annotations(spec)}
    replicas = {
        role: {
            "replicas": count,
            "restartPolicy": restart,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": _pod_spec(
                    spec, settings, gpus=gpus, runs_command=role != "Worker" or kind != MPI_JOB_V2
                ),
            },
        }
        for role, count, restart, gpus in _replica_roles(spec, kind)
        if count > 0
    }
    if kind == MPI_JOB_V1ALPHA1:
        # arena's old mpi-operator: one pod template for every replica, no replica specs; the
        # operator replaces the workers' command with `sleep 365d` and execs mpirun's daemons into them.
        worker = replicas["Worker"]["template"]
        job_spec: dict[str, Any] = {
            "replicas": spec.nodes,
            "template": worker,
            "backoffLimit": settings.backoff_limit,
            "activeDeadlineSeconds": active_deadline_seconds(spec),
        }
    else:
        job_spec = {"runPolicy": _run_policy(spec, settings), kind.replica_specs_key: replicas}
    if spec.framework is Framework.ELASTIC:
        job_spec["elasticPolicy"] = elastic_policy(spec)
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


def elastic_policy(spec: TrainingJobSpec) -> dict[str, Any]:
    """The training-operator's ``elasticPolicy`` (kubeflow.org/v1 ``ElasticPolicy``) of an elastic job.

    The operator gives every worker ``PET_NNODES=<min>:<max>``, ``PET_RDZV_BACKEND``,
    ``PET_NPROC_PER_NODE`` and ``PET_RDZV_ENDPOINT=<job>-worker-0:23456`` (rdzvHost and rdzvPort
    unset: worker 0 and the pytorch container's default port), which torchrun reads. ``nProcPerNode``
    is the field every operator version with elasticPolicy reads (v1.7+ also ``spec.nprocPerNode``,
    which must not be set beside it).
    """
    return {
        "minReplicas": spec.elastic_min_nodes,
        "maxReplicas": spec.elastic_max_nodes,
        "rdzvBackend": ELASTIC_RDZV_BACKEND,
        "nProcPerNode": spec.procs_per_node,
    }


def build_configmap(
    spec: TrainingJobSpec, name: str, settings: AckSettings, owner_uid: str
) -> dict[str, Any]:
    """The ConfigMap ``arena delete`` needs: what was submitted and which resources belong to the job."""
    kind = job_kind(spec, settings)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(name, kind),
            "namespace": settings.namespace,
            "labels": {"createdBy": "arena", **owned_labels(spec)},
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
            "app": app_info([f"{kind.arena_type}.{GROUP}/{name}"]),
            kind.chart: kind.chart_version,
        },
    }


def app_info(resources: list[str]) -> str:
    """``data.app`` as arena writes it (pkg/util/kubectl ``SaveAppInfo``): one ``<resource>/<name>``
    per line, joined by newlines with none at the end. ``arena delete`` splits it on newlines and
    runs ``kubectl delete`` per element, so an empty element (a trailing newline) fails the delete."""
    return "\n".join(resources)


def arena_labels(name: str, kind: JobKind, settings: AckSettings) -> dict[str, str]:
    return {
        "app": kind.arena_type,
        "release": name,
        "chart": f"{kind.chart}-{kind.chart_version}",
        "heritage": "Helm",
        "createdBy": kind.kind,
        "arena.kubeflow.org/uid": hashlib.md5(settings.username.encode(), usedforsecurity=False).hexdigest(),
    }


def arena_annotations(spec: TrainingJobSpec, settings: AckSettings) -> dict[str, str]:
    return {
        "arena.kubeflow.org/username": settings.username,
        "requestGPUsOfJobOwner": str(spec.nodes * spec.gpus_per_node),
    }


def owned_labels(spec: TrainingJobSpec) -> dict[str, str]:
    """The labels the reconciler selects an installation's task-instance jobs by
    (``kubernetes.names.OWNED_LABEL`` and ``INSTALLATION_LABEL``); none on a job launched for no
    task instance. Added beside arena's labels, never in their place."""
    if spec.owner is None:
        return {}
    return {OWNED_LABEL: OWNED, INSTALLATION_LABEL: spec.owner.installation}


def owned_annotations(spec: TrainingJobSpec) -> dict[str, str]:
    """The task instance a job was launched for, exactly (``JobOwner.tags()`` under this package's
    domain): on the CR and on each pod template, so its pods name their owner too."""
    return owner_annotations(spec.owner.tags()) if spec.owner else {}


def submit_values(spec: TrainingJobSpec, settings: AckSettings) -> dict[str, Any]:
    """The chart values ``arena submit`` would have used, kept in the ConfigMap's ``values``.

    ``workers`` is what the chart renders as the Worker replicas: arena's pytorch submit counts the
    master among ``--workers`` and stores ``nodes - 1`` (pkg/training/submit_pytorchjob.go), TFJob
    and MPIJob store ``nodes``; an elastic job has only workers, ``nodes`` of them.
    """
    kind = job_kind(spec, settings)
    workers = next(count for role, count, _, _ in _replica_roles(spec, kind) if role == "Worker")
    return {
        "image": spec.image,
        "workers": workers,
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
    """(replica type, replicas, restartPolicy, gets GPUs) for each role of the job kind.

    An elastic PyTorchJob has only workers (the operator's elastic examples; its webhook requires
    the Worker replica): a Master would get a fixed MASTER_ADDR and RANK instead of the rendezvous.
    """
    if spec.framework is Framework.ELASTIC:
        return [("Worker", spec.nodes, "OnFailure", True)]
    if kind.kind == "PyTorchJob":
        return [("Master", 1, "Never", True), ("Worker", spec.nodes - 1, "OnFailure", True)]
    if kind.kind == "MPIJob":
        return [("Launcher", 1, "Never", False), ("Worker", spec.nodes, "Never", True)]
    return [("Worker", spec.nodes, "Never", True)]


#: How much longer than the task's ``timeout_minutes`` the cluster lets the job run. The task stops
#: the job at its timeout and classifies why it was stuck (pending: capacity; running: a hang);
#: the training-operator's own deadline is the backstop for a job whose task is gone, and must not
#: fail the job at the same instant and pre-empt that classification.
DEADLINE_MARGIN_MINUTES = 10


def active_deadline_seconds(spec: TrainingJobSpec) -> int:
    """The job's ``activeDeadlineSeconds``: its timeout plus ``DEADLINE_MARGIN_MINUTES``."""
    return (spec.timeout_minutes + DEADLINE_MARGIN_MINUTES) * 60


def _run_policy(spec: TrainingJobSpec, settings: AckSettings) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "activeDeadlineSeconds": active_deadline_seconds(spec),
        "backoffLimit": settings.backoff_limit,
        "cleanPodPolicy": settings.clean_pod_policy,
    }
    if settings.ttl_seconds_after_finished is not None:
        policy["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    return policy


def _env(spec: TrainingJobSpec, settings: AckSettings) -> dict[str, str]:
    output = {"OUTPUT_DIR": spec.output_dir} if spec.output_dir else {}
    return {**(settings.nccl_env if spec.rdma else {}), **spec.env, **output}


def _pod_spec(spec: TrainingJobSpec, settings: AckSettings, gpus: bool, runs_command: bool) -> dict[str, Any]:
    """One replica's pod. A pod that does not run the command (an MPIJob v2beta1 worker) has no
    command or args: only then does the mpi-operator start sshd in it for the launcher's mpirun
    (pkg/controller/mpi_job_controller.go ``newWorker``)."""
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
        **({"command": ["sh", "-c", spec.command]} if runs_command else {}),
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


def _shm_gib(spec: TrainingJobSpec, settings: AckSettings) -> int:
    return spec.shared_memory_gib or settings.default_shm_gib
