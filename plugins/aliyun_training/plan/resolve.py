"""Turn a pipeline's declaration, a run's trigger form and its backend's environment into the run's plan.

The first task of every declared pipeline calls :func:`resolve_run`: the form is parsed (it is
untrusted input, see ``aliyun_training.form``; the pipeline's own parameters are typed by its
declaration), the dataset version chosen (:func:`choose_version`), and the run's backend plans its
own job (``plan.local``, ``plan.dlc``, ``plan.arena``). A bad value fails that task, naming the
field and its fix, before anything is copied or submitted.

Cloud settings come from the environment file the declaration names per backend, in the
deployment's environment directory, parsed by ``aliyun_training.environments``; the form may change
only what ``RunOverrides`` allows and pin an image of the environment's own repositories.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aliyun_training.declaration import PipelineDeclaration
from aliyun_training.environments import ArenaEnvironment, DlcEnvironment, check_use, load_environment
from aliyun_training.form import RunForm, parse_form
from aliyun_training.plan.models import ArtifactsPlan, DatasetPlan, RunPlan
from aliyun_training.records import FixedDataset
from aliyun_training.settings import LocalPaths
from aliyun_training.spec import Backend, Framework
from aliyun_training.validation import SpecError


@dataclass(frozen=True)
class RunContext:
    """What the run is: its logical date, and whether the scheduler (or a backfill) started it."""

    logical_date: datetime
    #: The deployment's installation id (``operators.ownership.installation_id``), labelled on
    #: everything the run creates.
    installation: str
    scheduled: bool = False
    #: Whether planning may list the versions' source (a dry run that makes no call at all may not:
    #: a named version is then taken on trust, an empty one is the logical date's).
    list_sources: bool = True


@dataclass(frozen=True)
class DatasetChoice:
    """The version a run trains on, where it is read from, and how long a missing one is waited for."""

    name: str
    version: str
    #: The source template (``{dataset}``, ``{version}``); None: the environment mounts a fixed dataset.
    template: str | None
    wait_minutes: int = 0

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
    connection: str = "alibaba_cloud_default"

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
            wait_uri=waited.source_uri if waited.wait_minutes else None,
            wait_minutes=waited.wait_minutes if waited.source_uri else 0,
            wait_marker=self.declaration.dataset.version.marker,
            prepared_from=f"{self.raw.name}/{self.raw.version}" if self.raw else None,
            alibaba_cloud_conn_id=self.connection,
        )

    def artifacts_plan(self, **settings: Any) -> ArtifactsPlan:
        """The artifacts part: where sets go (``settings``) and what the declaration keeps of a job."""
        declared = self.declaration.artifacts
        return ArtifactsPlan(
            model=self.model, collect=declared.collect, report_metrics=declared.report_metrics, **settings
        )

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


def _planners() -> dict[Backend, Planner]:
    from aliyun_training.plan import arena, dlc, local

    return {Backend.LOCAL: local.plan_run, Backend.DLC: dlc.plan_run, Backend.ARENA: arena.plan_run}


def resolve_run(
    params: dict[str, Any],
    run: RunContext,
    declaration: PipelineDeclaration,
    paths: LocalPaths,
    environment_dir: Path,
    environment: Path | None = None,
) -> RunPlan:
    """The run's plan; raises SpecError naming every bad value and its fix.

    ``environment`` replaces the declared environment file of the run's backend (the command line's
    ``--environment``).
    """
    form = parse_form(params, declaration)
    parameters = declaration.parse_parameters(params)
    declared = declaration.backends.get(form.backend)
    if declared is None:
        raise SpecError(
            f"backend: {declaration.dag_id} does not run on {form.backend.value} "
            f"(fix: choose one of {[b.value for b in declaration.backends]})"
        )
    environment = environment or environment_dir / declared.environment
    if form.backend is not Backend.LOCAL or environment.is_file():
        loaded = load_environment(environment, form.backend.value)
        check_use(loaded, environment, declaration.dag_id, declaration.pipeline.owner)
    sources = dataset_sources(form.backend, environment, declaration, paths)
    raw = choose_version(form, run, declaration, sources.template, sources.connection)
    chosen, prepared_from = raw, None
    if declaration.dataset.prepare and sources.derived:
        from aliyun_training.plan.prepare import derived_dataset

        chosen, prepared_from = derived_dataset(declaration, raw, sources.derived), raw
    request = PlanRequest(
        form=form,
        declaration=declaration,
        parameters=parameters,
        chosen=chosen,
        paths=paths,
        environment=environment,
        raw=prepared_from,
        connection=sources.connection,
        installation=run.installation,
    )
    plan = _planners()[form.backend](request)
    job = plan.job.model_copy(update={"max_gpu_hours": _gpu_budget(form, declaration)})
    return plan.model_copy(
        update={"job": job, "dry_run": form.dry_run, "skip_preflight": form.skip_preflight}
    )


def _gpu_budget(form: RunForm, declaration: PipelineDeclaration) -> float | None:
    """The run's max_gpu_hours: the form's when it asks for no more than the pipeline allows."""
    limit, asked = declaration.recovery.max_gpu_hours, form.max_gpu_hours
    if asked is not None and limit is not None and asked > limit:
        raise SpecError(
            f"max_gpu_hours: {asked:g} is above the pipeline's {limit:g} (fix: ask for at most {limit:g}; "
            "recovery.max_gpu_hours in the declaration is the bound)"
        )
    return asked if asked is not None else limit


@dataclass(frozen=True)
class DatasetSources:
    """Where a run's versions are read from on its backend, and the connection that reads them."""

    #: The raw versions' template (``{dataset}``, ``{version}``); None: a mount that cannot be listed.
    template: str | None
    connection: str = "alibaba_cloud_default"
    #: Where a prepare stage writes the versions it derives (and staging reads them).
    derived: str | None = None


