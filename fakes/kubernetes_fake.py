"""A Kubernetes API server fake that the real ``kubernetes`` and ``kubernetes_asyncio`` clients talk to.

No API server can run where the tests run, so :class:`KubernetesFake` serves the REST API the
generated clients call, over plain HTTP on 127.0.0.1, with a bearer token taken from a kubeconfig
it writes. Everything the clients parse comes back in the server's shapes: objects with
server-set metadata, ``XList`` lists, ``kind: Status`` errors (so ``ApiException.status`` is the
real 404/409/422), discovery documents. Code under test therefore runs through the same client and
cncf provider code paths (KubernetesHook, AsyncKubernetesHook) it runs through against a cluster.

A background controller plays the parts of a cluster that make training jobs move: the Kubeflow
training-operator (PyTorchJob, TFJob), the mpi-operator (MPIJob v2beta1, and the v1alpha1 that
arena's chart still submits), the scheduler, the kubelet, the PV binder, the CSI attacher and the
garbage collector. Each job (and each bare pod) follows a :class:`TrainingScript` picked by name
prefix, except where the operators' own code decides the outcome:

- PyTorchJobs pass the training-operator's validating webhook (denied: 403) and their pods get the
  operator's variables (MASTER_ADDR/RANK/WORLD_SIZE with a Master, torchrun's PET_* rendezvous for an
  ``elasticPolicy``) and default port;
- an MPIJob v2beta1 worker without command and args runs the operator's sshd; one with a command
  runs no sshd, so the launcher's mpirun fails on ssh "Connection refused" and the job fails as the
  mpi-operator reports a failed launcher Job; v1alpha1 workers run ``sleep 365d``;
- a PV of an attach-requiring CSI driver is attached per node under the VolumeAttachment name the
  attacher derives from its volume handle: a second PV with the same handle cannot attach there.

Lists honour ``limit``/``continue`` (no default page size, as Kubernetes).

Deletion is the API server's and the garbage collector's: a pod that is scheduled and not yet
Succeeded or Failed is deleted gracefully (deletionTimestamp set, Terminating for as long as its
containers take to stop: the script's ``stop_seconds``, at most the grace period), an object with
finalizers waits for them, foreground propagation holds the owner (``foregroundDeletion``) until
its blocking dependents are gone, and background propagation deletes it at once and its dependents
after. The operators reconcile no job being deleted.

Bearer tokens: the kubeconfig's token is accepted for good; :meth:`KubernetesFake.issue_token`
adds tokens that expire on :attr:`KubernetesFake.clock`, after which they are answered 401, as a
rotated service-account token or an exec plugin's token is.

A container whose env takes a value from a missing Secret or key (``secretKeyRef``, not optional)
waits in CreateContainerConfigError, as the kubelet leaves it, until the Secret has the key. A pod
with a ConfigMap or Secret volume (not optional) whose object or ``items`` key is missing stays
Pending in ContainerCreating, with the kubelet's FailedMount event, until it exists. A terminated
container's ``message`` is the script's ``termination_message`` (what the container wrote to its
termination log), else, under ``terminationMessagePolicy: FallbackToLogsOnError`` and a failure,
its log tail (80 lines / 2048 bytes), as the kubelet fills it in.

Test hook (not Kubernetes): ``on_create`` is called with each training CR as the fake stored it
(the create body with server-set metadata), after it is stored and before the answer is sent,
outside the fake's lock. The fake runs no containers, so a test uses it to play what a job's pods
would leave behind (outputs in a mounted OSS location), or to hold the answer back (an answer lost
in transit) while other requests and the controller carry on.

Deliberately not emulated, so that code relying on them fails here rather than passing falsely:
watches (answered 403 Forbidden, which the provider treats as "fall back to polling"), server-side
apply (415), namespaces as objects (every namespace exists), container restarts and backoff limits,
activeDeadlineSeconds, services and batch Jobs.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import parse_qsl, urlsplit

import yaml
from kubernetes.utils import parse_quantity

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

TRAINING_GROUP = "kubeflow.org"
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"
LABEL_OPERATOR = "training.kubeflow.org/operator-name"

#: The outcome of a job whose pods' and CR's statuses, and events, a test writes through the API
#: from what a real cluster recorded: the controller creates the pods and then writes nothing.
RECORDED = "Recorded"
#: Outcomes a script can end in; the stuck ones never leave the Created (pending) stage.
OUTCOMES = frozenset(
    {
        "Succeeded",
        "Failed",
        "ExitCode",
        "OOMKilled",
        "Evicted",
        "ImagePullBackOff",
        "Unschedulable",
        "FailedMount",
        RECORDED,
    }
)
STUCK_OUTCOMES = frozenset({"ImagePullBackOff", "Unschedulable", "FailedMount"})
#: Container termination (reason, exit code) per failing outcome; None: the script's exit_code.
#: An evicted pod's containers are killed (SIGKILL: 137; the reason "Error" is unverified).
FAILURES: dict[str, tuple[str, int | None]] = {
    "Failed": ("Error", None),
    "ExitCode": ("Error", None),
    "OOMKilled": ("OOMKilled", 137),
    "Evicted": ("Error", 137),
}
#: The kubelet's node-pressure eviction (pkg/kubelet/eviction: the pod's status reason "Evicted",
#: its message built from "The node was low on resource: %v. " and "Threshold quantity: %v,
#: available: %v. "), which also adds the DisruptionTarget condition with reason TerminationByKubelet
#: ("Pod disruption conditions", Kubernetes docs).
EVICTED_REASON = "Evicted"
DEFAULT_EVICTION_MESSAGE = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
)
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"
#: The CSI driver's error in the kubelet's FailedMount event of a "FailedMount" script (unverified wording).
DEFAULT_MOUNT_ERROR = "rpc error: code = Internal desc = mount failed: exit status 32"
#: The API server's default ``terminationGracePeriodSeconds`` of a pod (core/v1 defaults).
DEFAULT_GRACE_SECONDS = 30
#: The finalizer foreground cascading deletion puts on the owner until its blocking dependents are gone.
FOREGROUND_FINALIZER = "foregroundDeletion"
#: The kubelet's FallbackToLogsOnError tail: at most this many lines and bytes of the log.
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
DEFAULT_TOKEN = "fake-kube-token"
DEFAULT_UNSCHEDULABLE_MESSAGE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
VERSION_INFO = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0+fake",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T07:28:49Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update"]
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: k8s.io/apimachinery pkg/util/validation IsDNS1035Label and its message.
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
#: The training-operator's PyTorchJob validating webhook (its kubebuilder marker's name).
PYTORCH_WEBHOOK = "validator.pytorchjob.training-operator.kubeflow.org"
#: pytorch_types.go PyTorchJobDefaultPortName / PyTorchJobDefaultPort.
PYTORCH_PORT_NAME = "pytorchjob-port"
PYTORCH_DEFAULT_PORT = 23456
#: mpi-operator v2beta1 newWorker: a worker without command and args runs sshd for mpirun.
SSHD_COMMAND = ("/usr/sbin/sshd", "-De")
#: mpi-operator v1alpha1 newWorker (removed in v0.3): every worker's command.
V1ALPHA1_WORKER_COMMAND = ("sleep",)
V1ALPHA1_WORKER_ARGS = ("365d",)
#: mpirun's exit code when it cannot start its daemons on the workers (unverified: Open MPI's ORTE).
MPIRUN_UNREACHABLE_EXIT_CODE = 1
#: List fields a strategic merge patch merges item by item, by this key (the rest are replaced).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "conditions": "type",
}
STATUS_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


#: CSI drivers whose CSIDriver says ``attachRequired: true`` (kubernetes-sigs/alibaba-cloud-csi-driver
#: deploy/charts/alibaba-cloud-csi-driver/templates/csi-driver.yaml; nasplugin is false).
ATTACH_REQUIRED_DRIVERS = frozenset(
    {"diskplugin.csi.alibabacloud.com", "ossplugin.csi.alibabacloud.com", "bmcpfsplugin.csi.alibabacloud.com"}
)


def volume_attachment_name(volume_handle: str, driver: str, node: str) -> str:
    """``csi-<sha256(handle + driver + node)>``: kubernetes pkg/volume/csi/csi_attacher.go
    ``getAttachmentName``, the name the attacher gives a volume's attachment to a node."""
    return f"csi-{hashlib.sha256(f'{volume_handle}{driver}{node}'.encode()).hexdigest()}"


# --------------------------------------------------------------------------------- time


def rfc3339(epoch: float) -> str:
    """A ``metav1.Time`` as the API serializes it: UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def rfc3339_nano(nanos: int) -> str:
    """A log line timestamp as the kubelet prints it: RFC 3339 with a fixed nine-digit fraction."""
    seconds, fraction = divmod(nanos, 10**9)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{fraction:09d}Z"


def parse_rfc3339_seconds(text: str) -> int:
    """Parse an RFC 3339 time (any fraction, ``Z`` or an offset) to whole epoch seconds, rounded down."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)", text)
    if not match:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    base, _fraction, zone = match.groups()
    return int(datetime.fromisoformat(base + zone.replace("Z", "+00:00")).timestamp())


# --------------------------------------------------------------------------------- errors


class KubeApiError(Exception):
    """An error answer, sent as the ``kind: Status`` body the clients turn into ``ApiException``."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reason = STATUS_REASONS.get(code, "") if reason is None else reason
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _route_not_found() -> KubeApiError:
    return KubeApiError(404, "the server could not find the requested resource")


# --------------------------------------------------------------------------------- resource types


@dataclass(frozen=True)
class ResourceType:
    """One served resource, with the registry behaviours that differ between real resources."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    #: Phase a new object starts in; writes through the main resource never change status.
    initial_phase: str = ""
    #: Delete answers the deleted object (pods, PVs, PVCs) rather than a Success Status.
    returns_deleted_object: bool = False
    has_generation: bool = False
    field_labels: frozenset[str] = frozenset()

    @property
    def qualified(self) -> str:
        """How error messages name the resource: ``pods``, ``pytorchjobs.kubeflow.org``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def not_found(self, name: str) -> KubeApiError:
        return KubeApiError(404, f'{self.qualified} "{name}" not found', details=self.details(name))

    def already_exists(self, name: str) -> KubeApiError:
        return KubeApiError(
            409, f'{self.qualified} "{name}" already exists', "AlreadyExists", self.details(name)
        )

    def conflict(self, name: str, why: str) -> KubeApiError:
        message = f'Operation cannot be fulfilled on {self.qualified} "{name}": {why}'
        return KubeApiError(409, message, details=self.details(name))

    def invalid(self, name: str, problem: str) -> KubeApiError:
        details = {**self.details(name), "kind": self.kind}
        return KubeApiError(422, f'{self.kind} "{name}" is invalid: {problem}', details=details)

    def details(self, name: str) -> dict[str, str]:
        """The ``details`` of a Status about one object: its name, resource (as "kind") and group."""
        details = {"name": name, "kind": self.plural}
        if self.group:
            details["group"] = self.group
        return details


_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
CONFIG_MAPS = ResourceType("", ("v1",), "configmaps", "ConfigMap", short_names=("cm",))
SECRETS = ResourceType("", ("v1",), "secrets", "Secret", field_labels=frozenset({"type"}))
EVENTS = ResourceType(
    "",
    ("v1",),
    "events",
    "Event",
    short_names=("ev",),
    field_labels=frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
)
PODS = ResourceType(
    "",
    ("v1",),
    "pods",
    "Pod",
    short_names=("po",),
    status_subresource=True,
    initial_phase="Pending",
    returns_deleted_object=True,
    has_generation=True,
    field_labels=frozenset(
        {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "status.phase", "status.podIP"}
    ),
)
PERSISTENT_VOLUMES = ResourceType(
    "",
    ("v1",),
    "persistentvolumes",
    "PersistentVolume",
    namespaced=False,
    short_names=("pv",),
    status_subresource=True,
    initial_phase="Pending",
    returns_deleted_object=True,
)
PERSISTENT_VOLUME_CLAIMS = ResourceType(
    "",
    ("v1",),
    "persistentvolumeclaims",
    "PersistentVolumeClaim",
    short_names=("pvc",),
    status_subresource=True,
    initial_phase="Pending",
    returns_deleted_object=True,
)
PYTORCH_JOBS = ResourceType(
    TRAINING_GROUP, ("v1",), "pytorchjobs", "PyTorchJob", status_subresource=True, has_generation=True
)
TF_JOBS = ResourceType(
    TRAINING_GROUP, ("v1",), "tfjobs", "TFJob", status_subresource=True, has_generation=True
)
#: One store for both versions, as a multi-version CRD without conversion: reads rewrite apiVersion.
MPI_JOBS = ResourceType(
    TRAINING_GROUP, ("v2beta1", "v1alpha1"), "mpijobs", "MPIJob", status_subresource=True, has_generation=True
)
RESOURCES = (
    CONFIG_MAPS,
    SECRETS,
    EVENTS,
    PODS,
    PERSISTENT_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    PYTORCH_JOBS,
    TF_JOBS,
    MPI_JOBS,
)
TYPES = {(rt.group, rt.plural): rt for rt in RESOURCES}


@dataclass(frozen=True)
class _JobKind:
    """How one operator lays out, labels and reports a training CR of one apiVersion."""

    kind: str
    #: Field holding the replica specs; empty for MPIJob v1alpha1 (spec.replicas + spec.template).
    specs_field: str
    operator: str
    #: Container name the operator's validation requires in every replica ("" for none).
    container: str
    clean_pod_policy: str
    created_message: str
    failed_message: str
    #: The terminal Failed condition's reason ("" for ``<Kind>Failed``).
    failed_reason: str = ""


_OPERATOR_CREATED = "{kind} {name} is created."
_OPERATOR_FAILED = "{kind} {name} is failed because 1 {rtype} replica(s) failed."
JOB_KINDS = {
    ("pytorchjobs", "kubeflow.org/v1"): _JobKind(
        "PyTorchJob",
        "pytorchReplicaSpecs",
        "pytorchjob-controller",
        "pytorch",
        "None",
        _OPERATOR_CREATED,
        _OPERATOR_FAILED,
    ),
    ("tfjobs", "kubeflow.org/v1"): _JobKind(
        "TFJob",
        "tfReplicaSpecs",
        "tfjob-controller",
        "tensorflow",
        "Running",
        _OPERATOR_CREATED,
        _OPERATOR_FAILED,
    ),
    # A failed MPIJob takes its launcher Job's Failed condition (mpi-operator pkg/controller
    # updateMPIJobFailedStatus): with backoffLimit reached, the batch Job's reason
    # BackoffLimitExceeded and message "Job has reached the specified backoff limit", each followed
    # by the failed launcher pod's status reason and message (empty for a container that exited).
    ("mpijobs", "kubeflow.org/v2beta1"): _JobKind(
        "MPIJob",
        "mpiReplicaSpecs",
        "mpi-operator",
        "",
        "None",
        "MPIJob {namespace}/{name} is created.",
        "Job has reached the specified backoff limit: ",
        "BackoffLimitExceeded/",
    ),
    ("mpijobs", "kubeflow.org/v1alpha1"): _JobKind("MPIJob", "", "mpi-operator", "", "None", "", ""),
}


# --------------------------------------------------------------------------------- public records


@dataclass(frozen=True)
class KubeRequest:
    """One request as the fake saw it: ``body`` is parsed JSON (or text), ``status`` the answer's code."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str = ""
    status: int = 0


