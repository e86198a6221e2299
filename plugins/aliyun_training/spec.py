"""Typed, validated descriptions of a training run and the records passed between pipeline stages.

Everything here is plain pydantic with no Airflow and no I/O, so the DAG processor can import it
cheaply and every backend (DLC, ACK/arena, local) converts the same ``TrainingJobSpec`` into its
own request. Records are small and JSON-serializable because they travel through XCom.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: Dataset versions become directory names and URI segments: no separators, no leading dot.
DATASET_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def whole_string_pattern(pattern: str) -> str:
    """``pattern`` (anchored with ``^...$``) for a JSON Schema that Python's ``re`` also evaluates.

    jsonschema checks ``pattern`` with ``re.search``, where ``$`` also matches before a final
    newline, so ``"v1\\n"`` would pass ``^v[0-9]+$``; the lookahead refuses that position, and
    means the same in the ECMA regexes of a browser form. (pydantic's regex engine anchors ``$`` at
    the end of the string already; Python code matches with ``re.fullmatch``.)
    """
    return f"{pattern}(?!\\n)"


#: Variables the platforms inject into every node; a spec that sets them would break rendezvous.
INJECTED_ENV_VARS = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"})
#: Set by DLC on Lingjun nodes to match the RDMA fabric; hand-set values select the wrong NICs.
DLC_NETWORK_ENV_PREFIXES = ("NCCL_IB_", "NCCL_SOCKET_IFNAME")
#: GPUs in one Lingjun node (8 x GPU bare-metal servers).
LINGJUN_GPUS_PER_NODE = 8

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Job names leave room for the longest suffix put after them: ``-worker-127`` (a replica's Service)
#: or ``-pytorchjob`` (arena's ConfigMap), within a 63-character DNS label.
JOB_NAME_MAX = 63 - len("-worker-127")

M = TypeVar("M", bound="BaseModel")


class Backend(StrEnum):
    """Where a training job runs."""

    LOCAL = "local"
    DLC = "dlc"
    ARENA = "arena"


class Framework(StrEnum):
    """Distributed framework; maps to DLC JobType and the Kubeflow CR kind.

    ``elastic`` is elastic PyTorch training (torchrun with a c10d rendezvous between ``min_nodes``
    and ``max_nodes``): a DLC PyTorchJob with ElasticSpec, an ACK PyTorchJob with elasticPolicy.
    ``elastic_batch`` is DLC's own ElasticBatchJob type (the Lingjun guide's elastic batch jobs,
    driven by DLC's AIMaster), which only DLC runs.
    """

    PYTORCH = "pytorch"
    TENSORFLOW = "tensorflow"
    MPI = "mpi"
    ELASTIC = "elastic"
    ELASTIC_BATCH = "elastic_batch"


class ResourceType(StrEnum):
    """Which DLC resources run the job: Lingjun (always through a quota) or ECS."""

    LINGJUN = "lingjun"
    ECS = "ecs"


class SpecError(ValueError):
    """A spec or record failed validation; the message names every bad field and how to fix it."""


def field_fix(text: str) -> dict[str, Any]:
    """A field's ``json_schema_extra`` naming its fix, which validation errors then say (see ``explain``)."""
    return {"fix": text}


def invalid_env_names(names: Iterable[str]) -> list[str]:
    """The names that are not portable environment variable names (letters, digits and ``_``)."""
    return sorted(name for name in names if not _ENV_NAME.fullmatch(name))


