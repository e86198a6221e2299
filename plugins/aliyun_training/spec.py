"""What a user describes: one distributed training job, independent of the platform that runs it.

Plain pydantic with no Airflow and no I/O, so the DAG processor imports it cheaply and every
backend (DLC, ACK/arena, local) converts the same ``TrainingJobSpec`` into its own request. The
records the stages pass each other about a job are in ``records``; the errors in ``validation``.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aliyun_training.backend_catalog import BACKENDS, Backend, backend_record
from aliyun_training.validation import field_fix, validate_record

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: Dataset versions become directory names and URI segments: no separators, no leading dot.
DATASET_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
#: An installation id: a Kubernetes label value and a DLC tag value, kept short and lower-case.
INSTALLATION_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
#: The longest a job may run before it is stopped, wherever a timeout is set (form, declaration, spec).
MAX_TIMEOUT_MINUTES = 60 * 24 * 30
#: The most nodes and GPUs per node a job may ask for, wherever a size is set.
MAX_NODES = 128
MAX_GPUS_PER_NODE = 16
#: The most CPUs and GiB of memory (shared memory included) a node may ask for.
MAX_CPUS_PER_NODE = 512
MAX_MEMORY_GIB_PER_NODE = 4096

# The one definition of each size and timeout: the spec, the declaration's resources (defaults and
# bounds of the form), the environment files' node resources, the trigger form's model and its
# Params' JSON Schema (``form.form_schema``) all use these, so their bounds cannot disagree.
Nodes = Annotated[
    int, Field(ge=1, le=MAX_NODES, json_schema_extra=field_fix(f"use between 1 and {MAX_NODES} nodes"))
]
GpusPerNode = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_GPUS_PER_NODE,
        json_schema_extra=field_fix(f"use 0 (CPU only) up to {MAX_GPUS_PER_NODE} GPUs per node"),
    ),
]
TimeoutMinutes = Annotated[
    int, Field(ge=1, le=MAX_TIMEOUT_MINUTES, json_schema_extra=field_fix("use 1 minute up to 30 days"))
]
CpusPerNode = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_CPUS_PER_NODE,
        json_schema_extra=field_fix(f"request between 1 and {MAX_CPUS_PER_NODE} CPUs per node"),
    ),
]
MemoryGibPerNode = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_MEMORY_GIB_PER_NODE,
        json_schema_extra=field_fix(f"request between 1 and {MAX_MEMORY_GIB_PER_NODE} GiB per node"),
    ),
]
SharedMemoryGibPerNode = Annotated[
    int, Field(ge=0, le=MAX_MEMORY_GIB_PER_NODE, json_schema_extra=field_fix("use 0 up to the node's memory"))
]

#: Variables the platforms inject into every node; a spec that sets them would break rendezvous.
INJECTED_ENV_VARS = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"})

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


def invalid_env_names(names: Iterable[str]) -> list[str]:
    """The names that are not portable environment variable names (letters, digits and ``_``)."""
    return sorted(name for name in names if not _ENV_NAME.fullmatch(name))


class JobOwner(BaseModel):
    """The installation and task instance a job was launched for: tagged on the job so the reconciler
    can tell whether anyone still waits for it (DLC tags, Kubernetes annotations, the local job.json).

    ``installation`` names the Airflow deployment: several share one workspace, namespace and
    buckets, and each acts only on the jobs whose tags name it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The prefix of every owner tag; a job without them was not launched by this package.
    TAG_PREFIX: ClassVar[str] = "airflow-"

    installation: Annotated[str, Field(pattern=INSTALLATION_PATTERN)]
    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int = 1

    def __str__(self) -> str:
        index = f"[{self.map_index}]" if self.map_index >= 0 else ""
        return (
            f"installation {self.installation}, task {self.dag_id}/{self.run_id}/{self.task_id}{index} "
            f"try {self.try_number}"
        )

    def is_task(self, other: JobOwner | None) -> bool:
        """Whether ``other`` names this task instance of this installation (any of its tries)."""
        return other is not None and other.model_copy(update={"try_number": self.try_number}) == self

    @classmethod
    def tag_key(cls, field: str) -> str:
        """The tag holding ``field``: ``airflow-installation``, ``airflow-dag-id`` and so on."""
        return f"{cls.TAG_PREFIX}{field.replace('_', '-')}"

    def tags(self) -> dict[str, str]:
        """The owner as string tags, one per field (``tag_key``)."""
        return {self.tag_key(name): str(value) for name, value in self.model_dump().items()}

    @classmethod
    def from_tags(cls, tags: Mapping[str, str] | None) -> JobOwner | None:
        """The owner ``tags`` name, or None when they do not name a whole one."""
        tags = tags or {}
        values = {name: tags.get(cls.tag_key(name)) for name in cls.model_fields}
        if any(value is None for value in values.values()):
            return None
        try:
            return cls.model_validate(values)
        except ValueError:
            return None


