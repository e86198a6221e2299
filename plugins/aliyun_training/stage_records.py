"""The records the stages pass each other through XCom, and the event a deferred wait ends with.

Each is small, frozen and JSON-serializable: an XCom value or a trigger event is JSON, and what a
task reads back is validated into the same model. No Airflow and no I/O. The job spec they are
about is in ``spec``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.backend_catalog import Backend
from aliyun_training.failures import FailureClass
from aliyun_training.gpu_use import GpuUse
from aliyun_training.progress import ProgressEstimate
from aliyun_training.spec import DATASET_VERSION_PATTERN, DatasetMount, TrainingJobSpec
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Iterable

H = TypeVar("H")


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


def jobs_gpu_hours(records: Iterable[tuple[str, float]], excluding: str | None = None) -> float:
    """The GPU-hours of the jobs in ``records`` (job id, GPU-hours), each job once at its largest
    record, but ``excluding``: two tries may have recorded one job, one that lost track of it and
    one that watched it end. The run's ``max_gpu_hours`` budget and the pages' monthly use count so."""
    per_job: dict[str, float] = {}
    for job_id, gpu_hours in records:
        if job_id != excluding:
            per_job[job_id] = max(per_job.get(job_id, 0.0), gpu_hours)
    return round(sum(per_job.values()), 6)


class Attempt(BaseModel):
    """One try of a training task: its job, how the job ended and what the retry policy decided."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    try_number: int
    job_id: str
    status: str
    #: None for the attempt that succeeded.
    failure_class: FailureClass | None = None
    evidence: list[str] = Field(default_factory=list)
    #: What the recovery table decided for the class ("retry, resuming from ..."), or "succeeded".
    decision: str = ""
    gpu_hours: float = 0.0
    started: str | None = None
    finished: str | None = None
    #: The checkpoint directory this try was told to resume from (RESUME_FROM), if any.
    resume_from: str | None = None


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
    #: The platform's last word on why the job waited before it ran (queue position and reason).
    waited_because: str = ""
    #: Every try of the round, oldest first, this one last; ``gpu_hours`` above is this try's.
    attempts: list[Attempt] = Field(default_factory=list)
    #: The training script's last progress report (README: the progress contract), if it printed one.
    progress: ProgressEstimate | None = None
    #: The GPUs' use while it ran (mean, p10, idle minutes), or why none could be read.
    gpu_use: GpuUse | None = None
    #: What ``gpu_hours`` cost, where the environment prices a GPU-hour.
    money: float | None = None
    currency: str | None = None


class ArtifactSet(BaseModel):
    """Where a run's checkpoints, metrics and report were published."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    manifest_uri: str
    report_uri: str
    metrics: dict[str, Any]
    #: The promotion gate's decision (``promotion.Decision``), when the pipeline declares one.
    promotion: dict[str, Any] | None = None
    #: The model registry's version of this candidate (``model_registry.RegisteredVersion``).
    registered: dict[str, Any] | None = None
    #: The dataset version the model was trained on.
    dataset_version: str = ""


class ApprovalAnswer(BaseModel):
    """What a person answered to a promotion's approval: the option chosen and who chose it.

    ``approve_promotion`` returns it from Airflow's human-in-the-loop response (which only the API
    server writes, for a user it let answer), sealed like every record; ``promote`` moves the pointer
    only on an answer of Approve by one of the rule's approvers (``refusal`` is None).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    option: str
    #: The responder as Airflow recorded them: ``{"id": ..., "name": ...}``.
    responded_by: dict[str, str] = Field(default_factory=dict)
    #: No one answered in time: ``option`` is the question's default answer, which Airflow applied.
    timed_out: bool = False

    @property
    def responder(self) -> str:
        """Who answered, by the name Airflow shows (their id when it recorded no name); empty: no one."""
        return self.responded_by.get("name") or self.responded_by.get("id") or ""

    @property
    def rejects(self) -> bool:
        """Whether the answer (a person's, or the default at the timeout) is anything but Approve."""
        return self.option != "Approve"

    def refusal(self, approvers: list[str]) -> str | None:
        """Why this answer does not approve a promotion under ``approvers`` (empty: anyone Airflow
        let answer); None when it does."""
        who = self.responder
        if self.timed_out:
            return f"no one answered the approval in time, and its default answer {self.option!r} applied"
        if self.rejects:
            return f"the approval was answered {self.option!r} by {who or 'nobody'}"
        if not who:
            return "the approval was answered by no recorded user"
        if approvers and not {self.responded_by.get("id"), self.responded_by.get("name")} & set(approvers):
            return f"{who} approved, but is not one of the rule's approvers ({', '.join(approvers)})"
        return None


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


# -- the event every deferred wait ends with ------------------------------------------------------


class OutcomeStatus(StrEnum):
    """How a wait ended; training jobs and remote runs use the same words."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: Someone else stopped the work (a training job stopped in its platform's console).
    STOPPED = "stopped"
    #: The trigger lost track of the work, which may still run.
    ERROR = "error"


class TriggerOutcome(BaseModel, Generic[H]):
    """The payload of the one event a trigger fires, as ``execute_complete`` reads it back.

    Here, below the triggers, because the blocking path (``monitor``) ends a wait with the same
    outcome as the deferred one, without importing Airflow's trigger machinery.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: OutcomeStatus
    #: The work waited for, as the operator addresses it again (its result, a stop).
    handle: H
    #: Why the work failed, or what went wrong while watching it.
    message: str = ""