class DatasetMount(BaseModel):
    """A staged dataset made visible to every node at ``mount_path``: a PAI dataset id or a URI."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: Annotated[
        str | None, Field(json_schema_extra=field_fix("give the staged dataset's URI or path"))
    ] = None
    dataset_id: Annotated[
        str | None, Field(json_schema_extra=field_fix("give a PAI dataset id, e.g. d-xxxx"))
    ] = None
    dataset_version: str | None = None
    mount_path: Annotated[
        str, Field(pattern=r"^/", json_schema_extra=field_fix("use an absolute path such as /mnt/data"))
    ]
    read_only: bool = True

    @model_validator(mode="after")
    def _names_its_data(self) -> DatasetMount:
        if not (self.uri or self.dataset_id):
            raise ValueError("a dataset mount needs uri or dataset_id")
        return self


class TrainingJobSpec(BaseModel):
    """One distributed training job, independent of the platform that runs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Annotated[Backend, Field(json_schema_extra=field_fix("choose one of: local, dlc, arena"))] = (
        Backend.LOCAL
    )
    framework: Annotated[
        Framework,
        Field(json_schema_extra=field_fix("choose one of: pytorch, tensorflow, mpi, elastic, elastic_batch")),
    ] = Framework.PYTORCH
    nodes: Annotated[int, Field(ge=1, le=128, json_schema_extra=field_fix("use between 1 and 128 nodes"))] = 1
    #: Elastic training only: the fewest and most nodes the job runs on (``nodes`` starts it).
    min_nodes: Annotated[
        int | None, Field(ge=1, le=128, json_schema_extra=field_fix("use 1 up to nodes, or leave it unset"))
    ] = None
    max_nodes: Annotated[
        int | None, Field(ge=1, le=128, json_schema_extra=field_fix("use nodes up to 128, or leave it unset"))
    ] = None
    gpus_per_node: Annotated[
        int, Field(ge=0, le=16, json_schema_extra=field_fix("use 0 (CPU only) up to 16 GPUs per node"))
    ] = 0
    cpu: Annotated[
        int, Field(ge=1, le=512, json_schema_extra=field_fix("request between 1 and 512 CPUs per node"))
    ] = 1
    memory_gib: Annotated[
        int, Field(ge=1, le=4096, json_schema_extra=field_fix("request between 1 and 4096 GiB per node"))
    ] = 4
    shared_memory_gib: Annotated[
        int, Field(ge=0, le=4096, json_schema_extra=field_fix("use 0 up to the node's memory"))
    ] = 0
    image: Annotated[
        str | None, Field(json_schema_extra=field_fix("give a full image reference, e.g. registry/repo:tag"))
    ] = None
    command: Annotated[
        str,
        Field(
            min_length=1,
            json_schema_extra=field_fix("give the command every node runs, e.g. a torchrun line"),
        ),
    ]
    working_dir: Annotated[
        str | None,
        Field(pattern=r"^/", json_schema_extra=field_fix("use an absolute path or leave it unset")),
    ] = None
    env: Annotated[
        dict[str, str],
        Field(json_schema_extra=field_fix("use NAME=value pairs; the platform sets the rendezvous")),
    ] = Field(default_factory=dict)
    datasets: list[DatasetMount] = Field(default_factory=list)
    output_dir: Annotated[
        str | None, Field(json_schema_extra=field_fix("give where the job writes checkpoints and metrics"))
    ] = None
    timeout_minutes: Annotated[
        int, Field(ge=1, le=60 * 24 * 30, json_schema_extra=field_fix("use 1 minute up to 30 days"))
    ] = 24 * 60
    gpu_type: Annotated[
        str | None, Field(json_schema_extra=field_fix("name the GPU model of the quota, e.g. GU8TF or A100"))
    ] = None
    resource_type: Annotated[ResourceType, Field(json_schema_extra=field_fix("use lingjun or ecs"))] = (
        ResourceType.ECS
    )
    quota_id: Annotated[
        str | None,
        Field(json_schema_extra=field_fix("give the resource quota id (ResourceId), e.g. quota1xxxx")),
    ] = None
    ecs_spec: Annotated[
        str | None,
        Field(json_schema_extra=field_fix("give a pay-as-you-go spec, e.g. ecs.gn6v-c8g1.2xlarge")),
    ] = None
    rdma: bool = False
    priority: Annotated[int, Field(ge=1, le=9, json_schema_extra=field_fix("use a priority from 1 to 9"))] = 1

    @field_validator("env")
    @classmethod
    def _env_is_portable(cls, env: dict[str, str]) -> dict[str, str]:
        bad = invalid_env_names(env)
        if bad:
            raise ValueError(f"invalid variable names {bad}")
        clash = sorted(INJECTED_ENV_VARS.intersection(env))
        if clash:
            raise ValueError(
                f"{clash} are injected by the platform on every node (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, "
                "RANK); remove them from env"
            )
        return env

    @model_validator(mode="after")
    def _backend_supports_spec(self) -> TrainingJobSpec:
        if self.backend is Backend.LOCAL and self.framework not in (Framework.PYTORCH, Framework.ELASTIC):
            raise ValueError(
                f"framework: the local backend runs torchrun only, not {self.framework.value}; "
                "use pytorch or a cloud backend"
            )
        if self.framework is Framework.ELASTIC_BATCH and self.backend is not Backend.DLC:
            raise ValueError(
                "framework: elastic_batch is PAI-DLC's ElasticBatchJob type; use the dlc backend, or "
                "elastic for elastic PyTorch training on any backend"
            )
        self._check_elastic_range()
        if self.backend is not Backend.LOCAL and not self.image:
            raise ValueError(f"image: the {self.backend.value} backend needs a container image; set image")
        if self.backend is Backend.DLC:
            self._check_dlc()
        return self

    def _check_elastic_range(self) -> None:
        if self.framework is not Framework.ELASTIC:
            if self.min_nodes is not None or self.max_nodes is not None:
                raise ValueError(
                    f"min_nodes: min_nodes and max_nodes apply to elastic training, not "
                    f"{self.framework.value}; leave them unset or use framework elastic"
                )
            return
        if not self.elastic_min_nodes <= self.nodes <= self.elastic_max_nodes:
            raise ValueError(
                f"nodes: {self.nodes} is outside min_nodes..max_nodes "
                f"({self.elastic_min_nodes}..{self.elastic_max_nodes}); start within the range"
            )

    @property
    def elastic_min_nodes(self) -> int:
        """The fewest nodes an elastic job keeps running on (``nodes`` when unset)."""
        return self.min_nodes if self.min_nodes is not None else self.nodes

    @property
    def elastic_max_nodes(self) -> int:
        """The most nodes an elastic job grows to (``nodes`` when unset)."""
        return self.max_nodes if self.max_nodes is not None else self.nodes

    def _check_dlc(self) -> None:
        """Rules PAI-DLC enforces only after minutes in a queue, checked before anything is sent."""
        network = sorted(name for name in self.env if name.startswith(DLC_NETWORK_ENV_PREFIXES))
        if network:
            raise ValueError(
                f"env: {network} are set by DLC on every node to match the RDMA network; remove them "
                "(hand-set values pick the wrong NICs and NCCL falls back to TCP)"
            )
        if self.resource_type is ResourceType.LINGJUN and not self.quota_id:
            raise ValueError(
                "quota_id: Lingjun resources are only usable through a resource quota; set quota_id "
                "to the quota's id (PAI console, Resource Quota)"
            )
        if self.resource_type is ResourceType.LINGJUN and self.gpus_per_node > LINGJUN_GPUS_PER_NODE:
            raise ValueError(
                f"gpus_per_node: a Lingjun node has {LINGJUN_GPUS_PER_NODE} GPUs, not {self.gpus_per_node}; "
                "use more nodes instead"
            )
        if not self.quota_id and not self.ecs_spec:
            raise ValueError("ecs_spec: without quota_id the job runs on pay-as-you-go ECS; set ecs_spec")
        if self.quota_id and self.gpus_per_node and not self.gpu_type:
            raise ValueError(
                f"gpu_type: {self.gpus_per_node} GPUs per node requested from quota {self.quota_id} without "
                "a GPU type; set gpu_type to the quota's GPU model"
            )

    @property
    def procs_per_node(self) -> int:
        """Processes torchrun starts per node: one per GPU, or one on a CPU-only node."""
        return max(self.gpus_per_node, 1)

    @classmethod
    def parse(cls, data: TrainingJobSpec | dict[str, Any]) -> TrainingJobSpec:
        """Validate user input, raising ``SpecError`` that names each field and its fix."""
        return validate_record(cls, data)


