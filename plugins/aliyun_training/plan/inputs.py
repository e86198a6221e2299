"""What a run's planning works from: the run's context, the chosen dataset version, and the request
every backend's planner takes (``PlanRequest``). The planners and ``plan.resolve`` import it; it
imports no planner, so the plan package has no import cycle.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.model_registry import resolve_registry_settings
from aliyun_training.model_registry.base import RegistryInputs
from aliyun_training.plan.models import ArtifactsPlan, DatasetPlan, JobPlan, RunPlan
from aliyun_training.task_ids import CHECK_RDMA, EVALUATE, PREPARE_DATASET, TRAIN, VERIFY_IMAGE
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from datetime import datetime
    from pathlib import Path

    from aliyun_training.declaration import PipelineDeclaration
    from aliyun_training.environments import CloudEnvironment
    from aliyun_training.form import RunForm
    from aliyun_training.model_registry.base import RegistrySettings
    from aliyun_training.settings import LocalPaths
    from aliyun_training.spec import Framework, TrainingJobSpec
    from aliyun_training.stage_records import FixedDataset


@dataclass(frozen=True)
class RunContext:
    """What the run is: its logical date, and whether the scheduler (or a backfill) started it."""

    logical_date: datetime
    #: The deployment's installation id (``installation.installation_id``), labelled on
    #: everything the run creates.
    installation: str
    scheduled: bool = False
    #: Whether planning may list the versions' source (a dry run that makes no call at all may not:
    #: a named version is then taken on trust, an empty one is the logical date's).
    list_sources: bool = True
    #: Whether the deployment keeps MLflow's plain aliases too
    #: (``installation.plain_registry_aliases``).
    plain_registry_aliases: bool = False


@dataclass(frozen=True)
class DatasetChoice:
    """The version a run trains on, where it is read from, and whether the run waits for it to land."""

    name: str
    version: str
    #: The source template (``{dataset}``, ``{version}``); None: the environment mounts a fixed dataset.
    template: str | None
    #: None: nothing to wait for (planning saw it landed, or it cannot be looked at). A number (0 too):
    #: ``wait_for_version`` waits up to that long for it to land, and skips the run if it does not.
    wait_minutes: int | None = None

    @property
    def source_uri(self) -> str | None:
        return self.template.format(dataset=self.name, version=self.version) if self.template else None


@dataclass(frozen=True)
class PlanRequest:
    """What a backend's planner works from: the declaration, the typed form and the deployment's settings."""

    form: RunForm
    declaration: PipelineDeclaration
    #: The pipeline's own form parameters, typed by the declaration.
    parameters: dict[str, Any]
    #: The dataset version the run trains on (after the prepare stage, when one is declared).
    chosen: DatasetChoice
    paths: LocalPaths
    #: The backend's environment file (the local backend's may be absent: its defaults apply).
    environment: Path
    #: The deployment's installation id, labelled on the pods and volumes the run creates.
    installation: str
    #: The raw version a prepare stage converts, when the declaration has one.
    raw: DatasetChoice | None = field(default=None)
    #: The connection the versions' OSS source is read through.
    connection: str = ALIBABA_CLOUD_DEFAULT_CONN_ID
    #: The GPU-hours the training job's tries may use together (the form's within the pipeline's).
    max_gpu_hours: float | None = None
    #: Whether the deployment keeps MLflow's plain aliases too (``RunContext``).
    plain_registry_aliases: bool = False

    @property
    def version(self) -> str:
        return self.chosen.version

    @property
    def dataset(self) -> str:
        """The dataset's name: ``{dataset}`` of a source URI template, the PAI dataset's name."""
        return self.chosen.name

    @property
    def model(self) -> str:
        """The model the artifact sets are published under."""
        return self.declaration.model_name

    @property
    def framework(self) -> Framework:
        framework = self.form.framework or self.declaration.training.framework
        offered = self.declaration.training.offered_frameworks
        if framework not in offered:
            raise SpecError(
                f"framework: {self.declaration.dag_id} offers {[f.value for f in offered]}, not "
                f"{framework.value} (fix: choose one of them)"
            )
        return framework

    def dataset_plan(self, fixed: FixedDataset | None = None) -> DatasetPlan:
        """The dataset part: the version trained on, the raw one it was prepared from, what to wait for."""
        waited = self.raw or self.chosen
        return DatasetPlan(
            name=self.dataset,
            version=self.version,
            source_uri=None if fixed else self.chosen.source_uri,
            fixed=fixed,
            wait_uri=waited.source_uri if waited.wait_minutes is not None else None,
            wait_minutes=(waited.wait_minutes or 0) if waited.source_uri else 0,
            wait_marker=self.declaration.dataset.version.marker,
            prepared_from=f"{self.raw.name}/{self.raw.version}" if self.raw else None,
            alibaba_cloud_conn_id=self.connection,
        )

    def job_plan(self, spec: TrainingJobSpec, backend_config: dict[str, Any], **where: Any) -> JobPlan:
        """The training job's part: ``spec`` on the backend ``backend_config`` builds, with the run's
        GPU-hour budget; ``where`` says where it writes and reads (``JobPlan``'s other fields)."""
        return JobPlan(spec=spec, backend_config=backend_config, max_gpu_hours=self.max_gpu_hours, **where)

    def run_plan(self, *, job: JobPlan, fixed: FixedDataset | None = None, **parts: Any) -> RunPlan:
        """The run's plan from the parts its backend planned (``RunPlan``'s fields) and what every
        run's plan has: the installation, the backend, the dataset and the form's switches. It is
        complete: nothing is added to it after the planner returns."""
        return RunPlan(
            installation=self.installation,
            backend=self.form.backend,
            dataset=self.dataset_plan(fixed),
            job=job,
            dry_run=self.form.dry_run,
            skip_preflight=self.form.skip_preflight,
            job_tries=job_tries(self.declaration),
            **parts,
        )

    def artifacts_plan(self, **settings: Any) -> ArtifactsPlan:
        """The artifacts part: where sets go (``settings``) and what the declaration keeps of a job."""
        declared = self.declaration.artifacts
        return ArtifactsPlan(
            model=self.model,
            collect=declared.collect,
            report_metrics=declared.report_metrics,
            promotion=self.declaration.promotion,
            code_digest=self.declaration.code_digest(self.declaration.training.command),
            declaration=self.declaration.source,
            **settings,
        )

    def registry_settings(self, environment: CloudEnvironment | None = None) -> RegistrySettings:
        """The declaration's model registry, resolved by its kind's record (e.g. the embedded MLflow
        store under the local root when no tracking URI is named, PAI's in the cloud
        ``environment``'s workspace and region)."""
        declared = self.declaration.registry
        inputs = RegistryInputs(
            model=self.model,
            tracking_uri=declared.tracking_uri,
            embedded_store=self.paths.mlflow,
            environment=environment,
            backend=self.form.backend.value,
            environment_file=self.environment.name,
            plain_aliases=self.plain_registry_aliases,
        )
        return resolve_registry_settings(declared.kind, inputs)

    @functools.cached_property
    def job(self) -> dict[str, Any]:
        """The job settings every backend takes from the declaration and the form (rendered once)."""
        form, framework = self.form, self.framework
        procs = max(form.gpus_per_node, 1)
        return {
            "backend": form.backend,
            "framework": framework,
            "nodes": form.nodes,
            "gpus_per_node": form.gpus_per_node,
            "command": self.declaration.render_command(framework, procs, form.nodes, self.parameters),
            "timeout_minutes": form.timeout_minutes,
            "env": dict(self.declaration.training.env),
        }


Planner = Callable[[PlanRequest], RunPlan]


@dataclass(frozen=True)
class DatasetSources:
    """Where a run's versions are read from on its backend, and the connection that reads them."""

    #: The raw versions' template (``{dataset}``, ``{version}``); None: a mount that cannot be listed.
    template: str | None
    connection: str = ALIBABA_CLOUD_DEFAULT_CONN_ID
    #: Where a prepare stage writes the versions it derives (and staging reads them).
    derived: str | None = None


def job_tries(declaration: PipelineDeclaration) -> dict[str, int]:
    """The tries of each task that starts a job, as the pipeline's DAG sets its retries: the train
    task's from ``recovery.retries``, the others' from the pipeline's ``retries``."""
    others = declaration.pipeline.retries + 1
    return {
        VERIFY_IMAGE: others,
        CHECK_RDMA: others,
        PREPARE_DATASET: others,
        EVALUATE: others,
        TRAIN: declaration.recovery.retries + 1,
    }