@dataclass(frozen=True)
class TrainingScript:
    """How a training job (or a bare pod) behaves from its creation.

    ``phases`` are (stage, seconds) in order, stages "Created" (pods scheduled, containers being
    created) and "Running"; then ``outcome`` holds for good. Failing outcomes ("Failed" and its
    alias "ExitCode": exit ``exit_code``; "OOMKilled": exit 137) fail the first pod of
    ``failing_replica`` (the launcher too for MPIJobs); stuck outcomes ("ImagePullBackOff",
    "Unschedulable") keep the job in Created with its pods Pending. ``log_lines`` are every pod's
    log, spread over the Running stage, but for a pod ``pod_logs`` names by its replica type and
    index (``"worker-0"``): a job whose nodes each printed their own output. ``message``, when set,
    replaces the terminal job condition's message, the scheduler's message (Unschedulable) or the
    pull error (ImagePullBackOff).
    ``termination_message`` is what each container wrote to its termination log (e.g. kaniko's
    ``--digest-file=/dev/termination-log``), reported in its terminated state's ``message``.

    "Recorded" creates the pods and writes nothing after: the test replays what a real cluster
    recorded (pod and CR statuses, events) through the API, as the kubelet and the operator would.
    "Evicted" fails the pod as the kubelet's node-pressure eviction does (phase Failed, reason
    Evicted, the DisruptionTarget condition; ``message`` replaces the eviction message).
    "FailedMount" keeps the pods ContainerCreating: the kubelet cannot mount their first volume
    (its FailedMount Warning names the CSI error, ``message`` when set).
    ``stop_seconds`` is how long the containers take to exit once the kubelet stops them for a
    deletion: a deleted pod stays (Terminating) that long, at most its grace period.
    """

    phases: list[tuple[str, float]] = field(default_factory=lambda: [("Created", 0.05), ("Running", 0.5)])
    outcome: str = "Succeeded"
    exit_code: int = 1
    failing_replica: str = "worker"
    log_lines: list[str] = field(
        default_factory=lambda: [
            "Starting training: WORLD_SIZE=2 RANK=0",
            "epoch 1/3 loss=2.3026",
            "epoch 2/3 loss=1.8412",
            "epoch 3/3 loss=1.5107",
            "Training finished",
        ]
    )
    pod_logs: dict[str, list[str]] = field(default_factory=dict)
    message: str = ""
    termination_message: str = ""
    stop_seconds: float = 0.0

    def __post_init__(self) -> None:
        stages = [stage for stage, _ in self.phases]
        if not set(stages) <= {"Created", "Running"} or len(stages) != len(set(stages)):
            raise ValueError(f"phases must name Created and/or Running once each, got {stages}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {self.outcome!r}")


@dataclass(frozen=True)
class _Timeline:
    """When a job's (or bare pod's) containers start and when its outcome is reached."""

    start: float
    running: float
    end: float

    @classmethod
    def of(cls, script: TrainingScript, start: float) -> _Timeline:
        seconds = dict(script.phases)
        running = start + seconds.get("Created", 0.0)
        return cls(start, running, running + seconds.get("Running", 0.0))


@dataclass
class _Run:
    """The controller's memory of one job or bare pod: its script and what it already did."""

    script: TrainingScript
    timeline: _Timeline
    pods_created: bool = False
    final_status: dict[str, Any] | None = None
    cleaned: bool = False
    emitted: set[str] = field(default_factory=set)
    #: The launcher's own log, when it differs from the script's (an MPIJob whose workers run no sshd).
    launcher_log: list[str] | None = None

    def log_lines(self, pod: dict[str, Any]) -> list[str]:
        """The lines ``pod`` logs: its own (``TrainingScript.pod_logs``), the launcher's own, or the
        script's."""
        labels = pod["metadata"].get("labels") or {}
        role = labels.get(LABEL_REPLICA_TYPE)
        own = self.script.pod_logs.get(f"{role}-{labels.get(LABEL_REPLICA_INDEX)}")
        if own is not None:
            return own
        if self.launcher_log is not None and role == "launcher":
            return self.launcher_log
        return self.script.log_lines

    def stage(self, now: float) -> str:
        """Where the script is at ``now``: "pending", "running" or "ended"."""
        if self.script.outcome in STUCK_OUTCOMES or now < self.timeline.running:
            return "pending"
        return "running" if now < self.timeline.end else "ended"

    def log_times(self, count: int) -> list[int]:
        """Emit time (ns) of each of ``count`` log lines, spread evenly over the Running stage."""
        if self.script.outcome in STUCK_OUTCOMES:
            return []
        start, length = self.timeline.running, self.timeline.end - self.timeline.running
        return [round((start + length * (i + 1) / count) * 1e9) for i in range(count)]


@dataclass
class _Fault:
    method: str
    path_contains: str
    status: int
    remaining: int


@dataclass(frozen=True)
class _Replica:
    """One pod a training operator creates for a CR."""

    rtype: str
    index: int
    pod_name: str
    template: dict[str, Any]
    restart_policy: str


@dataclass(frozen=True)
class _Target:
    """What a resource path addresses."""

    rtype: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def api_version(self) -> str:
        return self.rtype.api_version(self.version)


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    stream: Iterator[bytes] | None = None


def _json_reply(status: int, payload: Any) -> _Reply:
    return _Reply(status, json.dumps(payload).encode())


# --------------------------------------------------------------------------------- selectors