class StagedDataset(BaseModel):
    """A dataset version published on the training filesystem, and how a training job mounts it.

    ``uri`` is the version's directory as the stager saw it (the CPFS mount on a worker or in a
    staging pod). A job on DLC mounts ``pai_dataset_id``/``pai_dataset_version``; a job on ACK
    mounts the claim ``pvc``, whose volume is exactly this version's directory.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    version: Annotated[str, Field(pattern=DATASET_VERSION_PATTERN)]
    files: Annotated[int, Field(ge=1)]
    bytes: Annotated[int, Field(ge=0)]
    #: The manifest beside the data; empty for a CPFS data flow import, which writes none.
    manifest_uri: str
    checksum: str
    transferred_files: Annotated[int, Field(ge=0)] = 0
    transferred_bytes: Annotated[int, Field(ge=0)] = 0
    seconds: float = 0.0
    source_uri: str = ""
    mode: Literal["direct", "pod", "dataflow"] = "direct"
    pai_dataset_id: str | None = None
    pai_dataset_version: str | None = None
    pvc: str | None = None


class FixedDataset(BaseModel):
    """The dataset a cloud job mounts as its environment configures it, when the run staged nothing.

    The job reads ``<mount_path>/<version>``. Without a ``StagedDataset`` this record is what lets an
    artifact manifest still say which data trained the model: the version and the mounted PAI
    dataset id, OSS URI or ``pvc://<claim>`` (none of them when the environment mounts no dataset).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Annotated[str, Field(pattern=DATASET_VERSION_PATTERN)]
    uri: str | None = None
    dataset_id: str | None = None
    mount_path: str | None = None