def dataset_sources(
    backend: Backend, environment: Path, declaration: PipelineDeclaration, paths: LocalPaths
) -> DatasetSources:
    """The versions' sources on ``backend``.

    Local runs read (and prepare into) the local object store. Cloud runs that stage read the
    declaration's ``dataset.source_uri``, else the environment's ``staging.source_uri``; cloud runs
    that mount the environment's fixed dataset have no source to list. A cloud prepare stage writes
    under the environment's ``output_uri`` (``plan.prepare``) and reads its raw versions from the
    staging source on DLC, from the dataset claim on ACK.
    """
    if backend is Backend.LOCAL:
        store = f"file://{paths.object_store}/{{dataset}}/{{version}}/"
        return DatasetSources(store, derived=store)
    loaded = load_environment(environment, backend.value)
    if not isinstance(loaded, DlcEnvironment | ArenaEnvironment):
        raise SpecError(f"backend: {backend.value!r} is not a backend {environment.name} configures")
    arena = isinstance(loaded, ArenaEnvironment)
    own = loaded.alibaba_cloud_conn_id if isinstance(loaded, ArenaEnvironment) else loaded.connection_id
    connection = own or "alibaba_cloud_default"
    template = declaration.dataset.source_uri or loaded.staging.source_uri
    if declaration.dataset.prepare:
        from aliyun_training.plan.prepare import PREPARED_FOLDER

        if not (loaded.staging.mode and loaded.output_uri):
            raise SpecError(
                "staging: the prepare stage's shards are written to output_uri and staged like any "
                f"version (fix: set output_uri and a staging block in {environment.name}, or remove "
                "dataset.prepare from the declaration)"
            )
        derived = f"{loaded.output_uri.rstrip('/')}/{PREPARED_FOLDER}/{{dataset}}/{{version}}/"
        return DatasetSources(None if arena else template, connection, derived)
    if not loaded.staging.mode:
        return DatasetSources(None, connection)
    if not template:
        from aliyun_training.plan.staging import no_source

        raise no_source()
    return DatasetSources(template, connection)


def choose_version(
    form: RunForm, run: RunContext, declaration: PipelineDeclaration, template: str | None, connection: str
) -> DatasetChoice:
    """The run's dataset version: the form's, else the logical date's (scheduled runs), else the newest.

    A version the form names must be in the source, and an error lists the ones that are (a fixed
    dataset a cloud environment mounts cannot be listed: its runs take the form's or the logical
    date's version, as the declaration chooses); a
    scheduled run's version may not have landed yet, and is waited for (``version.wait_minutes``)
    by the run's ``wait_for_version`` task instead of failing here.
    """
    from aliyun_training.staging.versions import missing_version, source_versions, versions_folder

    name, block = declaration.dataset.name, declaration.dataset.version
    if not form.dataset_version and run.scheduled and block.choose == "logical_date":
        version = run.logical_date.strftime(block.format)
        return DatasetChoice(name, version, template, wait_minutes=block.wait_minutes)
    if template is None or not run.list_sources:
        # A fixed dataset's mount cannot be listed: the declared rule names the version.
        if form.dataset_version or block.choose == "logical_date":
            return DatasetChoice(
                name, form.dataset_version or run.logical_date.strftime(block.format), template
            )
        raise SpecError(
            "dataset_version: this environment mounts a fixed dataset whose versions cannot be listed "
            "(fix: name the version in the trigger form)"
        )
    versions = source_versions(template, name, connection)
    folder = versions_folder(template, name)
    if form.dataset_version:
        if form.dataset_version not in versions:
            raise missing_version(name, form.dataset_version, versions, folder)
        return DatasetChoice(name, form.dataset_version, template)
    if not versions:
        raise SpecError(
            f"dataset_version: {folder} holds no version of {name} yet (fix: upload one, e.g. "
            f"{folder}2026-11-22/, or correct the dataset's source_uri)"
        )
    return DatasetChoice(name, versions[-1], template)