def describe_owner(owner: JobOwner | None) -> str:
    """An owner for a message; a job whose tags name none was not launched by this package."""
    return str(owner) if owner else "no owner of this package (no airflow-* owner tags)"


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
    """One distributed training job, independent of the platform that runs it: what one platform
    alone takes (DLC's quota, GPU model, ECS spec, priority) travels among its backend's settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Annotated[
        Backend, Field(json_schema_extra=field_fix(f"choose one of: {', '.join(b.value for b in Backend)}"))
    ] = BACKENDS[0].name
    framework: Annotated[
        Framework,
        Field(json_schema_extra=field_fix("choose one of: pytorch, tensorflow, mpi, elastic, elastic_batch")),
    ] = Framework.PYTORCH
    nodes: Nodes = 1
    #: Elastic training only: the fewest and most nodes the job runs on (``nodes`` starts it).
    min_nodes: Annotated[
        Nodes | None, Field(json_schema_extra=field_fix("use 1 up to nodes, or leave it unset"))
    ] = None
    max_nodes: Annotated[
        Nodes | None, Field(json_schema_extra=field_fix(f"use nodes up to {MAX_NODES}, or leave it unset"))
    ] = None
    gpus_per_node: GpusPerNode = 0
    cpu: CpusPerNode = 1
    memory_gib: MemoryGibPerNode = 4
    shared_memory_gib: SharedMemoryGibPerNode = 0
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
    timeout_minutes: TimeoutMinutes = 24 * 60
    rdma: bool = False
    #: Who launched the job, set by the training operator; tagged on the job, never part of what
    #: the job computes (the checkpoint key leaves it out).
    owner: JobOwner | None = None

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
        record = backend_record(self.backend)
        if record.frameworks and self.framework.value not in record.frameworks:
            runs = [framework.value for framework in Framework if framework.value in record.frameworks]
            elsewhere = [
                other.name.value
                for other in BACKENDS
                if not other.frameworks or self.framework.value in other.frameworks
            ]
            raise ValueError(
                f"framework: the {self.backend.value} backend runs {record.frameworks_note}, not "
                f"{self.framework.value}; use {' or '.join(runs)}, or the {' or '.join(elsewhere)} backend"
            )
        self._check_elastic_range()
        if record.cloud and not self.image:
            raise ValueError(f"image: the {self.backend.value} backend needs a container image; set image")
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

    @property
    def procs_per_node(self) -> int:
        """Processes torchrun starts per node: one per GPU, or one on a CPU-only node."""
        return max(self.gpus_per_node, 1)

    @classmethod
    def parse(cls, data: TrainingJobSpec | dict[str, Any]) -> TrainingJobSpec:
        """Validate user input, raising ``SpecError`` that names each field and its fix."""
        return validate_record(cls, data)


#: What of a spec decides what the job computes: the checkpoint key hashes these, and only these.
CHECKPOINT_KEY_FIELDS = frozenset(
    {"command", "image", "framework", "nodes", "gpus_per_node", "env", "datasets"}
)


def checkpoint_dir(spec: TrainingJobSpec, dataset_version: str) -> str:
    """The round's checkpoint directory: inside its output directory (one per round of tries), named
    by the dataset version and a hash of what the job computes, so no other data or code resumes it."""
    computed = spec.model_dump(mode="json", include=set(CHECKPOINT_KEY_FIELDS))
    digest = hashlib.sha256(json.dumps(computed, sort_keys=True).encode()).hexdigest()[:12]
    return f"{(spec.output_dir or '').rstrip('/')}/checkpoints/{dataset_version}-{digest}"


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


def node_output_path(uri: str | None, output_root: str | None, output_uri: str | None) -> str | None:
    """Where a job's nodes see ``uri`` (what :func:`mounted_output_uri` recorded): an ``oss://``
    location under ``output_uri`` as its path under ``output_root``, a local path as it is. None
    when ``uri`` is not under the outputs those nodes mount."""
    if not uri:
        return None
    if output_uri and output_root:
        root = output_uri.rstrip("/") + "/"
        if not uri.startswith(root):
            return None
        return str(PurePosixPath(output_root) / uri.removeprefix(root).rstrip("/"))
    if uri.startswith("oss://"):
        return None
    inside = output_root is None or PurePosixPath(uri).is_relative_to(output_root)
    return uri.rstrip("/") if inside else None
