"""The run plan: everything one run will do, decided once by ``configure`` and typed end to end.

``resolve_run`` turns the trigger form and the backend's environment file into a :class:`RunPlan`;
each stage's operator takes its own part (an XComArg of ``configure``'s output) and validates it
back into the part's model. A value lives in exactly one part: the dataset version in
:class:`DatasetPlan`, each connection id in the part of the stage that uses it, ``DATA_DIR`` in the
job's spec, computed when the mount is decided. The same plan is what a dry run renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aliyun_training.backend_catalog import Backend
from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.model_registry.base import RegistrySettings
from aliyun_training.promotion import Comparison, PromotionRule
from aliyun_training.spec import (
    DATASET_VERSION_PATTERN,
    INSTALLATION_PATTERN,
    JobOwner,
    TrainingJobSpec,
    checkpoint_dir,
)
from aliyun_training.stage_records import FixedDataset, StagedDataset, mount_staged
from aliyun_training.staging.registration import Registration
from aliyun_training.validation import SpecError


class PlanPart(BaseModel):
    """A part of the plan: frozen, and refusing keys it does not know (a stale XCom, a typo)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetPlan(PlanPart):
    """The dataset version the run trains on, and where it comes from."""

    name: str
    version: Annotated[str, Field(pattern=DATASET_VERSION_PATTERN)]
    #: Where the version is read from when the run stages it; None when the job mounts ``fixed``.
    source_uri: str | None = None
    #: The environment's own dataset, mounted when the run stages nothing (cloud backends).
    fixed: FixedDataset | None = None
    #: The version a scheduled run waits for (the raw one, when prepared) up to ``wait_minutes``.
    wait_uri: str | None = None
    wait_minutes: Annotated[int, Field(ge=0)] = 0
    #: The object whose presence says ``wait_uri`` has landed; None: two equal listings a poll apart.
    wait_marker: str | None = "_SUCCESS"
    #: ``<dataset>/<version>`` of the raw version the prepare stage converted into this one.
    prepared_from: str | None = None
    #: The connection an ``oss://`` source is listed through.
    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID


class StagingPlan(PlanPart):
    """Copy the version onto the training file system, verified and atomic, then register it."""

    mode: Literal["direct", "pod", "dataflow"]
    source_uri: str
    #: The directory holding the staged versions, as the stager sees it.
    target_root: str
    version: Annotated[str, Field(pattern=DATASET_VERSION_PATTERN)]
    #: The settings of the remote stager (``pod``: the staging pod; ``dataflow``: the data flow).
    remote: dict[str, Any] = Field(default_factory=dict)
    registration: Registration | None = None
    #: The connection OSS (direct copies), NAS and AIWorkspace are reached through.
    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID

    def remote_config(self) -> dict[str, Any]:
        """The remote stager's settings: the ``remote`` block with the version to copy."""
        return {
            **self.remote,
            "source_uri": self.source_uri,
            "target_root": self.target_root,
            "version": self.version,
        }


class ImagePlan(PlanPart):
    """The image the job runs in: pinned, the environment's fixed one, or built when absent."""

    #: ``kaniko`` or ``acr`` builds the image; None uses ``pinned`` or ``fixed`` as they are.
    mode: Literal["kaniko", "acr"] | None = None
    repository: str | None = None
    #: The content-addressed tag of the build's inputs when planned; the build stage checks it.
    tag: str | None = None
    #: The builder's own settings plus where it runs (the cluster or the connection).
    builder: dict[str, Any] = Field(default_factory=dict)
    build_args: dict[str, str] = Field(default_factory=dict)
    registry_conn_id: str | None = None
    pinned: str | None = None
    fixed: str | None = None
    force_rebuild: bool = False
    #: The build context (Dockerfile) and the training code copied into the image.
    context_dir: str | None = None
    code_dir: str | None = None

    @property
    def context_path(self) -> Path:
        """The build context; a build is only planned with one (``plan.cloud.image_plan``)."""
        if self.context_dir is None:
            raise SpecError("image.context_dir: the plan builds an image without a build context")
        return Path(self.context_dir)


class RdmaCheckPlan(PlanPart):
    """The two-node RDMA bandwidth test run before a multi-node job."""

    line_rate_gbps: Annotated[float, Field(gt=0)] = 200.0
    pass_ratio: Annotated[float, Field(gt=0, le=1)] = 0.9
    #: The environment file allows only a device name; the command quotes it as any shell word.
    device: str = "mlx5_0"
    gid_index: Annotated[int, Field(ge=0, le=255)] = 3
    skip: bool = False


