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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.environments import ArenaEnvironment, DlcEnvironment, check_use, load_environment
from aliyun_training.form import RunForm, parse_form
from aliyun_training.plan import arena, dlc, local
from aliyun_training.plan.inputs import DatasetChoice, Planner, PlanRequest, RunContext
from aliyun_training.plan.prepare import PREPARED_FOLDER, derived_dataset
from aliyun_training.plan.staging import no_source
from aliyun_training.spec import Backend
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.declaration import PipelineDeclaration
    from aliyun_training.plan.models import RunPlan
    from aliyun_training.settings import LocalPaths


def _planners() -> dict[Backend, Planner]:
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
    connection: str = ALIBABA_CLOUD_DEFAULT_CONN_ID
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
    connection = own or ALIBABA_CLOUD_DEFAULT_CONN_ID
    template = declaration.dataset.source_uri or loaded.staging.source_uri
    if declaration.dataset.prepare:
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