class BuiltImage(BaseModel):
    """The training runtime that was verified (a container image, or this machine's interpreter)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    digest: str
    python: str
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    rdma_libs: list[str] = Field(default_factory=list)
    #: Whether a verification job ran the check script inside this image and every check passed.
    verified: bool = False
    ibv_devices: list[str] = Field(default_factory=list)
    #: The bandwidth check's programs found in the image (ib_write_bw, mpirun, all_reduce_perf).
    tools: list[str] = Field(default_factory=list)


class JobResult(BaseModel):
    """Outcome of a training job, as the monitoring stage saw it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend
    job_id: str
    display_name: str
    status: str
    reason: str = ""
    started: str | None = None
    finished: str | None = None
    wall_seconds: float = 0.0
    node_hours: float = 0.0
    gpu_hours: float = 0.0
    console_url: str | None = None
    output_uri: str | None = None
    #: Platform phases the job went through ({"status", "phase", "start", "end", "seconds"}).
    status_history: list[dict[str, Any]] = Field(default_factory=list)
    #: Seconds spent per phase: queuing, preparing, running, ...
    phase_seconds: dict[str, float] = Field(default_factory=dict)


class ArtifactSet(BaseModel):
    """Where a run's checkpoints, metrics and report were published."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    manifest_uri: str
    report_uri: str
    metrics: dict[str, Any]


def validate_record(model: type[M], data: M | dict[str, Any], title: str | None = None) -> M:
    """Build ``model`` from ``data`` or raise ``SpecError`` with one line per bad field and its fix,
    under ``title`` (default: ``Invalid <model>``)."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(explain(model, exc, title)) from None


def explain(model: type[BaseModel], exc: ValidationError, title: str | None = None) -> str:
    """One line per bad field of ``model``: its key path, what is wrong and the field's fix."""
    lines = [f"{title or 'Invalid ' + model.__name__}:"]
    for err in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        fix = _unknown_key_fix(model, err["loc"]) if err["type"] == "extra_forbidden" else None
        fix = fix or _field_fix(model, err["loc"])
        lines.append(f"  - {field + ': ' if field else ''}{message}" + (f" (fix: {fix})" if fix else ""))
    return "\n".join(lines)


def _unknown_key_fix(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """For a key the model does not know: the keys it does know at that level."""
    container: Any = model
    for part in loc[:-1]:
        if isinstance(part, str):
            info = container.model_fields.get(part) if container is not None else None
            container = _nested_model(info.annotation) if info is not None else None
    if container is None:
        return None
    return f"remove it; the keys here are {', '.join(container.model_fields)}"


def _field_fix(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The ``fix`` of the field at ``loc``, walking into nested models (``vpc.switch_id``)."""
    info = None
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        info = model.model_fields.get(str(part))
        if info is None:
            return None
        model = _nested_model(info.annotation)
    extra = info.json_schema_extra if info is not None else None
    return extra.get("fix") if isinstance(extra, dict) else None  # type: ignore[return-value]


def _nested_model(annotation: Any) -> Any:
    """The model class inside ``annotation`` (``Vpc``, ``Vpc | None``, ``list[Vpc]``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := _nested_model(arg)) is not None), None)


