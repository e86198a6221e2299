"""Which of a pipeline's backends are ready and allowed, read once per file change while parsing DAGs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aliyun_training.backend_catalog import Backend, backend_record
from aliyun_training.declaration import DeclarationError, PipelineDeclaration
from aliyun_training.environments import Environment, blank_required_settings, load_environment
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from pathlib import Path

#: (path, modification time) -> the file's settings, or why it could not be read.
_loaded: dict[tuple[Path, int], Environment | str] = {}


def unconfigured_backends(declaration: PipelineDeclaration, environment_dir: Path) -> dict[Backend, str]:
    """The declaration's cloud backends whose environment file is missing, invalid or incomplete, and why.

    Fifty pipelines share a handful of environment files, so each file is read once per change.
    """
    problems: dict[Backend, str] = {}
    for backend, declared in declaration.backends.items():
        if not backend_record(backend).cloud:
            continue
        path = environment_dir / declared.environment
        loaded = _load(path, backend)
        if isinstance(loaded, str):
            problems[backend] = loaded
        elif blank := blank_required_settings(loaded):
            problems[backend] = f"{path.name} leaves {', '.join(blank)} blank"
    return problems


def check_environment_use(declaration: PipelineDeclaration, environment_dir: Path) -> None:
    """Refuse the declaration when an environment file it names does not allow it.

    A file that is missing or invalid is not a refusal (the form marks that backend unconfigured);
    one that exists and names other pipelines or owners is: the declaration fails to load, alone.
    """
    refusals = []
    for backend, declared in declaration.backends.items():
        loaded = _load(environment_dir / declared.environment, backend)
        refusal = (
            None
            if isinstance(loaded, str)
            else loaded.refusal(declaration.dag_id, declaration.pipeline.owner)
        )
        if refusal:
            refusals.append(f"backends.{backend.value}.environment {declared.environment}: {refusal}")
    if refusals:
        raise DeclarationError(
            f"pipeline declaration {declaration.source or declaration.dag_id}: the environment files it "
            f"names are not for pipeline {declaration.dag_id}: {'; '.join(refusals)} (fix: name your team's "
            "environment files, or ask the administrator to allow the pipeline in allowed_pipelines or "
            "allowed_owners)"
        )


def _load(path: Path, backend: Backend) -> Environment | str:
    """The file's settings, or why they cannot be read (a missing local file is the defaults)."""
    try:
        key = (path, path.stat().st_mtime_ns)
    except OSError:
        return f"{path} does not exist"
    if key not in _loaded:
        try:
            _loaded[key] = load_environment(path, backend.value)
        except SpecError as exc:
            _loaded[key] = f"{path.name} is invalid ({str(exc).splitlines()[-1].strip()})"
    return _loaded[key]