class JobPlan(PlanPart):
    """The training job: its spec, its backend's settings and where it writes."""

    spec: TrainingJobSpec
    #: The backend's constructor settings (connection, workspace, namespace, ...).
    backend_config: dict[str, Any] = Field(default_factory=dict)
    #: Where a job writes, one directory per job name, as its nodes see it.
    output_root: str | None = None
    #: The OSS location mounted at ``output_root`` on every node, as ``oss://bucket/prefix/``.
    output_uri: str | None = None
    #: Where a registered staged version is mounted on every node.
    dataset_mount_path: str | None = None
    #: The GPU-hours the run's tries may use together; the monitor stops the job past them.
    max_gpu_hours: float | None = None

    def shaped(self, staged: StagedDataset | None = None, image: str | None = None) -> TrainingJobSpec:
        """The planned spec reading ``staged`` (where it is mounted) in ``image``: what a stage runs
        before it makes the spec its own (the image checks turn it into their probe jobs)."""
        spec = self.spec
        if staged is not None:
            spec = mount_staged(spec, staged, self.dataset_mount_path)
        return spec.model_copy(update={"image": image}) if image else spec

    def for_try(
        self,
        spec: TrainingJobSpec,
        name: str,
        *,
        contract: TryContract | None = None,
        owner: JobOwner | None = None,
        output_root: str | None = None,
    ) -> TrainingJobSpec:
        """The job one try sends as ``name``: its output directory (``output_root``/name unless the
        spec names one), the ``contract`` variables of a checkpointed job, its ``owner``.

        The training operator sends this and the dry run renders it, so what a dry run shows is what
        a first try submits. ``output_root`` stands in when the plan names none.
        """
        root = self.output_root or output_root
        if spec.output_dir is None and root:
            spec = spec.model_copy(update={"output_dir": f"{root.rstrip('/')}/{name}"})
        update: dict[str, Any] = {"owner": owner} if owner is not None else {}
        if contract is not None:
            update["env"] = {**spec.env, **contract.env(checkpoint_dir(spec, contract.dataset_version))}
        return spec.model_copy(update=update) if update else spec


class TryContract(BaseModel):
    """What a checkpointed job is told about its try (docs/recovery.md): the version its
    checkpoints are named for, which try it is, and whether it resumes the last one's checkpoint."""

    model_config = ConfigDict(frozen=True)

    dataset_version: str
    attempt: int = 1
    resume: bool = False

    def env(self, checkpoints: str) -> dict[str, str]:
        """CHECKPOINT_DIR and TRAINING_ATTEMPT; RESUME_FROM too when the try resumes."""
        env = {"CHECKPOINT_DIR": checkpoints, "TRAINING_ATTEMPT": str(self.attempt)}
        return {**env, "RESUME_FROM": checkpoints} if self.resume else env


class PreflightPlan(PlanPart):
    """What the preflight checks need besides the job: regions, zone, role and the local disk."""

    lingjun_regions: list[str] = Field(default_factory=list)
    zone_id: str | None = None
    role_name: str | None = None
    policy_file: str | None = None
    #: The version's source and the staging root, for the local disk check.
    source_uri: str | None = None
    target_root: str | None = None


class PreparePlan(PlanPart):
    """Convert the raw version into the training version's shards, once per raw version and code."""

    #: The raw version the command reads as ``RAW_DIR``.
    raw_uri: str
    #: Where the shards go (the training version's source); a marker there says they are complete.
    output_uri: str
    #: The CPU job that writes them; its spec's ``output_dir`` is ``output_uri`` as its node sees it.
    job: JobPlan
    #: The connection OSS locations are read and marked through.
    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID


class EvaluationPlan(PlanPart):
    """The job that scores the candidate and the champion in one run on the same data."""

    #: One node running the declaration's evaluation command, writing where the training job writes.
    job: JobPlan
    #: The version both are scored on.
    dataset_version: str
    #: True: the version the run trained on, mounted as the training job mounts it (``EVAL_DATA_DIR``
    #: is its ``DATA_DIR``); False: a fixed version, already in the job's ``EVAL_DATA_DIR``.
    own_version: bool
    #: The connection an ``oss://`` evaluation.json is read through.
    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID


#: What the evaluation command writes into its OUTPUT_DIR.
EVALUATION_FILE = "evaluation.json"
#: The shape of evaluation.json, as an error names what to write.
_EVALUATION_SHAPE = '{"candidate": {"<metric>": <number>}, "champion": {"<metric>": <number>} or null}'


