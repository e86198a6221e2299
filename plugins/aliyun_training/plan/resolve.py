"""Turn a pipeline's declaration, a run's trigger form and its backend's environment into the run's plan.

The first task of every declared pipeline calls :func:`resolve_run`: the form is parsed (it is
untrusted input, see ``aliyun_training.form``; the pipeline's own parameters are typed by its
declaration), the dataset version chosen (:func:`choose_version`), and the run's backend plans its
own job (``plan.local``, ``plan.dlc``, ``plan.ack``). A bad value fails that task, naming the
field and its fix, before anything is copied or submitted.

Cloud settings come from the environment file the declaration names per backend, in the
deployment's environment directory, parsed by ``aliyun_training.environments``; the form may change
only what ``RunOverrides`` allows and pin an image of the environment's own repositories.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aliyun_training.backend_catalog import backend_record
from aliyun_training.environments import check_use, load_environment
from aliyun_training.form import RunForm, TriggerFormError, parse_form
from aliyun_training.plan.inputs import DatasetChoice, DatasetSources, PlanRequest, RunContext
from aliyun_training.plan.prepare import derived_dataset
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.declaration import PipelineDeclaration, VersionBlock
    from aliyun_training.plan.models import RunPlan
    from aliyun_training.settings import LocalPaths
    from aliyun_training.staging.versions import LandingCheck

log = logging.getLogger(__name__)


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
        raise TriggerFormError(
            f"backend: {declaration.dag_id} does not run on {form.backend.value} "
            f"(fix: choose one of {[b.value for b in declaration.backends]})"
        )
    environment = environment or environment_dir / declared.environment
    if backend_record(form.backend).cloud or environment.is_file():
        loaded = load_environment(environment, form.backend.value)
        check_use(loaded, environment, declaration.dag_id, declaration.pipeline.owner)
    record = backend_record(form.backend)
    sources: DatasetSources = record.part("dataset_sources")(form.backend, environment, declaration, paths)
    raw = choose_version(form, run, declaration, sources.template, sources.connection)
    chosen, prepared_from = raw, None
    if declaration.dataset.prepare and sources.derived:
        chosen, prepared_from = derived_dataset(declaration, raw, sources.derived), raw
    request = PlanRequest(
        max_gpu_hours=_gpu_budget(form, declaration),
        form=form,
        declaration=declaration,
        parameters=parameters,
        chosen=chosen,
        paths=paths,
        environment=environment,
        raw=prepared_from,
        connection=sources.connection,
        installation=run.installation,
        plain_registry_aliases=run.plain_registry_aliases,
    )
    plan: RunPlan = record.part("planner")(request)
    return plan


def _gpu_budget(form: RunForm, declaration: PipelineDeclaration) -> float | None:
    """The run's max_gpu_hours: the form's when it asks for no more than the pipeline allows."""
    limit, asked = declaration.recovery.max_gpu_hours, form.max_gpu_hours
    if asked is not None and limit is not None and asked > limit:
        raise TriggerFormError(
            f"max_gpu_hours: {asked:g} is above the pipeline's {limit:g} (fix: ask for at most {limit:g}; "
            "recovery.max_gpu_hours in the declaration is the bound)"
        )
    return asked if asked is not None else limit


def choose_version(
    form: RunForm, run: RunContext, declaration: PipelineDeclaration, template: str | None, connection: str
) -> DatasetChoice:
    """The run's dataset version: the form's, else the logical date's (scheduled runs), else the newest.

    A run takes only a version that has landed, by the completion check ``wait_for_version`` waits
    on (``staging.versions.look_at_version``: the declared marker, or with ``marker: null`` a
    listing that holds still). A scheduled run's version may not have landed yet, and is waited for
    (``version.wait_minutes``) by the run's ``wait_for_version`` task instead of failing here. Any
    other version is looked at once, now, before anything is staged: the newest is the newest that
    has landed (newer ones still uploading are skipped, and the log names them), and a version the
    form names must be in the source and have landed, else the run fails naming what is missing.

    Without a marker one look can only see that nothing is being uploaded (no ``*.uploading``,
    ``*.tmp``, ``*.partial``, ``*._COPYING_``); that the listing holds still takes a second look a poll
    later, so such a version is planned with a wait, and ``wait_for_version`` takes that look before
    anything is staged. A fixed dataset a cloud environment mounts cannot be listed: its runs take
    the form's or the logical date's version, as the declaration chooses.
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
        raise TriggerFormError(
            "dataset_version: this environment mounts a fixed dataset whose versions cannot be listed "
            "(fix: name the version in the trigger form)"
        )
    versions = source_versions(template, name, connection)
    folder = versions_folder(template, name)
    if form.dataset_version:
        if form.dataset_version not in versions:
            raise missing_version(name, form.dataset_version, versions, folder)
        chosen = DatasetChoice(name, form.dataset_version, template)
        check = _look(chosen, block.marker, connection)
        if check.incomplete:
            raise SpecError(
                f"dataset_version: version {chosen.version} of {name} has not landed in {chosen.source_uri}: "
                f"{_missing(check, block.marker)}; nothing was staged (fix: {_wait_fix(block)})"
            )
        return _taken(chosen, check, block.wait_minutes)
    if not versions:
        raise SpecError(
            f"dataset_version: {folder} holds no version of {name} yet (fix: upload one, e.g. "
            f"{folder}2026-11-22/, or correct the dataset's source_uri)"
        )
    skipped: list[str] = []
    for version in reversed(versions):
        chosen = DatasetChoice(name, version, template)
        check = _look(chosen, block.marker, connection)
        if not check.incomplete:
            if skipped:
                log.warning(
                    "The newest version of %s that has landed is %s; skipped, not landed: %s",
                    name,
                    version,
                    "; ".join(skipped),
                )
            return _taken(chosen, check, block.wait_minutes)
        skipped.append(f"{version} ({_missing(check, block.marker)})")
    raise SpecError(
        f"dataset_version: none of the {len(versions)} versions of {name} in {folder} has landed: "
        f"{'; '.join(skipped[:10])}{'; ...' if len(skipped) > 10 else ''} (fix: {_wait_fix(block)})"
    )


def _look(chosen: DatasetChoice, marker: str | None, connection: str) -> LandingCheck:
    from aliyun_training.staging.versions import look_at_version

    assert chosen.source_uri is not None, "a listed version has a source"
    return look_at_version(chosen.source_uri, marker, connection)


def _taken(chosen: DatasetChoice, check: LandingCheck, wait_minutes: int) -> DatasetChoice:
    """The chosen version, with the wait for the second look a marker-less one still needs."""
    if check.landed:
        return chosen
    log.info("%s: wait_for_version looks again before anything is staged", check.message)
    return DatasetChoice(chosen.name, chosen.version, chosen.template, wait_minutes=wait_minutes)


def _missing(check: LandingCheck, marker: str | None) -> str:
    """What a look found missing, for an error or the log."""
    if marker is not None:
        return f"its completion marker {marker} is not there (the upload writes it last)"
    return check.message


def _wait_fix(block: VersionBlock) -> str:
    """How to run on a version that has not landed yet."""
    marker = f", which writes {block.marker} last" if block.marker else ""
    fix = f"wait until its upload has finished{marker}, then trigger the run again"
    if block.choose == "logical_date":
        fix += (
            f"; or let a run wait for it: a scheduled run, or a backfill of the version's date, waits up to "
            f"{block.wait_minutes} minutes (dataset.version.wait_minutes)"
        )
    return fix