def job_name(dag_id: str, run_id: str, task_id: str, map_index: int = -1, first_try: int = 1) -> str:
    """Deterministic job name for one task instance and round of tries.

    Every try of a round gets the same name, so a retry (or a worker that died between submitting
    and saving the job id) finds the job it already launched instead of starting a second one.
    Clearing a task starts a new round, whose ``first_try`` is past the earlier round's tries: the
    new name makes a cleared task run its job again instead of finding the one it ran before. The
    first round's name leaves ``first_try`` out.

    The result is a readable prefix from the DAG and task ids plus a hash of the full identity, and
    a DNS-1035 label (a letter first) of at most ``JOB_NAME_MAX`` characters: the training-operator
    names a Service ``<job>-<replica type>-<index>`` after every replica and arena a ConfigMap
    ``<job>-<type>``, and both must stay DNS-1035 labels of at most 63 characters. The same name
    serves DLC display names and local run directories.
    """
    parts = [dag_id, run_id, task_id, str(map_index)] + ([str(first_try)] if first_try > 1 else [])
    identity = "\n".join(parts)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    readable = re.sub(r"[^a-z0-9]+", "-", f"{dag_id}-{task_id}".lower()).strip("-")
    if not readable[:1].isalpha():
        readable = f"job-{readable}".rstrip("-")
    prefix = readable[: JOB_NAME_MAX - len(digest) - 1].rstrip("-")
    return f"{prefix}-{digest}"


def mount_staged(spec: TrainingJobSpec, staged: StagedDataset, mount_path: str | None) -> TrainingJobSpec:
    """The job ``spec`` reading the staged version: ``DATA_DIR`` points at it on every node.

    A registered version is mounted at ``mount_path`` (a PAI dataset version on DLC, the version's
    own PVC on ACK) beside the spec's other mounts (the job's output volume); an unregistered one is
    read where it was staged (the local backend).
    """
    if staged.pai_dataset_id or staged.pvc:
        if not mount_path:
            raise SpecError(
                "dataset_mount_path: a registered dataset needs a mount path "
                "(fix: set mount_path in the environment file, e.g. /mnt/data/cifar10)"
            )
        mount = (
            DatasetMount(
                dataset_id=staged.pai_dataset_id,
                dataset_version=staged.pai_dataset_version,
                mount_path=mount_path,
            )
            if staged.pai_dataset_id
            else DatasetMount(uri=f"pvc://{staged.pvc}", mount_path=mount_path)
        )
        return spec.model_copy(
            update={"datasets": [*spec.datasets, mount], "env": {**spec.env, "DATA_DIR": mount_path}}
        )
    return spec.model_copy(update={"env": {**spec.env, "DATA_DIR": staged.uri}})


def mounted_output_uri(output_dir: str | None, output_root: str | None, output_uri: str | None) -> str | None:
    """Where a job's output directory lives in OSS when ``output_uri`` is mounted at ``output_root``.

    The job writes to a path on its nodes, which are gone by the time artifacts are collected; the
    same files are under the mount's OSS location, so that is the address a JobResult records.
    Without a mapping (or for a directory outside ``output_root``) the path is returned unchanged.
    """
    if not (output_dir and output_root and output_uri):
        return output_dir
    path, root = PurePosixPath(output_dir), PurePosixPath(output_root)
    if not path.is_relative_to(root):
        return output_dir
    return "/".join([output_uri.rstrip("/"), *path.relative_to(root).parts]) + "/"


class ImageRef(BaseModel):
    """The training image a run uses, before verification.

    ``source`` says where it came from: ``built`` (this run built it), ``existing`` (the
    content-addressed tag was already in the registry, or the environment names a fixed image) or
    ``pinned`` (the trigger form named it: no build, no verification).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: Annotated[str, Field(min_length=1)]
    digest: str | None = None
    tag: str | None = None
    source: Literal["built", "existing", "pinned"] = "existing"
    log_tail: list[str] = Field(default_factory=list)


class BandwidthCheck(BaseModel):
    """The RDMA bandwidth measured between two nodes before a multi-node run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verdict: Literal["PASS", "WARN", "FAIL", "SKIPPED"]
    tool: str = ""
    measured_gbps: float | None = None
    line_rate_gbps: float | None = None
    transport: str | None = None
    message: str = ""