class EvaluationContract(BaseModel):
    """What the evaluation job is told and what it must write, as :class:`TryContract` is a
    checkpointed job's: the job outputs of the candidate (``CANDIDATE_DIR``) and of the champion
    (``CHAMPION_DIR``, empty when there is none to score) as its nodes see them and, when it scores
    on the run's own version, where that version is (``EVAL_DATA_DIR``). It writes each model's
    scores into ``$OUTPUT_DIR/evaluation.json``, which :meth:`comparison` reads for the gate.

    The evaluation task fills one in at its first try and keeps it, so a retry scores the same two
    models; the dry run shows it with placeholders (``plan.requests``).
    """

    model_config = ConfigDict(frozen=True)

    candidate_dir: str
    champion_dir: str = ""
    #: The run of the champion whose outputs ``champion_dir`` holds; None: only the candidate is scored.
    champion_run_id: str | None = None

    @staticmethod
    def data_env(data_dir: str) -> dict[str, str]:
        """Where the job reads the version both models are scored on."""
        return {"EVAL_DATA_DIR": data_dir}

    def env(self, data_dir: str | None = None) -> dict[str, str]:
        """The job's variables; ``data_dir`` is where it reads the run's own version, if it scores
        on that (a fixed version's is in the planned spec already)."""
        env = {"CANDIDATE_DIR": self.candidate_dir, "CHAMPION_DIR": self.champion_dir}
        return {**env, **self.data_env(data_dir)} if data_dir is not None else env

    def comparison(self, document: Any, folder: str) -> Comparison:
        """The ``document`` the job wrote into ``folder`` (evaluation.json, parsed) as the gate reads
        it; a missing or malformed one names what to write. The champion's scores count only where
        the job was given a champion."""
        where = f"{folder.rstrip('/')}/{EVALUATION_FILE}"
        if not isinstance(document, dict):
            raise SpecError(f"evaluation.command: it wrote no {where} (fix: write {_EVALUATION_SHAPE})")
        champion = document.get("champion") if self.champion_run_id else None
        if self.champion_run_id and not isinstance(champion, dict):
            raise SpecError(
                f"evaluation.command: {where} has no champion scores although CHAMPION_DIR was given (fix: "
                f"score $CHAMPION_DIR too and write {_EVALUATION_SHAPE})"
            )
        try:
            return Comparison(
                candidate=_scores(document.get("candidate")),
                champion=_scores(champion) if champion is not None else None,
                champion_run_id=self.champion_run_id,
                basis="evaluation",
            )
        except (ValidationError, ValueError) as exc:
            raise SpecError(f"evaluation.command: {where} is not {_EVALUATION_SHAPE} ({exc})") from None


def _scores(scores: Any) -> dict[str, float]:
    """One model's scores in evaluation.json: a non-empty object of numbers."""
    if not isinstance(scores, dict) or not scores:
        raise ValueError("each model's scores are a non-empty object of numbers")
    bad = [k for k, v in scores.items() if isinstance(v, bool) or not isinstance(v, int | float)]
    if bad:
        raise ValueError(f"{bad} are not numbers")
    return {key: float(value) for key, value in scores.items()}


class ArtifactsPlan(PlanPart):
    """Where the run's artifact set is published, or why it cannot be."""

    model: str
    #: Files and folders of the job's output directory published besides ``metrics.json``.
    collect: list[str] = Field(default_factory=lambda: ["checkpoints", "model.pt"])
    #: The per-epoch series of ``metrics.json`` the report charts and tabulates.
    report_metrics: list[str] = Field(default_factory=lambda: ["train_loss", "test_loss", "test_accuracy"])
    artifact_root: str | None = None
    #: Where a job's outputs may be collected from: the local outputs directory, or the OSS location
    #: mounted at the environment's ``output_root``. A job result naming any other place is refused.
    outputs_root: str | None = None
    #: Why this run publishes nothing (a setting left blank); the artifacts stage then skips.
    unavailable: str | None = None
    #: The connection whose OSS endpoint and credentials read job outputs and write artifacts.
    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID
    #: The declaration's promotion gate, which publishing applies; None: every model is a candidate.
    promotion: PromotionRule | None = None
    #: The model registry every candidate is registered in; None: this run publishes nothing.
    registry: RegistrySettings | None = None
    #: The lineage a registered candidate carries besides its run: the training code's digest and
    #: the declaration file.
    code_digest: str = ""
    declaration: str | None = None


class GpuHourPrice(PlanPart):
    """What one GPU-hour costs on the run's backend, as its environment file says."""

    per_gpu_hour: Annotated[float, Field(gt=0)]
    currency: str


class RunPlan(PlanPart):
    """Everything one run will do; ``configure`` returns it and each stage takes its part."""

    #: The Airflow deployment the run belongs to (``[aliyun_training] installation_id``): every job,
    #: pod and volume it creates is labelled with it, and only it acts on them.
    installation: Annotated[str, Field(pattern=INSTALLATION_PATTERN)]
    backend: Backend
    dataset: DatasetPlan
    job: JobPlan
    staging: StagingPlan | None = None
    prepare: PreparePlan | None = None
    evaluation: EvaluationPlan | None = None
    #: None on the local backend, which trains in the worker's own runtime.
    image: ImagePlan | None = None
    rdma_check: RdmaCheckPlan | None = None
    preflight: PreflightPlan
    artifacts: ArtifactsPlan
    #: Render the plan and stop: nothing is created, copied, built or submitted.
    dry_run: bool = False
    skip_preflight: bool = False
    #: How many tries each task that starts a job may take (its retries + 1), by task id: the dry
    #: run's cost ceiling counts every one.
    job_tries: dict[str, int] = Field(default_factory=dict)
    #: The environment's price of a GPU-hour; None: the ceiling is given in GPU-hours only.
    price: GpuHourPrice | None = None
