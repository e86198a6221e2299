"""Which of a pipeline's backends are ready, read once per file change while DAG files are parsed."""

from __future__ import annotations

from pathlib import Path

from aliyun_training.declaration import PipelineDeclaration
from aliyun_training.environments import blank_required_settings, load_environment
from aliyun_training.spec import Backend
from aliyun_training.validation import SpecError

#: (path, modification time) -> why the file does not configure its backend ("" when it does).
_problems: dict[tuple[Path, int], str] = {}


def unconfigured_backends(declaration: PipelineDeclaration, environment_dir: Path) -> dict[Backend, str]:
    """The declaration's cloud backends whose environment file is missing, invalid or incomplete, and why.

    Fifty pipelines share a handful of environment files, so each file is read once per change.
    """
    problems: dict[Backend, str] = {}
    for backend, declared in declaration.backends.items():
        if backend is Backend.LOCAL:
            continue
        problem = _problem(environment_dir / declared.environment, backend)
        if problem:
            problems[backend] = problem
    return problems


def _problem(path: Path, backend: Backend) -> str:
    try:
        key = (path, path.stat().st_mtime_ns)
    except OSError:
        return f"{path} does not exist"
    if key not in _problems:
        try:
            blank = blank_required_settings(load_environment(path, backend.value))
            _problems[key] = f"{path.name} leaves {', '.join(blank)} blank" if blank else ""
        except SpecError as exc:
            _problems[key] = f"{path.name} is invalid ({str(exc).splitlines()[-1].strip()})"
    return _problems[key]