@dataclass(frozen=True)
class _Requirement:
    """One label requirement: op is "=", "!=", "in", "notin", "exists" or "!"."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        return {
            "=": present and value in self.values,
            "in": present and value in self.values,
            "!=": not present or value not in self.values,
            "notin": not present or value not in self.values,
            "exists": present,
            "!": not present,
        }[self.op]


_REQUIREMENT = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[-A-Za-z0-9_.]*)|\s(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?\s*"
)


def parse_label_selector(text: str) -> list[_Requirement]:
    """Parse a ``labelSelector`` (=, ==, !=, in, notin, exists, !key); 400 when malformed."""
    requirements = []
    for part in _split_top_level(text):
        match = _REQUIREMENT.fullmatch(part)
        if not match or (match["neg"] and (match["op"] or match["setop"])):
            raise KubeApiError(400, f"unable to parse requirement: {part!r}")
        if match["setop"]:
            values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
            requirements.append(_Requirement(match["key"], match["setop"], values))
        elif match["op"]:
            op = "!=" if match["op"] == "!=" else "="
            requirements.append(_Requirement(match["key"], op, frozenset({match["value"]})))
        else:
            requirements.append(_Requirement(match["key"], "!" if match["neg"] else "exists"))
    return requirements


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses; empty text selects everything."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip() or parts:
        parts.append(current)
    return parts


def _label_selector_requirements(selector: dict[str, Any]) -> list[_Requirement]:
    """A ``metav1.LabelSelector`` (matchLabels, matchExpressions) as requirements."""
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    requirements = [
        _Requirement(k, "=", frozenset({v})) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        values = frozenset(expression.get("values") or [])
        requirements.append(_Requirement(expression["key"], operators[expression["operator"]], values))
    return requirements


def parse_field_selector(text: str, rtype: ResourceType) -> list[tuple[str, bool, str]]:
    """Parse a ``fieldSelector`` into (field, equal?, value); 400 for fields the resource lacks."""
    terms = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"([A-Za-z.]+)\s*(==|=|!=)\s*(.*)", part)
        if not match:
            raise KubeApiError(400, f"invalid selector: {part!r}")
        name, op, value = match.groups()
        if name not in _META_FIELDS | rtype.field_labels:
            raise KubeApiError(400, f"field label not supported: {name}")
        terms.append((name, op != "!=", value))
    return terms


def _field_value(obj: dict[str, Any], dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, dict):  # Event "source" selects on its component
        value = value.get("component")
    return "" if value is None else str(value)


# --------------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch whose lists in :data:`MERGE_KEYS` merge item by item, like the API's for built-ins."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, MERGE_KEYS[key])
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = copy.deepcopy(current)
    for item in patch:
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict)
                and isinstance(item, dict)
                and old.get(merge_key) == item.get(merge_key)
            ),
            None,
        )
        if index is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[index] = strategic_merge_patch(merged[index], item)
    return merged


def json_patch(document: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test), with the API server's errors."""
    if not isinstance(operations, list):
        raise KubeApiError(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    result = copy.deepcopy(document)
    for operation in operations:
        try:
            result = _apply_operation(result, operation)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise KubeApiError(
                422, f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
    return result


def _apply_operation(document: Any, operation: dict[str, Any]) -> Any:
    op, path = operation["op"], _pointer(operation["path"])
    if op == "add":
        return _pointer_add(document, path, copy.deepcopy(operation["value"]))
    if op == "remove":
        return _pointer_remove(document, path)[0]
    if op == "replace":
        return _pointer_add(_pointer_remove(document, path)[0], path, copy.deepcopy(operation["value"]))
    if op == "move":
        document, value = _pointer_remove(document, _pointer(operation["from"]))
        return _pointer_add(document, path, value)
    if op == "copy":
        return _pointer_add(
            document, path, copy.deepcopy(_pointer_get(document, _pointer(operation["from"])))
        )
    if op == "test":
        if _pointer_get(document, path) != operation["value"]:
            raise ValueError(f"testing value {operation['path']} failed")
        return document
    raise ValueError(f"unexpected operation {op!r}")


def _pointer(text: str) -> list[str]:
    if text and not text.startswith("/"):
        raise ValueError(f"JSON pointer must start with /: {text!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in text.split("/")[1:]]


def _pointer_get(document: Any, path: list[str]) -> Any:
    for token in path:
        document = document[int(token)] if isinstance(document, list) else document[token]
    return document


def _pointer_add(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent, last = _pointer_get(document, path[:-1]), path[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise IndexError(f"index {index} out of range")
        parent.insert(index, value)
    else:
        parent[last] = value
    return document


def _pointer_remove(document: Any, path: list[str]) -> tuple[Any, Any]:
    if not path:
        raise ValueError("cannot remove the whole document")
    parent, last = _pointer_get(document, path[:-1]), path[-1]
    removed = parent.pop(int(last)) if isinstance(parent, list) else parent.pop(last)
    return document, removed


def _apply_patch(
    rtype: ResourceType, current: dict[str, Any], content_type: str, patch: Any
) -> dict[str, Any]:
    """Patch ``current`` by media type; custom resources, like the real API, refuse strategic merge."""
    media = content_type.split(";")[0].strip().lower()
    patchers: dict[str, Callable[[Any, Any], Any]] = {
        "application/json-patch+json": json_patch,
        "application/merge-patch+json": merge_patch,
    }
    if not rtype.group:
        patchers["application/strategic-merge-patch+json"] = strategic_merge_patch
    if media == "application/apply-patch+yaml":
        raise KubeApiError(
            415, "server-side apply (application/apply-patch+yaml) is not emulated by this fake"
        )
    if media not in patchers:
        listed = ", ".join([*patchers, "application/apply-patch+yaml"])
        raise KubeApiError(
            415, f"the body of the request was in an unknown format - accepted media types include: {listed}"
        )
    if media != "application/json-patch+json" and not isinstance(patch, dict):
        raise KubeApiError(422, f"patch: Invalid value: {json.dumps(patch)!r}: couldn't get version/kind")
    return patchers[media](current, patch)


# --------------------------------------------------------------------------------- training jobs


def _name_suffix(seed: str) -> str:
    """Five characters like the API's generateName suffix, derived from ``seed`` so they are stable."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(NAME_SUFFIX_ALPHABET[b % len(NAME_SUFFIX_ALPHABET)] for b in digest[:5])


def _replicas(job: dict[str, Any], kind: _JobKind) -> list[_Replica]:
    """The pods the operator creates for ``job``, in replica-spec order."""
    name, spec = job["metadata"]["name"], job.get("spec") or {}
    launcher = f"{name}-launcher-{_name_suffix(job['metadata']['uid'])}"
    if not kind.specs_field:
        template = spec.get("template") or {}
        workers = [
            _Replica("Worker", i, f"{name}-worker-{i}", template, "") for i in range(spec.get("replicas", 1))
        ]
        return [_Replica("Launcher", 0, launcher, template, "Never"), *workers]
    replicas = []
    for rtype, replica_spec in (spec.get(kind.specs_field) or {}).items():
        for index in range(replica_spec.get("replicas", 1)):
            pod_name = launcher if rtype.lower() == "launcher" else f"{name}-{rtype.lower()}-{index}"
            replicas.append(
                _Replica(
                    rtype,
                    index,
                    pod_name,
                    replica_spec.get("template") or {},
                    replica_spec.get("restartPolicy", ""),
                )
            )
    return replicas


def _is_master(kind: _JobKind, replica: _Replica, replicas: list[_Replica]) -> bool:
    """The replica the operator labels job-role=master (TFJob: chief/master, else worker 0)."""
    if kind.kind == "PyTorchJob":
        return replica.rtype.lower() == "master"
    if kind.kind == "TFJob":
        leaders = {"chief", "master"}
        if any(r.rtype.lower() in leaders for r in replicas):
            return replica.rtype.lower() in leaders
        return replica.rtype.lower() == "worker" and replica.index == 0
    return False


def _operator_labels(
    kind: _JobKind, job_name: str, replica: _Replica, replicas: list[_Replica]
) -> dict[str, str]:
    """Labels the operator adds to a replica's pod (v1alpha1's old operator had its own)."""
    role = replica.rtype.lower()
    if not kind.specs_field:
        return {"mpi_job_name": job_name, "mpi_role_type": role}
    labels = {
        LABEL_JOB_NAME: job_name,
        LABEL_OPERATOR: kind.operator,
        LABEL_REPLICA_TYPE: role,
        LABEL_REPLICA_INDEX: str(replica.index),
    }
    if kind.kind == "MPIJob":
        labels[LABEL_JOB_ROLE] = role
    elif _is_master(kind, replica, replicas):
        labels[LABEL_JOB_ROLE] = "master"
    return labels


def _owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _replica_pod(
    job: dict[str, Any], kind: _JobKind, replica: _Replica, labels: dict[str, str]
) -> dict[str, Any]:
    """The pod for ``replica``: the template's metadata and spec as the operator completes it, the
    operator's labels, owned by the job."""
    template = copy.deepcopy(replica.template)
    template_meta, spec = template.get("metadata") or {}, template.get("spec") or {}
    _operate_pod_spec(job, kind, replica, spec)
    if replica.restart_policy:
        spec["restartPolicy"] = "Never" if replica.restart_policy == "ExitCode" else replica.restart_policy
    metadata = {
        "name": replica.pod_name,
        "namespace": job["metadata"]["namespace"],
        "labels": {**(template_meta.get("labels") or {}), **labels},
        "ownerReferences": [_owner_reference(job)],
    }
    if template_meta.get("annotations"):
        metadata["annotations"] = template_meta["annotations"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _operate_pod_spec(job: dict[str, Any], kind: _JobKind, replica: _Replica, spec: dict[str, Any]) -> None:
    """What the operator changes in a replica's pod spec before it creates the pod."""
    containers = spec.get("containers") or []
    if not containers:
        return
    first = containers[0]
    if kind.kind == "MPIJob" and replica.rtype == "Worker":
        if not kind.specs_field:
            # arena's old mpi-operator (v1alpha1 newWorker): workers sleep; mpirun's daemons are
            # started in them through kubectl exec.
            first["command"], first["args"] = list(V1ALPHA1_WORKER_COMMAND), list(V1ALPHA1_WORKER_ARGS)
        elif not first.get("command") and not first.get("args"):
            # mpi-operator v2beta1 newWorker: sshd only when command and args are both empty.
            first["command"] = list(SSHD_COMMAND)
    if kind.kind == "PyTorchJob":
        for container in containers:
            if container.get("name") == "pytorch" and not _named_port(container):
                # pytorch_defaults.go setPyTorchDefaultPort
                container["ports"] = [
                    *(container.get("ports") or []),
                    {"name": PYTORCH_PORT_NAME, "containerPort": PYTORCH_DEFAULT_PORT, "protocol": "TCP"},
                ]
            container["env"] = [*(container.get("env") or []), *_pytorch_env(job, replica)]


def _named_port(container: dict[str, Any]) -> int | None:
    for port in container.get("ports") or []:
        if port.get("name") == PYTORCH_PORT_NAME:
            return int(port["containerPort"])
    return None


def _pytorch_port(replica_spec: dict[str, Any]) -> int:
    """The replica's ``pytorchjob-port`` (controller.v1/pytorch getPortFromPyTorchJob), defaulted."""
    containers = ((replica_spec.get("template") or {}).get("spec") or {}).get("containers") or []
    pytorch: dict[str, Any] = next((c for c in containers if c.get("name") == "pytorch"), {})
    return _named_port(pytorch) or PYTORCH_DEFAULT_PORT


def _pytorch_env(job: dict[str, Any], replica: _Replica) -> list[dict[str, str]]:
    """The variables the training-operator adds to every container of a PyTorchJob replica
    (release-1.9 pkg/controller.v1/pytorch envvar.go setPodEnv, master.go, elastic.go), after its
    defaulting (pytorch_defaults.go: nprocPerNode "auto" unless elasticPolicy.nProcPerNode is set)."""
    spec = job.get("spec") or {}
    specs = spec.get("pytorchReplicaSpecs") or {}
    elastic = spec.get("elasticPolicy")
    total = sum(int((r or {}).get("replicas", 1)) for r in specs.values())
    nproc = spec.get("nprocPerNode")
    if nproc is None and (elastic is None or elastic.get("nProcPerNode") is None):
        nproc = "auto"
    env = [("PYTHONUNBUFFERED", "1")]
    if "Master" in specs:
        port, address = str(_pytorch_port(specs["Master"])), f"{job['metadata']['name']}-master-0"
        rank = str(replica.index + (1 if replica.rtype == "Worker" else 0))
        world = total * (int(nproc) if nproc is not None and str(nproc).isdigit() else 1)
        env += [("MASTER_PORT", port), ("PET_MASTER_PORT", port), ("MASTER_ADDR", address)]
        env += [
            ("PET_MASTER_ADDR", address),
            ("WORLD_SIZE", str(world)),
            ("RANK", rank),
            ("PET_NODE_RANK", rank),
        ]
    if nproc is not None:
        env.append(("PET_NPROC_PER_NODE", str(nproc)))
    env += _elastic_env(job, specs, elastic) if elastic is not None else [("PET_NNODES", str(total))]
    return [{"name": name, "value": value} for name, value in env]


def _elastic_env(
    job: dict[str, Any], specs: dict[str, Any], elastic: dict[str, Any]
) -> list[tuple[str, str]]:
    """elastic.go ElasticEnvVarGenerator, on the policy as setElasticPolicy defaults it."""
    workers = int((specs.get("Worker") or {}).get("replicas", 1))
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    low, high = (low if low is not None else high), (high if high is not None else low)
    low, high = (workers if low is None else low), (workers if high is None else high)
    host = elastic.get("rdzvHost") or f"{job['metadata']['name']}-worker-0"
    port = elastic.get("rdzvPort") or _pytorch_port(specs.get("Worker") or {})
    env = [
        ("PET_RDZV_ENDPOINT", f"{host}:{port}"),
        ("PET_RDZV_BACKEND", elastic.get("rdzvBackend") or "c10d"),
        ("PET_NNODES", f"{low}:{high}"),
    ]
    optional = (
        ("maxRestarts", "PET_MAX_RESTARTS"),
        ("nProcPerNode", "PET_NPROC_PER_NODE"),
        ("rdzvId", "PET_RDZV_ID"),
    )
    env += [(name, str(elastic[field])) for field, name in optional if elastic.get(field) is not None]
    if elastic.get("rdzvConf"):
        env.append(
            ("PET_RDZV_CONF", ",".join(f"{c.get('key')}={c.get('value')}" for c in elastic["rdzvConf"]))
        )
    if elastic.get("standalone"):
        env.append(("PET_STANDALONE", ""))
    return env


def _unreachable_workers(kind: _JobKind, job: dict[str, Any], replicas: list[_Replica]) -> list[str]:
    """The worker hostnames an MPIJob v2beta1 launcher's mpirun cannot reach over ssh: all of them
    when the Worker container has a command or args, since the operator then starts no sshd."""
    if kind.kind != "MPIJob" or not kind.specs_field:
        return []
    worker = ((job.get("spec") or {}).get(kind.specs_field) or {}).get("Worker") or {}
    containers = ((worker.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    if not (containers[0].get("command") or containers[0].get("args")):
        return []
    meta = job["metadata"]
    domain = f"{meta['name']}.{meta['namespace']}.svc"  # the hostfile's names (mpi-operator newConfigMap)
    return [f"{r.pod_name}.{domain}" for r in replicas if r.rtype == "Worker"]


def _ssh_refused_log(hosts: list[str]) -> list[str]:
    """The launcher's log when no worker runs sshd: OpenSSH's connect error per host, then Open MPI's."""
    return [
        *(f"ssh: connect to host {host} port 22: Connection refused" for host in hosts),
        "--------------------------------------------------------------------------",
        "ORTE was unable to reliably start one or more daemons.",
    ]


def _pytorch_webhook_denial(job: dict[str, Any]) -> str:
    """What the training-operator's PyTorchJob validating webhook denies, as the API server words it
    (release-1.9 pkg/webhooks/pytorch/pytorchjob_webhook.go validatePyTorchJob; "" when allowed)."""
    errors = []
    name = job["metadata"].get("name") or ""
    if len(name) > 63 or not DNS1035_LABEL.fullmatch(name):
        errors.append(f'metadata.name: Invalid value: "{name}": should match: {DNS1035_LABEL_MESSAGE}')
    spec = job.get("spec") or {}
    specs = spec.get("pytorchReplicaSpecs")
    elastic = spec.get("elasticPolicy")
    path = "spec.pytorchReplicaSpecs"
    if elastic is not None:
        if "Worker" not in (specs or {}):
            errors.append(f"{path}[Worker]: Required value: must be configured if elastic policy is used")
        if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            errors.append(
                "spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode"
            )
    if specs is None:
        errors.append(f"{path}: Required value: must be required")
    for rtype, replica_spec in (specs or {}).items():
        errors += _pytorch_replica_errors(f"{path}[{rtype}]", rtype, replica_spec or {})
    if not errors:
        return ""
    unique = list(dict.fromkeys(errors))
    body = unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]"
    return f'admission webhook "{PYTORCH_WEBHOOK}" denied the request: {body}'


def _pytorch_replica_errors(path: str, rtype: str, replica_spec: dict[str, Any]) -> list[str]:
    errors = []
    if rtype not in ("Master", "Worker"):
        errors.append(f'{path}: Unsupported value: "{rtype}": supported values: "Master", "Worker"')
    containers = ((replica_spec.get("template") or {}).get("spec") or {}).get("containers") or []
    where = f"{path}.template.spec.containers"
    if not containers:
        errors.append(f"{where}: Required value: must be specified")
    errors += [
        f"{where}[{i}].image: Required value: must be required"
        for i, c in enumerate(containers)
        if not c.get("image")
    ]
    if "pytorch" not in [c.get("name") for c in containers]:
        errors.append(f"{where}: Required value: must have at least one container with name pytorch")
    replicas = replica_spec.get("replicas")
    if rtype == "Master" and replicas != 1:
        errors.append(f"{path}.replicas: Forbidden: must be 1")
    elif rtype != "Master" and replicas is not None and replicas < 1:
        errors.append(f"{path}.replicas: Forbidden: must be at least 1")
    return errors


def _failing_pods(kind: _JobKind, replicas: list[_Replica], script: TrainingScript) -> set[str]:
    """Pods a failing script fails: the first of ``failing_replica`` (and an MPIJob's launcher)."""
    if script.outcome not in FAILURES or not replicas:
        return set()
    wanted = script.failing_replica.lower()
    chosen = next((r for r in replicas if r.rtype.lower() == wanted), replicas[0])
    failing = {chosen.pod_name}
    if kind.kind == "MPIJob":  # mpirun on the launcher exits when any rank dies
        failing |= {r.pod_name for r in replicas if r.rtype.lower() == "launcher"}
    return failing


def _validate_training_job(kind: _JobKind, job: dict[str, Any]) -> str:
    """What the operator's validation rejects in ``job`` ("" when it is fine)."""
    spec = job.get("spec") or {}
    if not kind.specs_field:
        if not ((spec.get("template") or {}).get("spec") or {}).get("containers"):
            return "spec.template.spec.containers: Required value"
        return ""
    specs = spec.get(kind.specs_field)
    if not isinstance(specs, dict) or not specs:
        return f"spec.{kind.specs_field}: Required value"
    for rtype, replica_spec in specs.items():
        containers = (((replica_spec or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        where = f"spec.{kind.specs_field}[{rtype}].template.spec.containers"
        if not containers:
            return f"{where}: Required value"
        if kind.container and kind.container not in [c.get("name") for c in containers]:
            return f'{where}: Required value: must have a container named "{kind.container}"'
    return ""


def _job_condition(ctype: str, status: str, reason: str, message: str, at: float) -> dict[str, str]:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": rfc3339(at),
        "lastTransitionTime": rfc3339(at),
    }


def _job_conditions(
    kind: _JobKind, job: dict[str, Any], run: _Run, now: float, failed_rtype: str
) -> list[dict]:
    """Conditions as the operators set them: Created, then Running, then Running False + a terminal one."""
    meta, script, timeline = job["metadata"], run.script, run.timeline
    names = {"kind": kind.kind, "namespace": meta["namespace"], "name": meta["name"], "rtype": failed_rtype}
    qualified = f"{kind.kind} {meta['namespace']}/{meta['name']}"
    created = _job_condition(
        "Created", "True", f"{kind.kind}Created", kind.created_message.format(**names), timeline.start
    )
    stage = run.stage(now)
    if stage == "pending":
        return [created]
    running = _job_condition(
        "Running", "True", f"{kind.kind}Running", f"{qualified} is running.", timeline.running
    )
    if stage == "running":
        return [created, running]
    final = "Succeeded" if script.outcome == "Succeeded" else "Failed"
    default = (
        f"{qualified} successfully completed."
        if final == "Succeeded"
        else kind.failed_message.format(**names)
    )
    reason = kind.failed_reason if final == "Failed" and kind.failed_reason else f"{kind.kind}{final}"
    terminal = _job_condition(final, "True", reason, script.message or default, timeline.end)
    # setCondition flips Running to False in place: its times stay those of the transition to True.
    return [created, {**running, "status": "False"}, terminal]


def _replica_statuses(rtypes: list[str], pods: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{ReplicaType: {active, succeeded, failed}} counted from pod phases; zero counts omitted."""
    statuses: dict[str, dict[str, int]] = {rtype: {} for rtype in rtypes}
    by_lower = {rtype.lower(): rtype for rtype in rtypes}
    counters = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}
    for pod in pods:
        rtype = by_lower.get(pod["metadata"].get("labels", {}).get(LABEL_REPLICA_TYPE, ""))
        counter = counters.get((pod.get("status") or {}).get("phase", ""))
        if rtype and counter:
            statuses[rtype][counter] = statuses[rtype].get(counter, 0) + 1
    return statuses


def _v1alpha1_status(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The old mpi-operator's status: the launcher Job's state and the running workers; no conditions."""
    roles = [
        (pod["metadata"]["labels"].get("mpi_role_type"), (pod.get("status") or {}).get("phase"))
        for pod in pods
    ]
    launcher = next((phase for role, phase in roles if role == "launcher"), "")
    status: dict[str, Any] = {
        "workerReplicas": sum(1 for role, phase in roles if (role, phase) == ("worker", "Running"))
    }
    launcher_status = {"Running": "Active", "Succeeded": "Succeeded", "Failed": "Failed"}.get(launcher or "")
    if launcher_status:
        status["launcherStatus"] = launcher_status
    return status


# --------------------------------------------------------------------------------- pods


def _pod_condition(ctype: str, status: str, at: float, reason: str = "", message: str = "") -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": ctype,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(at),
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _node_for(pod: dict[str, Any]) -> str:
    return pod["spec"].get("nodeName") or f"fake-node-{int(_digest(pod['metadata']['uid'])[:4], 16) % 4}"


def _container_state(run: _Run, now: float, failing: bool, image: str) -> tuple[str, dict[str, Any]]:
    """(pod phase, container state) of a scheduled pod's containers at ``now``."""
    script, timeline = run.script, run.timeline
    stage = run.stage(now)
    if stage == "pending":
        if script.outcome == "ImagePullBackOff" and now >= timeline.running:
            return "Pending", {
                "waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
            }
        return "Pending", {"waiting": {"reason": "ContainerCreating"}}
    started = rfc3339(timeline.running)
    if stage == "running" or (script.outcome != "Succeeded" and not failing):
        return "Running", {"running": {"startedAt": started}}
    reason, exit_code = FAILURES[script.outcome] if failing else ("Completed", 0)
    terminated = {
        "exitCode": script.exit_code if exit_code is None else exit_code,
        "reason": reason,
        "startedAt": started,
        "finishedAt": rfc3339(timeline.end),
    }
    return ("Failed" if failing else "Succeeded"), {"terminated": terminated}


def _repository(image: str) -> str:
    """An image reference without its tag (a registry's port is not a tag)."""
    repository, _, tag = image.rpartition(":")
    return repository if repository and "/" not in tag else image


def _container_status(pod_uid: str, container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    started = "waiting" not in state
    image = container.get("image", "")
    status = {
        "name": container["name"],
        "image": image,
        "imageID": f"{_repository(image)}@sha256:{_digest(image)}" if started else "",
        "ready": "running" in state,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
        "lastState": {},
    }
    if started:
        status["containerID"] = f"containerd://{_digest(pod_uid + container['name'])}"
    if "terminated" in state:
        status["state"] = {"terminated": {**state["terminated"], "containerID": status["containerID"]}}
    return status


def _pod_status(pod: dict[str, Any], run: _Run, now: float, failing: bool) -> dict[str, Any]:
    """The status the scheduler and kubelet would have written for ``pod`` by ``now``."""
    timeline = run.timeline
    if run.script.outcome == "Unschedulable":
        message = run.script.message or DEFAULT_UNSCHEDULABLE_MESSAGE
        return {
            "phase": "Pending",
            "conditions": [_pod_condition("PodScheduled", "False", timeline.start, "Unschedulable", message)],
        }
    containers = pod["spec"].get("containers") or []
    states = [_container_state(run, now, failing, c.get("image", "")) for c in containers]
    phase = states[0][0] if states else "Pending"
    ready = "True" if phase == "Running" else "False"
    not_ready = {
        "Pending": (
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(c['name'] for c in containers)}]",
        ),
        "Succeeded": ("PodCompleted", ""),
        "Failed": ("PodFailed", ""),
    }.get(phase, ("", ""))
    since = {"Pending": timeline.start, "Running": timeline.running}.get(phase, timeline.end)
    uid_digest = _digest(pod["metadata"]["uid"])
    ip = f"10.244.{int(uid_digest[:2], 16)}.{int(uid_digest[2:4], 16)}"
    conditions = [
        _pod_condition("Initialized", "True", timeline.start),
        _pod_condition("Ready", ready, since, *not_ready),
        _pod_condition("ContainersReady", ready, since, *not_ready),
        _pod_condition("PodScheduled", "True", timeline.start),
    ]
    evicted = {}
    if run.script.outcome == "Evicted" and failing and phase == "Failed":
        message = run.script.message or DEFAULT_EVICTION_MESSAGE
        evicted = {"reason": EVICTED_REASON, "message": message}
        conditions.append(
            _pod_condition(DISRUPTION_TARGET, "True", timeline.end, TERMINATION_BY_KUBELET, message)
        )
    return {
        "phase": phase,
        **evicted,
        "conditions": conditions,
        "hostIP": "192.168.0.10",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": rfc3339(timeline.start),
        "containerStatuses": [
            _container_status(
                pod["metadata"]["uid"], c, _with_termination_message(run.log_lines(pod), run, c, state)
            )
            for c, (_, state) in zip(containers, states, strict=True)
        ],
    }


def _with_termination_message(
    lines: list[str], run: _Run, container: dict[str, Any], state: dict[str, Any]
) -> dict[str, Any]:
    """A terminated state with the message the kubelet reads from the termination log (or the tail
    of the container's log ``lines``)."""
    terminated = state.get("terminated")
    if terminated is None:
        return state
    message = run.script.termination_message
    fallback = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
    if not message and fallback and terminated["exitCode"] != 0 and lines:
        tail = "".join(f"{line}\n" for line in lines[-FALLBACK_LOG_LINES:]).encode()
        message = tail[-FALLBACK_LOG_BYTES:].decode(errors="replace")
    return {"terminated": {**terminated, "message": message}} if message else state


def _config_error_status(
    pod: dict[str, Any], status: dict[str, Any], errors: dict[str, str]
) -> dict[str, Any]:
    """``status`` with the containers the kubelet cannot configure waiting in CreateContainerConfigError.

    As on a node, the pod stays Pending (and its log unreadable) until the Secret or key exists.
    """
    waiting = {
        name: {"reason": "CreateContainerConfigError", "message": message} for name, message in errors.items()
    }
    return _waiting_status(pod, status, waiting)


def _mount_blocked_status(pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """``status`` of a pod whose volumes cannot be set up: Pending, every container ContainerCreating."""
    waiting = {c["name"]: {"reason": "ContainerCreating"} for c in pod["spec"].get("containers") or []}
    return _waiting_status(pod, status, waiting)


def _waiting_status(
    pod: dict[str, Any], status: dict[str, Any], waiting: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """``status`` with the named containers waiting (the pod Pending, not Ready)."""
    status = copy.deepcopy(status)
    statuses = []
    for container, current in zip(
        pod["spec"].get("containers") or [], status.get("containerStatuses") or [], strict=True
    ):
        if container["name"] in waiting:
            current = _container_status(
                pod["metadata"]["uid"], container, {"waiting": waiting[container["name"]]}
            )
        statuses.append(current)
    status["containerStatuses"] = statuses
    if status.get("phase") != "Pending":
        status["phase"] = "Pending"
        for condition in status.get("conditions") or []:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition["status"] = "False"
    return status


def _log_container(pod: dict[str, Any], requested: str | None) -> dict[str, Any]:
    """The container a log request means, or the API server's 400 when it is ambiguous or wrong."""
    containers = pod["spec"].get("containers") or []
    name = pod["metadata"]["name"]
    if not requested:
        if len(containers) != 1:
            names = " ".join(c["name"] for c in containers)
            raise KubeApiError(
                400, f"a container name must be specified for pod {name}, choose one of: [{names}]"
            )
        return containers[0]
    for container in containers:
        if container["name"] == requested:
            return container
    raise KubeApiError(400, f"container {requested} is not valid for pod {name}")


def _log_started(pod: dict[str, Any], container: dict[str, Any]) -> None:
    """Refuse logs of a container that has not started, with the kubelet's message."""
    name = pod["metadata"]["name"]
    if not pod["spec"].get("nodeName"):
        raise KubeApiError(400, f"pod {name} does not have a host assigned")
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s["name"] == container["name"]), None)
    waiting = status["state"].get("waiting") if status else {"reason": "ContainerCreating"}
    if waiting is not None:
        reason = waiting.get("reason", "")
        why = "trying and failing to pull image" if reason in ("ImagePullBackOff", "ErrImagePull") else reason
        raise KubeApiError(400, f'container "{container["name"]}" in pod "{name}" is waiting to start: {why}')


def _select_log(lines: list[tuple[int, str]], query: dict[str, str], now_ns: int) -> list[tuple[int, str]]:
    """Apply sinceTime (inclusive, whole seconds), sinceSeconds and tailLines, as the kubelet does.

    sinceTime loses its fraction on the way to the kubelet, so a reader resuming from the timestamp
    of the last line it saw gets that line again, and any others of the same second.
    """
    if "sinceTime" in query and "sinceSeconds" in query:
        raise KubeApiError(
            422, "PodLogOptions is invalid: at most one of `sinceTime` or `sinceSeconds` may be specified"
        )
    since = None
    if query.get("sinceTime"):
        try:  # the API server passes sinceTime on to the kubelet in whole seconds
            since = parse_rfc3339_seconds(query["sinceTime"]) * 10**9
        except ValueError as exc:
            raise KubeApiError(400, f"sinceTime: {exc}") from exc
    elif query.get("sinceSeconds"):
        since = now_ns - _int_query(query, "sinceSeconds") * 10**9
    selected = [(t, line) for t, line in lines if since is None or t >= since]
    if query.get("tailLines"):
        tail = _int_query(query, "tailLines")
        selected = selected[-tail:] if tail else []
    return selected


def _render_log(lines: list[tuple[int, str]], timestamps: bool) -> bytes:
    return "".join(f"{rfc3339_nano(t)} {line}\n" if timestamps else f"{line}\n" for t, line in lines).encode()


def _int_query(query: dict[str, str], name: str) -> int:
    try:
        value = int(query[name])
    except ValueError as exc:
        raise KubeApiError(400, f"{name}: invalid integer {query[name]!r}") from exc
    if value < 0:
        raise KubeApiError(422, f"{name}: Invalid value: {value}: must be greater than or equal to 0")
    return value


def _true(query: dict[str, str], name: str) -> bool:
    """A boolean query parameter as Go's ParseBool reads it (the Python client sends "True")."""
    return query.get(name, "").lower() in ("1", "t", "true")


# --------------------------------------------------------------------------------- the fake


class KubernetesFake:
    """A Kubernetes API server on 127.0.0.1 with a fake training-operator, scheduler and kubelet.

    Requests are served one at a time under a lock (the controller takes the same lock), and each
    first lets the controller catch up with :attr:`clock`, so with a manual clock what a test reads
    is decided by the clock alone.
    """

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        tick_seconds: float = 0.02,
        on_create: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.token = token
        #: Bearer tokens the server accepts, with the clock time each expires at (None: never).
        self._tokens: dict[str, float | None] = {token: None}
        self.tick_seconds = tick_seconds
        self.on_create = on_create
        self.clock: Callable[[], float] = time.time
        self.default_script = TrainingScript()
        self.internal_errors: list[str] = []
        self._scripts: dict[str, TrainingScript] = {}
        self._faults: list[_Fault] = []
        self._records: list[KubeRequest] = []
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._resource_version = 0
        self._event_serial = 0
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {rt.plural: {} for rt in RESOURCES}
        self._born: dict[str, float] = {}
        #: When each object being deleted was asked to be (its deletionTimestamp is that plus the grace).
        self._deletion_asked: dict[str, float] = {}
        self._runs: dict[str, _Run] = {}
        #: VolumeAttachments by name: the PV, node and driver, and the pods that use it.
        self._attachments: dict[str, dict[str, Any]] = {}
        self._httpd: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # ----------------------------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the kubeconfig's cluster server."""
        if self._httpd is None:
            raise RuntimeError("the fake is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> Self:
        """Listen on a free port; serve and run the controller from daemon threads."""
        self._stopping.clear()
        handler = type("_BoundHandler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._threads = [
            threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True),
            threading.Thread(target=self._control_loop, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (ending any followed log stream) and the controller; release the port."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        for thread in self._threads:
            thread.join()
        self._threads = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path, user: dict[str, Any] | None = None) -> Path:
        """Write a kubeconfig whose current context reaches this fake with its bearer token, or as
        ``user`` (a kubeconfig ``user``: ``{"tokenFile": ...}``, ``{"exec": ...}``)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-user", "user": user or {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake-user"}}],
            "current-context": "fake",
            "preferences": {},
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config))
        return target

    # ----------------------------------------------------------------------------- test controls

    def script_for(self, name_prefix: str, script: TrainingScript) -> None:
        """Jobs and bare pods whose name starts with the prefix follow ``script`` (longest prefix wins)."""
        with self._lock:
            self._scripts[name_prefix] = script

    def issue_token(self, token: str, expires_at: float | None = None) -> None:
        """Accept ``token`` as well, until :attr:`clock` reaches ``expires_at`` (None: never).

        A bound service-account token or an exec plugin's token is rejected once it expired, and a
        request with credentials the server does not accept is answered 401 Unauthorized
        (Kubernetes "Authenticating": "the request is rejected with HTTP status code 401").
        """
        with self._lock:
            self._tokens[token] = expires_at

    def expire_token(self, token: str) -> None:
        """Reject ``token`` from now on, as once its expiry passed."""
        self.issue_token(token, self.clock())

    def _authenticated(self, authorization: str) -> bool:
        scheme, _, token = authorization.partition(" ")
        with self._lock:
            expiry = self._tokens.get(token, 0.0) if scheme.lower() == "bearer" else 0.0
            return expiry is None or self.clock() < expiry

    def fail_next(self, method: str, path_contains: str, status: int = 503, times: int = 1) -> None:
        """Answer the next ``times`` matching requests with a ``status`` error, before they touch state."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), path_contains, status, times))

    @property
    def requests(self) -> list[KubeRequest]:
        """Every request served so far, oldest first (a copy)."""
        with self._lock:
            return list(self._records)

    @property
    def volume_attachments(self) -> dict[str, dict[str, str]]:
        """The VolumeAttachments by name (persistentVolumeName, nodeName, attacher), after a controller
        pass at :attr:`clock`'s time."""
        with self._lock:
            self.reconcile()
            return {
                name: {key: value for key, value in attachment.items() if key != "pods"}
                for name, attachment in self._attachments.items()
            }

    def count(self, method: str, path_contains: str = "") -> int:
        """How many ``method`` requests had a path containing ``path_contains``."""
        return sum(1 for r in self.requests if r.method == method.upper() and path_contains in r.path)

    def reconcile(self) -> None:
        """Run one controller pass now (the background thread does so every ``tick_seconds``)."""
        with self._lock:
            now = self.clock()
            self._finish_deletions(now)
            self._collect_garbage()
            self._release_attachments()
            training_uids = self._reconcile_jobs(now)
            self._reconcile_bare_pods(now, training_uids)
            self._reconcile_volumes()
            # A deleted job's run stays while its pods terminate: their logs and stop time are its.
            live = {
                uid
                for obj in self._all_objects()
                for uid in (
                    obj["metadata"]["uid"],
                    *(ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or []),
                )
            }
            self._runs = {uid: run for uid, run in self._runs.items() if uid in live}

    def _control_loop(self) -> None:
        while not self._stopping.wait(self.tick_seconds):
            try:
                self.reconcile()
            except Exception as exc:  # a fake bug: keep it visible to the test's teardown
                self.internal_errors.append(f"controller: {exc!r}")

    def _script(self, name: str) -> TrainingScript:
        prefixes = [p for p in self._scripts if name.startswith(p)]
        return self._scripts[max(prefixes, key=len)] if prefixes else self.default_script

    # ----------------------------------------------------------------------------- serving

    def _serve(self, call: _Call, authorization: str) -> _Reply:
        """Answer one request; every answer, error or not, is recorded."""
        try:
            if not self._authenticated(authorization):
                raise KubeApiError(401, "Unauthorized")
            self._raise_injected_fault(call)
            with self._lock:
                self.reconcile()
                reply = self._route(call)
            created = _created_training_job(call, reply)
            if created is not None and self.on_create is not None:
                self.on_create(created)
        except KubeApiError as error:
            reply = _json_reply(error.code, error.status())
        except Exception as exc:  # a fake bug: answer like the server would, and keep it visible
            self.internal_errors.append(f"{call.method} {call.path}: {exc!r}")
            reply = _json_reply(500, KubeApiError(500, f"the fake failed: {exc!r}").status())
        with self._lock:
            self._records.append(
                KubeRequest(call.method, call.path, call.query, call.body, call.content_type, reply.status)
            )
        return reply

    def _raise_injected_fault(self, call: _Call) -> None:
        with self._lock:
            fault = next(
                (
                    f
                    for f in self._faults
                    if f.method == call.method and f.path_contains in call.path and f.remaining
                ),
                None,
            )
            if fault is not None:
                fault.remaining -= 1
                raise KubeApiError(fault.status, f"injected fault: {fault.status}")

    def _route(self, call: _Call) -> _Reply:
        parts = [part for part in call.path.split("/") if part]
        document = self._discovery(parts)
        if document is not None:
            if call.method != "GET":
                raise KubeApiError(405, "the server does not allow this method on the requested resource")
            return _json_reply(200, document)
        target = _parse_target(parts)
        handler = self._handler_for(target, call)
        return handler(target, call)

    def _handler_for(self, target: _Target, call: _Call) -> Callable[[_Target, _Call], _Reply]:
        table: dict[str, Callable[[_Target, _Call], _Reply]]
        if target.name is None:
            table = {"GET": self._list, "POST": self._create, "DELETE": self._delete_collection}
        elif target.subresource == "log":
            table = {"GET": self._read_log}
        else:
            table = {"GET": self._read, "PUT": self._replace, "PATCH": self._patch}
            if target.subresource is None:
                table["DELETE"] = self._delete
        across_namespaces = target.name is None and target.namespace is None and target.rtype.namespaced
        if call.method not in table or (across_namespaces and call.method != "GET"):
            raise KubeApiError(405, "the server does not allow this method on the requested resource")
        if call.method == "GET" and _true(call.query, "watch"):
            raise KubeApiError(403, "watch is not emulated by this fake; poll with list instead")
        return table[call.method]

    # ----------------------------------------------------------------------------- discovery

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        """The discovery document at ``parts``, or None when the path is not a discovery path."""
        match parts:
            case ["version"]:
                return VERSION_INFO
            case ["api"]:
                address = self.url.removeprefix("http://")
                return {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
                }
            case ["api", "v1"]:
                return _resource_list("", "v1")
            case ["apis"]:
                return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_api_group(TRAINING_GROUP)]}
            case ["apis", group] if group == TRAINING_GROUP:
                return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(group)}
            case ["apis", group, version] if _served(group, version):
                return _resource_list(group, version)
        return None

    # ----------------------------------------------------------------------------- store

    def _store(self, rtype: ResourceType) -> dict[tuple[str, str], dict[str, Any]]:
        return self._objects[rtype.plural]

    def _all_objects(self) -> Iterator[dict[str, Any]]:
        for store in self._objects.values():
            yield from store.values()

    def _get(self, target: _Target) -> dict[str, Any]:
        obj = self._store(target.rtype).get((target.namespace or "", target.name or ""))
        if obj is None:
            raise target.rtype.not_found(target.name or "")
        return obj

    def _commit(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` under a new resourceVersion (one global counter, as etcd's revision)."""
        self._resource_version += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._resource_version)
        self._store(rtype)[(meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def _insert(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Give a new object the server-set metadata and store it."""
        now = self.clock()
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(now)
        if rtype.has_generation:
            meta["generation"] = 1
        self._born[meta["uid"]] = now
        return self._commit(rtype, obj)

    def _remove(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self._store(rtype).pop((meta.get("namespace", ""), meta["name"]), None)
        self._born.pop(meta["uid"], None)
        self._deletion_asked.pop(meta["uid"], None)

    def _set_status(self, rtype: ResourceType, obj: dict[str, Any], status: dict[str, Any]) -> None:
        if obj.get("status") != status:
            obj["status"] = status
            self._commit(rtype, obj)

    def _emit_event(
        self,
        run: _Run,
        key: str,
        involved: dict[str, Any],
        reason: str,
        message: str,
        at: float,
        component: str,
        event_type: str = "Normal",
    ) -> None:
        """Record an Event about ``involved`` once per ``key`` (as a controller or kubelet would)."""
        if key in run.emitted:
            return
        run.emitted.add(key)
        meta = involved["metadata"]
        self._event_serial += 1  # same-instant events stay unique, and listed in the order emitted
        name = f"{meta['name']}.{round(at * 1e9) + self._event_serial:x}"  # the recorder's name.<unix nanos>
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": meta.get("namespace") or "default"},
            "involvedObject": {
                "kind": involved["kind"],
                "namespace": meta.get("namespace"),
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": involved["apiVersion"],
                "resourceVersion": meta["resourceVersion"],
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": component},
            "firstTimestamp": rfc3339(at),
            "lastTimestamp": rfc3339(at),
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": "",
        }
        self._insert(EVENTS, event)

    def _view(self, target: _Target, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` as served at the requested version (a copy)."""
        return {**copy.deepcopy(obj), "apiVersion": target.api_version, "kind": target.rtype.kind}

    # ----------------------------------------------------------------------------- verbs

    def _select(self, target: _Target, query: dict[str, str]) -> list[dict[str, Any]]:
        """Objects in the target's namespace matching its selectors, in etcd key order."""
        requirements = parse_label_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(query.get("fieldSelector", ""), target.rtype)
        items = [
            obj
            for obj in self._store(target.rtype).values()
            if (target.namespace is None or obj["metadata"].get("namespace") == target.namespace)
            and all(r.matches(obj["metadata"].get("labels") or {}) for r in requirements)
            and all((_field_value(obj, name) == value) == equal for name, equal, value in fields)
        ]
        return sorted(items, key=_list_key)

    def _list_body(
        self, target: _Target, items: list[dict[str, Any]], metadata: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "kind": f"{target.rtype.kind}List",
            "apiVersion": target.api_version,
            "metadata": {"resourceVersion": str(self._resource_version), **metadata},
            "items": [self._view(target, obj) for obj in items],
        }

    def _list(self, target: _Target, call: _Call) -> _Reply:
        selected = self._select(target, call.query)
        page, metadata = _paginate(selected, call.query, str(self._resource_version))
        return _json_reply(200, self._list_body(target, page, metadata))

    def _read(self, target: _Target, _call: _Call) -> _Reply:
        return _json_reply(200, self._view(target, self._get(target)))

    def _create(self, target: _Target, call: _Call) -> _Reply:
        obj = self._admit(target, call.body)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if key in self._store(target.rtype):
            raise target.rtype.already_exists(key[1])
        if call.query.get("dryRun"):
            return _json_reply(201, self._view(target, obj))
        return _json_reply(201, self._view(target, self._insert(target.rtype, obj)))

    def _replace(self, target: _Target, call: _Call) -> _Reply:
        current = self._get(target)
        body = _object_body(call.body)
        _check_type(target, body)
        if target.rtype.group and not (body.get("metadata") or {}).get("resourceVersion"):
            raise target.rtype.invalid(
                target.name or "",
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            )
        return self._update(target, current, body, call)

    def _patch(self, target: _Target, call: _Call) -> _Reply:
        current = self._get(target)
        patched = _apply_patch(target.rtype, self._view(target, current), call.content_type, call.body)
        return self._update(target, current, _object_body(patched), call)

    def _update(self, target: _Target, current: dict[str, Any], new: dict[str, Any], call: _Call) -> _Reply:
        """Write ``new`` over ``current`` with optimistic concurrency; status only via /status."""
        rtype, name = target.rtype, target.name or ""
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise KubeApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
            )
        current_meta = current["metadata"]
        if meta.get("resourceVersion") and meta["resourceVersion"] != current_meta["resourceVersion"]:
            raise rtype.conflict(
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        _check_preconditions(target, current, {"uid": meta.get("uid")})
        if target.subresource == "status":
            updated = {**copy.deepcopy(current), "status": new.get("status")}
        else:
            updated = {**new, "apiVersion": current["apiVersion"], "kind": current["kind"]}
            updated["metadata"] = {**meta, **_immutable_meta(current_meta)}
            if rtype.status_subresource:
                updated.pop("status", None)
                if "status" in current:
                    updated["status"] = copy.deepcopy(current["status"])
            self._validate(rtype, updated)
            if rtype.has_generation and _spec_of(updated) != _spec_of(current):
                updated["metadata"]["generation"] = current_meta.get("generation", 1) + 1
        if updated.get("status") is None:
            updated.pop("status", None)
        if call.query.get("dryRun"):
            return _json_reply(200, self._view(target, updated))
        return _json_reply(200, self._view(target, self._commit(rtype, updated)))

    def _delete(self, target: _Target, call: _Call) -> _Reply:
        obj = self._get(target)
        options = call.body if isinstance(call.body, dict) else {}
        _check_preconditions(target, obj, options.get("preconditions") or {})
        if call.query.get("dryRun") or options.get("dryRun"):
            return self._deleted_reply(target, obj)
        policy = call.query.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
        grace = call.query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        self._begin_delete(target.rtype, obj, policy, None if grace is None else int(grace))
        self._collect_garbage()
        return self._deleted_reply(target, obj)

    def _deleted_reply(self, target: _Target, obj: dict[str, Any]) -> _Reply:
        """The deleted object (pods, PVs, PVCs) or a Success Status; an object whose deletion is
        pending (a pod's grace period, finalizers) is answered as it now is, deletionTimestamp set."""
        if target.rtype.returns_deleted_object or obj["metadata"].get("deletionTimestamp"):
            return _json_reply(200, self._view(target, obj))
        details = {**target.rtype.details(obj["metadata"]["name"]), "uid": obj["metadata"]["uid"]}
        return _json_reply(
            200,
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details},
        )

    def _delete_collection(self, target: _Target, call: _Call) -> _Reply:
        """Delete every selected object; like the real server, answer the list of what was deleted."""
        deleted = self._select(target, call.query)
        for obj in deleted:
            self._begin_delete(target.rtype, obj, "Background", None)
        self._collect_garbage()
        return _json_reply(200, self._list_body(target, deleted, {}))

    def _read_log(self, target: _Target, call: _Call) -> _Reply:
        pod = self._get(target)
        container = _log_container(pod, call.query.get("container"))
        _log_started(pod, container)
        if _true(call.query, "previous"):
            where = f'container "{container["name"]}" in pod "{pod["metadata"]["name"]}"'
            raise KubeApiError(400, f"previous terminated {where} not found")
        visible = self._visible_log(pod)
        selected = _select_log(visible, call.query, round(self.clock() * 1e9))
        timestamps = _true(call.query, "timestamps")
        if _true(call.query, "follow"):
            return _Reply(
                200,
                content_type="text/plain",
                stream=self._follow(pod["metadata"]["uid"], target, selected, len(visible), timestamps),
            )
        text = _render_log(selected, timestamps)
        if call.query.get("limitBytes"):
            text = text[: _int_query(call.query, "limitBytes")]
        return _Reply(200, text, "text/plain")

    def _visible_log(self, pod: dict[str, Any]) -> list[tuple[int, str]]:
        """(emit time ns, line) of the pod's lines emitted by now."""
        run = self._run_of_pod(pod)
        if run is None:
            return []
        now_ns = round(self.clock() * 1e9)
        lines = run.log_lines(pod)
        return [(t, line) for t, line in zip(run.log_times(len(lines)), lines, strict=True) if t <= now_ns]

    def _follow(
        self, uid: str, target: _Target, backlog: list[tuple[int, str]], sent: int, timestamps: bool
    ) -> Iterator[bytes]:
        """Stream the backlog, then lines as they are emitted, until the container terminates."""
        yield _render_log(backlog, timestamps)
        while not self._stopping.is_set():
            with self._lock:
                self.reconcile()
                pod = self._store(target.rtype).get((target.namespace or "", target.name or ""))
                if pod is None or pod["metadata"]["uid"] != uid:
                    return
                visible = self._visible_log(pod)
                done = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if len(visible) > sent:
                yield _render_log(visible[sent:], timestamps)
                sent = len(visible)
            if done:
                return
            time.sleep(self.tick_seconds)

    # ----------------------------------------------------------------------------- admission

    def _admit(self, target: _Target, body: Any) -> dict[str, Any]:
        """Check a create body and fill in what the server derives (name, namespace, initial status)."""
        rtype = target.rtype
        obj = copy.deepcopy(_object_body(body))
        _check_type(target, obj)
        obj["apiVersion"], obj["kind"] = target.api_version, rtype.kind
        meta = obj.setdefault("metadata", {})
        if meta.get("resourceVersion"):
            raise KubeApiError(500, "resourceVersion should not be set on objects to be created", reason="")
        if rtype.namespaced:
            if meta.get("namespace", target.namespace) != target.namespace:
                raise KubeApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = target.namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + _name_suffix(uuid.uuid4().hex)
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
            meta.pop(key, None)
        if rtype.status_subresource:
            obj.pop("status", None)
            if rtype.initial_phase:
                obj["status"] = {"phase": rtype.initial_phase}
        self._validate(rtype, obj)
        return obj

    def _validate(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """The validation a real server (and the training operators' webhooks) would refuse with 422."""
        name = obj["metadata"].get("name") or ""
        if not name:
            raise rtype.invalid(name, "metadata.name: Required value: name or generateName is required")
        if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
            raise rtype.invalid(
                name,
                f'metadata.name: Invalid value: "{name}": {DNS1123_SUBDOMAIN_MESSAGE}',
            )
        problem = _validate_body(rtype, obj)
        if problem:
            raise rtype.invalid(name, problem)
        denial = _pytorch_webhook_denial(obj) if rtype is PYTORCH_JOBS else ""
        if (
            denial
        ):  # a validating webhook's Denied answer: 403 Forbidden, its message after the webhook's name
            raise KubeApiError(403, denial)

    # ----------------------------------------------------------------------------- garbage collection

    def _orphan(self, owner_uid: str) -> None:
        """Drop owner references to a deleted owner (propagationPolicy=Orphan)."""
        for rtype in RESOURCES:
            for obj in list(self._store(rtype).values()):
                refs = obj["metadata"].get("ownerReferences") or []
                kept = [ref for ref in refs if ref.get("uid") != owner_uid]
                if len(kept) != len(refs):
                    obj["metadata"]["ownerReferences"] = kept
                    self._commit(rtype, obj)

    def _begin_delete(
        self, rtype: ResourceType, obj: dict[str, Any], policy: str, grace_seconds: int | None
    ) -> None:
        """Delete ``obj`` as the API server does ("Garbage Collection", "Pod Lifecycle: Termination
        of Pods"): at once, unless its deletion must wait, in which case it stays, deletionTimestamp
        set, until :meth:`_finish_deletions` removes it.

        It waits for its finalizers (foreground propagation adds ``foregroundDeletion`` while it has
        dependents), and a pod for its grace period (``gracePeriodSeconds``, else the pod's
        ``terminationGracePeriodSeconds``, default 30) unless it is unscheduled or already Succeeded
        or Failed (pkg/registry/core/pod/strategy.go ``CheckGracefulDelete``): the kubelet stops its
        containers and deletes it when they exited. deletionTimestamp is the time the grace period
        ends; a second delete of an object being deleted changes nothing here.
        """
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        if policy == "Orphan":
            self._orphan(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and self._dependents(meta["uid"]):
            finalizers.append(FOREGROUND_FINALIZER)
        grace = _grace_seconds(obj, grace_seconds) if rtype is PODS else 0
        if not finalizers and grace == 0:
            self._remove(rtype, obj)
            return
        now = self.clock()
        meta.update(
            deletionTimestamp=rfc3339(now + grace), deletionGracePeriodSeconds=grace, finalizers=finalizers
        )
        if not finalizers:
            meta.pop("finalizers")
        self._deletion_asked[meta["uid"]] = now
        self._commit(rtype, obj)

    def _finish_deletions(self, now: float) -> None:
        """Remove what was being deleted once nothing holds it: no finalizer is left, and a pod's
        containers exited (after the script's ``stop_seconds``, at most the grace period: the kubelet
        kills them then) so that the kubelet deleted it for good."""
        for rtype in RESOURCES:
            for obj in list(self._store(rtype).values()):
                meta = obj["metadata"]
                if not meta.get("deletionTimestamp") or meta.get("finalizers"):
                    continue
                if rtype is PODS:
                    run = self._run_of_pod(obj)
                    stop = (run.script if run else self.default_script).stop_seconds
                    asked = self._deletion_asked.get(meta["uid"], now)
                    if now < asked + min(stop, meta.get("deletionGracePeriodSeconds") or 0):
                        continue
                self._remove(rtype, obj)

    def _dependents(self, owner_uid: str) -> list[tuple[ResourceType, dict[str, Any]]]:
        return [
            (rtype, obj)
            for rtype in RESOURCES
            for obj in self._store(rtype).values()
            if any(ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences") or [])
        ]

    def _collect_garbage(self) -> None:
        """The garbage collector: delete objects all of whose owners are gone, and the dependents of
        an owner in foreground deletion, whose ``foregroundDeletion`` finalizer goes once no dependent
        with ``blockOwnerDeletion`` is left ("Garbage Collection": foreground cascading deletion).

        Dependents are deleted as a client would delete them (a pod gracefully); repeated until a
        pass deletes nothing more, since an object removed at once may orphan others.
        """
        while True:
            stored = [(rtype, obj) for rtype in RESOURCES for obj in self._store(rtype).values()]
            live = {obj["metadata"]["uid"] for _, obj in stored}
            foreground = {
                obj["metadata"]["uid"]: (rtype, obj)
                for rtype, obj in stored
                if FOREGROUND_FINALIZER in (obj["metadata"].get("finalizers") or [])
            }
            doomed = [
                (rtype, obj)
                for rtype, obj in stored
                if not obj["metadata"].get("deletionTimestamp")
                and (refs := obj["metadata"].get("ownerReferences"))
                and (
                    not any(ref.get("uid") in live for ref in refs)
                    or any(ref.get("uid") in foreground for ref in refs)
                )
            ]
            for rtype, obj in doomed:
                self._begin_delete(rtype, obj, "Background", None)
            released = False
            for uid, (rtype, owner) in foreground.items():
                blocking = [
                    obj
                    for _, obj in self._dependents(uid)
                    if any(
                        ref.get("uid") == uid and ref.get("blockOwnerDeletion")
                        for ref in obj["metadata"]["ownerReferences"]
                    )
                ]
                if not blocking:
                    owner["metadata"]["finalizers"].remove(FOREGROUND_FINALIZER)
                    if not owner["metadata"]["finalizers"]:
                        self._remove(rtype, owner)
                    else:
                        self._commit(rtype, owner)
                    released = True
            if not doomed and not released:
                return

    # ----------------------------------------------------------------------------- controllers

    def _run_for(self, obj: dict[str, Any]) -> _Run:
        uid = obj["metadata"]["uid"]
        if uid not in self._runs:
            script = self._script(obj["metadata"]["name"])
            self._runs[uid] = _Run(script, _Timeline.of(script, self._born.get(uid, self.clock())))
        return self._runs[uid]

    def _run_of_pod(self, pod: dict[str, Any]) -> _Run | None:
        """The run a pod follows: its job's, or its own for a bare pod."""
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("uid") in self._runs:
                return self._runs[ref["uid"]]
        return self._runs.get(pod["metadata"]["uid"])

    def _reconcile_jobs(self, now: float) -> set[str]:
        """Advance every training CR; return their uids."""
        uids = set()
        for rtype in (PYTORCH_JOBS, TF_JOBS, MPI_JOBS):
            for job in list(self._store(rtype).values()):
                uids.add(job["metadata"]["uid"])
                self._reconcile_job(rtype, job, JOB_KINDS[(rtype.plural, job["apiVersion"])], now)
        return uids

    def _reconcile_job(self, rtype: ResourceType, job: dict[str, Any], kind: _JobKind, now: float) -> None:
        run = self._run_for(job)
        replicas = _replicas(job, kind)
        if job["metadata"].get("deletionTimestamp"):
            # The operators reconcile no job being deleted (training-operator release-1.9
            # pytorchjob_controller.go Reconcile; mpi-operator likewise); its pods' kubelets go on.
            failing = _failing_pods(kind, replicas, run.script)
            for pod in self._owned_pods(job["metadata"]["uid"]):
                self._advance_pod(pod, run, now, pod["metadata"]["name"] in failing)
            return
        if not run.pods_created:
            unreachable = _unreachable_workers(kind, job, replicas)
            if unreachable:  # mpirun fails on the launcher, whatever the script: no worker runs sshd
                run.launcher_log = _ssh_refused_log(unreachable)
                run.script = replace(
                    run.script,
                    outcome="Failed",
                    exit_code=MPIRUN_UNREACHABLE_EXIT_CODE,
                    failing_replica="launcher",
                )
            self._create_job_pods(job, kind, run, replicas)
        if run.script.outcome == RECORDED:
            # Bound to nodes as the scheduler would (the log endpoint needs a host); what the pods
            # did there is the recording's to write.
            for pod in self._owned_pods(job["metadata"]["uid"]):
                if not pod["spec"].get("nodeName"):
                    pod["spec"]["nodeName"] = _node_for(pod)
                    self._commit(PODS, pod)
            return
        failing = _failing_pods(kind, replicas, run.script)
        pods = self._owned_pods(job["metadata"]["uid"])
        for pod in pods:
            self._advance_pod(pod, run, now, pod["metadata"]["name"] in failing)
        if run.final_status is None:
            status = self._job_status(job, kind, run, replicas, pods, failing, now)
            if run.stage(now) == "ended":
                run.final_status = status
            self._set_status(rtype, job, status)
        if run.stage(now) == "ended":
            self._finish_job(rtype, job, kind, run, pods, failing, now)

    def _create_job_pods(
        self, job: dict[str, Any], kind: _JobKind, run: _Run, replicas: list[_Replica]
    ) -> None:
        """Create the replicas' pods. A name still held by another pod (an earlier job's, terminating)
        is tried again on later passes, as the operators create the replicas they find missing."""
        uid, taken = job["metadata"]["uid"], False
        for replica in replicas:
            holder = self._store(PODS).get((job["metadata"]["namespace"], replica.pod_name))
            if holder is not None:
                owners = holder["metadata"].get("ownerReferences") or []
                taken = taken or not any(ref.get("uid") == uid for ref in owners)
                continue
            labels = _operator_labels(kind, job["metadata"]["name"], replica, replicas)
            self._insert(PODS, _replica_pod(job, kind, replica, labels))
            self._emit_event(
                run,
                f"create:{replica.pod_name}",
                job,
                "SuccessfulCreatePod",
                f"Created pod: {replica.pod_name}",
                run.timeline.start,
                kind.operator,
            )
        run.pods_created = not taken

    def _owned_pods(self, owner_uid: str) -> list[dict[str, Any]]:
        return [
            pod
            for pod in self._store(PODS).values()
            if any(ref.get("uid") == owner_uid for ref in pod["metadata"].get("ownerReferences") or [])
        ]

    def _job_status(
        self,
        job: dict[str, Any],
        kind: _JobKind,
        run: _Run,
        replicas: list[_Replica],
        pods: list[dict[str, Any]],
        failing: set[str],
        now: float,
    ) -> dict[str, Any]:
        if not kind.specs_field:
            return _v1alpha1_status(pods)
        failed_rtype = next(
            (r.rtype for r in replicas if r.pod_name in failing and r.rtype != "Launcher"), "Launcher"
        )
        rtypes = list(dict.fromkeys(r.rtype for r in replicas))
        status = {
            "conditions": _job_conditions(kind, job, run, now, failed_rtype),
            "replicaStatuses": _replica_statuses(rtypes, pods),
            "startTime": rfc3339(run.timeline.start),
        }
        if run.stage(now) == "ended":
            status["completionTime"] = rfc3339(run.timeline.end)
        return status

    def _finish_job(
        self,
        rtype: ResourceType,
        job: dict[str, Any],
        kind: _JobKind,
        run: _Run,
        pods: list[dict[str, Any]],
        failing: set[str],
        now: float,
    ) -> None:
        """What the operator does once a job ended: events, cleanPodPolicy, ttlSecondsAfterFinished."""
        end, component = run.timeline.end, kind.operator
        for pod in pods:
            statuses = pod["status"].get("containerStatuses") or [{}]
            terminated = (statuses[0].get("state") or {}).get("terminated")
            if pod["metadata"]["name"] in failing and terminated is not None:
                code = terminated["exitCode"]
                message = (
                    f"Pod: {pod['metadata']['namespace']}.{pod['metadata']['name']} exited with code {code}"
                )
                self._emit_event(
                    run, f"exit:{pod['metadata']['name']}", job, "ExitedWithCode", message, end, component
                )
        final = run.final_status or {}
        terminal = (final.get("conditions") or [{}])[-1]
        if terminal.get("reason"):
            self._emit_event(run, "terminal", job, terminal["reason"], terminal["message"], end, component)
        spec = job.get("spec") or {}
        run_policy = spec.get("runPolicy") or {}
        if not run.cleaned:
            run.cleaned = True
            policy = run_policy.get("cleanPodPolicy") or spec.get("cleanPodPolicy") or kind.clean_pod_policy
            for pod in pods:
                if policy == "All" or (
                    policy == "Running" and pod["status"].get("phase") in ("Running", "Pending")
                ):
                    self._begin_delete(PODS, pod, "Background", None)
        ttl = run_policy.get("ttlSecondsAfterFinished")
        if ttl is not None and now >= end + ttl:
            self._begin_delete(rtype, job, "Background", None)
            self._collect_garbage()

    def _reconcile_bare_pods(self, now: float, training_uids: set[str]) -> None:
        """Pods no training job owns run their own script, as the scheduler and kubelet would run them."""
        for pod in list(self._store(PODS).values()):
            owners = {ref.get("uid") for ref in pod["metadata"].get("ownerReferences") or []}
            if owners & training_uids or pod["metadata"].get("deletionTimestamp"):
                continue
            run = self._run_for(pod)
            self._advance_pod(pod, run, now, run.script.outcome in FAILURES)

    def _advance_pod(self, pod: dict[str, Any], run: _Run, now: float, failing: bool) -> None:
        """Schedule ``pod`` (unless it cannot be), write its status and the events about it by ``now``.

        A pod being deleted keeps the status it had while the kubelet stops it (unverified: a kubelet
        reports its containers terminated as they exit, and a terminal phase before the deletion).
        """
        meta, timeline = pod["metadata"], run.timeline
        if meta.get("deletionTimestamp"):
            return
        if run.script.outcome == "Unschedulable":
            message = run.script.message or DEFAULT_UNSCHEDULABLE_MESSAGE
            self._emit_event(
                run,
                f"{meta['uid']}:schedule",
                pod,
                "FailedScheduling",
                message,
                timeline.start,
                "default-scheduler",
                "Warning",
            )
        elif not pod["spec"].get("nodeName"):
            pod["spec"]["nodeName"] = _node_for(pod)
            self._commit(PODS, pod)
            assigned = (
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {pod['spec']['nodeName']}"
            )
            self._emit_event(
                run,
                f"{meta['uid']}:schedule",
                pod,
                "Scheduled",
                assigned,
                timeline.start,
                "default-scheduler",
            )
        status = _pod_status(pod, run, now, failing)
        scheduled = run.script.outcome != "Unschedulable"
        mount_errors = self._mount_errors(pod, run) if scheduled else {}
        attach_errors = self._attach(pod) if scheduled else {}
        starting = scheduled and now >= timeline.running and not mount_errors and not attach_errors
        config_errors = self._config_errors(pod, run) if starting else {}
        if mount_errors or attach_errors:
            status = _mount_blocked_status(pod, status)
        elif config_errors:
            status = _config_error_status(pod, status, config_errors)
        self._set_status(PODS, pod, status)
        for volume, error in mount_errors.items():
            message = f'MountVolume.SetUp failed for volume "{volume}" : {error}'
            key = f"{meta['uid']}:mount:{volume}:{error}"
            self._emit_event(run, key, pod, "FailedMount", message, timeline.start, "kubelet", "Warning")
        for volume, error in attach_errors.items():
            key = f"{meta['uid']}:attach:{volume}"
            component = "attachdetach-controller"
            self._emit_event(run, key, pod, "FailedAttachVolume", error, timeline.start, component, "Warning")
        if starting:
            for container in pod["spec"].get("containers") or []:
                config_error = config_errors.get(container["name"])
                if config_error is None:
                    self._container_events(pod, run, container)
                    continue
                key = f"{meta['uid']}:{container['name']}:config"
                self._emit_event(
                    run, key, pod, "Failed", f"Error: {config_error}", timeline.running, "kubelet", "Warning"
                )

    def _attach(self, pod: dict[str, Any]) -> dict[str, str]:
        """Attach the pod's CSI volumes that need it to its node; the error of each that cannot be.

        As the CSI attacher, one VolumeAttachment per (volume handle, driver, node), named by
        :func:`volume_attachment_name`. A second PersistentVolume with the same handle and driver on
        the node finds that name taken by the first: the fake keeps it unattached (and the pod
        ContainerCreating) with a FailedAttachVolume Warning, where a cluster would treat both as
        one volume (csi_attacher.go reuses an existing attachment; unverified what follows).
        """
        node = pod["spec"].get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return {}
        errors = {}
        for volume, pv in self._attachable_volumes(pod):
            csi, pv_name = pv["spec"]["csi"], pv["metadata"]["name"]
            name = volume_attachment_name(csi["volumeHandle"], csi["driver"], node)
            holder = self._attachments.setdefault(
                name,
                {"persistentVolumeName": pv_name, "nodeName": node, "attacher": csi["driver"], "pods": set()},
            )
            if holder["persistentVolumeName"] == pv_name:
                holder["pods"].add(pod["metadata"]["uid"])
                continue
            handle, holder_pv = csi["volumeHandle"], holder["persistentVolumeName"]
            errors[volume] = (
                f'AttachVolume.Attach failed for volume "{pv_name}" : volume handle "{handle}" of driver '
                f'{csi["driver"]} is attached to node {node} as PersistentVolume "{holder_pv}" '
                f"(VolumeAttachment {name}); a volume handle must be unique to one PersistentVolume"
            )
        return errors

    def _attachable_volumes(self, pod: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        """(pod volume name, bound PV) of the pod's claims whose CSI driver requires attaching."""
        namespace = pod["metadata"]["namespace"]
        for volume in pod["spec"].get("volumes") or []:
            claim_name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            claim = self._store(PERSISTENT_VOLUME_CLAIMS).get((namespace, claim_name or ""))
            pv_name = ((claim or {}).get("spec") or {}).get("volumeName")
            pv = self._store(PERSISTENT_VOLUMES).get(("", pv_name or ""))
            driver = (((pv or {}).get("spec") or {}).get("csi") or {}).get("driver")
            if pv is not None and driver in ATTACH_REQUIRED_DRIVERS:
                yield volume["name"], pv

    def _release_attachments(self) -> None:
        """Detach what no running pod on the node uses any more (the pods were deleted or finished)."""
        pods = {pod["metadata"]["uid"]: pod for pod in self._store(PODS).values()}
        for name, attachment in list(self._attachments.items()):
            attachment["pods"] = {
                uid
                for uid in attachment["pods"]
                if uid in pods and (pods[uid].get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            }
            if not attachment["pods"]:
                del self._attachments[name]

    def _config_errors(self, pod: dict[str, Any], run: _Run) -> dict[str, str]:
        """Unstarted containers whose env names a missing Secret or key (not optional), with the error."""
        namespace, secrets = pod["metadata"]["namespace"], self._store(SECRETS)
        errors = {}
        for container in pod["spec"].get("containers") or []:
            if f"{pod['metadata']['uid']}:{container['name']}:start" in run.emitted:
                continue  # already started: a Secret deleted later changes nothing
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if not ref or ref.get("optional"):
                    continue
                secret = secrets.get((namespace, ref.get("name", "")))
                if secret is None:
                    errors[container["name"]] = f'secret "{ref.get("name")}" not found'
                elif ref.get("key") not in (secret.get("data") or {}):
                    errors[container["name"]] = (
                        f"couldn't find key {ref.get('key')} in Secret {namespace}/{ref.get('name')}"
                    )
                if container["name"] in errors:
                    break
        return errors

    def _mount_errors(self, pod: dict[str, Any], run: _Run) -> dict[str, str]:
        """Volumes of a not yet started pod that the kubelet cannot set up: a missing ConfigMap,
        Secret or ``items`` key (not optional), and under a "FailedMount" script the pod's first
        volume, with the kubelet's (or CSI driver's) error, by volume name."""
        uid, namespace = pod["metadata"]["uid"], pod["metadata"]["namespace"]
        containers = pod["spec"].get("containers") or []
        if any(f"{uid}:{c['name']}:start" in run.emitted for c in containers):
            return {}  # already running: a ConfigMap or Secret deleted later changes nothing
        errors = {}
        volumes = pod["spec"].get("volumes") or []
        if run.script.outcome == "FailedMount" and volumes:
            errors[volumes[0]["name"]] = run.script.message or DEFAULT_MOUNT_ERROR
        for volume in pod["spec"].get("volumes") or []:
            if "configMap" in volume:
                source, store, kind = volume["configMap"] or {}, self._store(CONFIG_MAPS), "configmap"
                name = source.get("name", "")
                missing_key = "configmap references non-existent config key: {key}"
            elif "secret" in volume:
                source, store, kind = volume["secret"] or {}, self._store(SECRETS), "secret"
                name = source.get("secretName", "")
                missing_key = "references non-existent secret key: {key}"
            else:
                continue
            if source.get("optional"):
                continue
            obj = store.get((namespace, name))
            if obj is None:
                errors[volume["name"]] = f'{kind} "{name}" not found'
                continue
            keys = {*(obj.get("data") or {}), *(obj.get("binaryData") or {})}
            absent = [item.get("key") for item in source.get("items") or [] if item.get("key") not in keys]
            if absent:
                errors[volume["name"]] = missing_key.format(key=absent[0])
        return errors

    def _container_events(self, pod: dict[str, Any], run: _Run, container: dict[str, Any]) -> None:
        """The kubelet's events once it tried to start ``container``: Started, or the pull failure."""
        key, at = f"{pod['metadata']['uid']}:{container['name']}", run.timeline.running
        image = container.get("image", "")
        if run.script.outcome != "ImagePullBackOff":
            self._emit_event(
                run, f"{key}:start", pod, "Started", f"Started container {container['name']}", at, "kubelet"
            )
            return
        error = run.script.message or (
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and unpack '
            f'image "{image}": not found'
        )
        self._emit_event(run, f"{key}:pull", pod, "Failed", error, at, "kubelet", "Warning")
        self._emit_event(
            run,
            f"{key}:backoff",
            pod,
            "BackOff",
            f'Back-off pulling image "{image}"',
            at,
            "kubelet",
            "Warning",
        )

    def _reconcile_volumes(self) -> None:
        """The PV controller: new PVs become Available, pending claims bind, released PVs are reclaimed."""
        claims = {c["metadata"]["uid"] for c in self._store(PERSISTENT_VOLUME_CLAIMS).values()}
        for volume in list(self._store(PERSISTENT_VOLUMES).values()):
            phase = (volume.get("status") or {}).get("phase")
            claim_ref = volume["spec"].get("claimRef") or {}
            if phase == "Pending":
                self._set_status(PERSISTENT_VOLUMES, volume, {"phase": "Available"})
            elif phase == "Bound" and claim_ref.get("uid") not in claims:
                if volume["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
                    self._remove(PERSISTENT_VOLUMES, volume)
                else:
                    self._set_status(PERSISTENT_VOLUMES, volume, {"phase": "Released"})
        for claim in self._store(PERSISTENT_VOLUME_CLAIMS).values():
            if (claim.get("status") or {}).get("phase") == "Pending":
                fitting = next(
                    (v for v in self._store(PERSISTENT_VOLUMES).values() if _volume_fits(v, claim)), None
                )
                if fitting is not None:
                    self._bind(fitting, claim)

    def _bind(self, volume: dict[str, Any], claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        volume["spec"]["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": "v1",
            "resourceVersion": meta["resourceVersion"],
        }
        volume["status"] = {"phase": "Bound"}
        self._commit(PERSISTENT_VOLUMES, volume)
        claim["spec"]["volumeName"] = volume["metadata"]["name"]
        claim["status"] = {
            "phase": "Bound",
            "accessModes": volume["spec"].get("accessModes", []),
            "capacity": volume["spec"].get("capacity", {}),
        }
        self._commit(PERSISTENT_VOLUME_CLAIMS, claim)


# --------------------------------------------------------------------------------- helpers of the fake


def _parse_target(parts: list[str]) -> _Target:
    """Resolve ``/api/v1/...`` or ``/apis/GROUP/VERSION/...`` to the resource it addresses."""
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise _route_not_found()
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    rtype = TYPES.get((group, rest[0]))
    if rtype is None or version not in rtype.versions or len(rest) > 3:
        raise _route_not_found()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    scoped_right = (namespace is not None) == rtype.namespaced or (namespace is None and name is None)
    allowed_sub = (
        subresource is None
        or (subresource == "status" and rtype.status_subresource)
        or (subresource == "log" and rtype is PODS)
    )
    if not scoped_right or not allowed_sub:
        raise _route_not_found()
    return _Target(rtype, version, namespace, name, subresource)


def _served(group: str, version: str) -> bool:
    return any(rt.group == group and version in rt.versions for rt in RESOURCES)


def _api_group(group: str) -> dict[str, Any]:
    versions = list(dict.fromkeys(v for rt in RESOURCES if rt.group == group for v in rt.versions))
    entries = [
        {"groupVersion": f"{group}/{v}", "version": v} for v in sorted(versions, key=lambda v: v != "v1")
    ]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def _resource_list(group: str, version: str) -> dict[str, Any]:
    """An APIResourceList: each served resource and its subresources, as a real server lists them."""
    resources = []
    for rt in RESOURCES:
        if rt.group != group or version not in rt.versions:
            continue
        entry = {
            "name": rt.plural,
            "singularName": rt.kind.lower(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        resources.append(entry)
        subresources = [("status", ["get", "patch", "update"])] if rt.status_subresource else []
        if rt is PODS:
            subresources.append(("log", ["get"]))
        for sub, verbs in subresources:
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": verbs,
                }
            )
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _object_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise KubeApiError(400, "the object provided is unrecognized (must be a JSON object)")
    return body


def _check_type(target: _Target, body: dict[str, Any]) -> None:
    """Reject a body of another kind or version; custom resources must name theirs."""
    if target.rtype.group and not (body.get("kind") and body.get("apiVersion")):
        raise KubeApiError(400, f"Object 'Kind' is missing in '{json.dumps(body)}'")
    if body.get("apiVersion", target.api_version) != target.api_version:
        expected = target.api_version
        raise KubeApiError(
            400,
            f"the API version in the data ({body['apiVersion']}) does not match the expected ({expected})",
        )
    if body.get("kind", target.rtype.kind) != target.rtype.kind:
        raise KubeApiError(
            400,
            f"the kind in the data ({body['kind']}) does not match the expected kind ({target.rtype.kind})",
        )


def _validate_body(rtype: ResourceType, obj: dict[str, Any]) -> str:
    """Type-specific validation; fills Secret ``data`` from ``stringData`` as the server does."""
    if rtype is PODS:
        containers = (obj.get("spec") or {}).get("containers") or []
        if not containers or not all(c.get("name") and c.get("image") for c in containers):
            return "spec.containers: Required value: every container needs a name and an image"
        problem = _validate_pod_volumes(obj.get("spec") or {})
        if problem:
            return problem
    if rtype is CONFIG_MAPS and not all(isinstance(v, str) for v in (obj.get("data") or {}).values()):
        return "data: Invalid value: values must be strings"
    if rtype is SECRETS:
        return _validate_secret(obj)
    kind = JOB_KINDS.get((rtype.plural, obj.get("apiVersion", "")))
    # PyTorchJobs are checked by the training-operator's webhook instead (see _validate).
    return _validate_training_job(kind, obj) if kind and rtype is not PYTORCH_JOBS else ""


def _validate_pod_volumes(spec: dict[str, Any]) -> str:
    """Volume names are unique and every volumeMount names a volume (the API server's 422s)."""
    names: set[str] = set()
    for index, volume in enumerate(spec.get("volumes") or []):
        if volume.get("name") in names:
            return f'spec.volumes[{index}].name: Duplicate value: "{volume.get("name")}"'
        names.add(volume.get("name"))
    for field_name in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field_name) or []):
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in names:
                    return f'spec.{field_name}[{i}].volumeMounts[{j}].name: Not found: "{mount.get("name")}"'
    return ""


def _validate_secret(secret: dict[str, Any]) -> str:
    data = secret.get("data") or {}
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            return f"data[{key}]: Invalid value: illegal base64 data"
    for key, value in (secret.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    if data:
        secret["data"] = data
    return ""


def _immutable_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """Metadata an update cannot change (the current resourceVersion is replaced on commit)."""
    keys = (
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "generation",
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    )
    return {key: meta[key] for key in keys if key in meta}


def _spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything but metadata and status: what a generation counts changes of."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _grace_seconds(pod: dict[str, Any], requested: int | None) -> int:
    """A deleted pod's grace period (pkg/registry/core/pod/strategy.go ``CheckGracefulDelete``):
    the one asked for, else the pod's own; none for a pod not scheduled or already Succeeded or
    Failed; a negative one becomes 1."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    grace = (
        spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS) if requested is None else requested
    )
    return 1 if grace < 0 else grace


def _check_preconditions(target: _Target, obj: dict[str, Any], preconditions: dict[str, Any]) -> None:
    meta = obj["metadata"]
    for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        wanted = preconditions.get(key)
        if wanted and wanted != meta[key]:
            why = (
                f"Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {meta[key]}"
            )
            raise target.rtype.conflict(meta["name"], why)


def _paginate(
    items: list[dict[str, Any]], query: dict[str, str], resource_version: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Apply ``limit``/``continue`` ("API Concepts: Retrieving large results sets in chunks").

    The token is opaque to clients; like the API server's, it is base64 JSON naming the list's
    resourceVersion and the key to continue from, so a page starts after the last key served even
    when objects were deleted in between, and every page reports the first page's resourceVersion.
    ``remainingItemCount`` is set only for lists without selectors (apimachinery ListMeta). Without
    ``limit`` everything comes at once: Kubernetes has no default page size.
    """
    start = ""
    if query.get("continue"):
        try:
            token = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
            start, resource_version = str(token["start"]), str(token["rv"])
        except (ValueError, KeyError, TypeError) as exc:
            raise KubeApiError(400, f"continue key is not valid: {exc}") from exc
    remaining = [obj for obj in items if _list_key(obj) >= start]
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    limit = _int_query(query, "limit") if query.get("limit") else 0
    if not limit or limit >= len(remaining):
        return remaining, metadata
    page, rest = remaining[:limit], remaining[limit:]
    token = {"v": "meta.k8s.io/v1", "rv": int(resource_version), "start": _list_key(rest[0])}
    metadata["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
    if not query.get("labelSelector") and not query.get("fieldSelector"):
        metadata["remainingItemCount"] = len(rest)
    return page, metadata


def _list_key(obj: dict[str, Any]) -> str:
    """An object's place in a list: etcd's key order, namespace then name."""
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _volume_fits(volume: dict[str, Any], claim: dict[str, Any]) -> bool:
    """Whether the PV binder would bind ``claim`` to the Available ``volume``."""
    spec, want, claim_meta = volume["spec"], claim["spec"], claim["metadata"]
    if (volume.get("status") or {}).get("phase") != "Available":
        return False
    claim_ref = spec.get("claimRef")
    if claim_ref and (claim_ref.get("namespace"), claim_ref.get("name")) != (
        claim_meta["namespace"],
        claim_meta["name"],
    ):
        return False
    if want.get("volumeName") and want["volumeName"] != volume["metadata"]["name"]:
        return False
    if (spec.get("storageClassName") or "") != (want.get("storageClassName") or ""):
        return False
    if not set(want.get("accessModes") or []) <= set(spec.get("accessModes") or []):
        return False
    needed = ((want.get("resources") or {}).get("requests") or {}).get("storage", "0")
    if parse_quantity((spec.get("capacity") or {}).get("storage", "0")) < parse_quantity(needed):
        return False
    labels = volume["metadata"].get("labels") or {}
    return all(r.matches(labels) for r in _label_selector_requirements(want.get("selector") or {}))


class _Handler(BaseHTTPRequestHandler):
    """Turns raw HTTP into a call on the fake and writes its answer back (chunked when streaming)."""

    fake: ClassVar[KubernetesFake]
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no delayed-ACK stall

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("content-type", "")
        call = _Call(
            self.command,
            url.path,
            dict(parse_qsl(url.query, keep_blank_values=True)),
            content_type,
            _decode_body(raw, content_type),
        )
        reply = self.fake._serve(call, self.headers.get("authorization", ""))
        try:
            self._write(reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (e.g. stopped following a log)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _write(self, reply: _Reply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        if reply.stream is None:
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in reply.stream:
            if chunk:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean: requests are recorded on the fake instead."""


def _created_training_job(call: _Call, reply: _Reply) -> dict[str, Any] | None:
    """The training CR a successful, not dry-run create stored; None for any other request."""
    if call.method != "POST" or reply.status != 201 or call.query.get("dryRun"):
        return None
    obj = json.loads(reply.body)
    return obj if obj.get("apiVersion", "").startswith(f"{TRAINING_GROUP}/") else None


def _decode_body(raw: bytes, content_type: str) -> Any:
    """JSON bodies parsed (an unparseable one kept as text, for a 400 later), others as text."""
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    if "json" not in content_type:
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
