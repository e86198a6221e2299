"""Environment files for tests: the shipped ``include/config/<backend>.json`` with a test's settings.

Environment files are an administrator's settings, never run parameters, so a test that needs a
configured backend writes the files the deployment would read (``ALIYUN_TRAINING_ENVIRONMENT_DIR``)
rather than passing settings through the trigger form.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.declaration import PipelineDeclaration, load_declaration
from aliyun_training.plan.inputs import RunContext
from aliyun_training.plan.resolve import resolve_run
from aliyun_training.settings import ENVIRONMENT_DIR_ENV, LocalPaths

if TYPE_CHECKING:
    import pytest

    from aliyun_training.plan.models import RunPlan

PROJECT_DIR = Path(__file__).resolve().parents[1]
SHIPPED = PROJECT_DIR / "include" / "config"
#: The CIFAR-10 example's declaration, which most tests plan runs of.
CIFAR10 = PROJECT_DIR / "pipelines" / "cifar10.yaml"
#: A small run's trigger form; tests lay their own values over it.
FORM: dict[str, Any] = {
    "backend": "local",
    "nodes": 2,
    "gpus_per_node": 0,
    "epochs": 1,
    "batch_size": 32,
    "timeout_minutes": 30,
}


def merged(base: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``settings`` laid over it; nested blocks merge key by key."""
    result = dict(base)
    for key, value in settings.items():
        nested = isinstance(value, dict) and isinstance(base.get(key), dict)
        result[key] = merged(base[key], value) if nested else value
    return result


def write_environment(directory: Path, backend: str, settings: dict[str, Any]) -> Path:
    """``<directory>/<backend>.json``: the shipped file of ``backend`` with ``settings`` over it."""
    directory.mkdir(parents=True, exist_ok=True)
    shipped = json.loads((SHIPPED / f"{backend}.json").read_text())
    path = directory / f"{backend}.json"
    path.write_text(json.dumps(merged(shipped, settings), indent=2))
    return path


def use_environments(
    monkeypatch: pytest.MonkeyPatch, directory: Path, **settings: dict[str, Any]
) -> dict[str, Path]:
    """Write an environment file per backend in ``settings`` and point the deployment at them."""
    for backend in ("local", "dlc", "arena"):
        write_environment(directory, backend, settings.get(backend, {}))
    monkeypatch.setenv(ENVIRONMENT_DIR_ENV, str(directory))
    return {backend: directory / f"{backend}.json" for backend in ("local", "dlc", "arena")}


#: The installation id plans made here carry (a deployment reads its own from the Airflow config).
INSTALLATION = "test-deployment"


def cifar10() -> PipelineDeclaration:
    return load_declaration(CIFAR10)


def resolve_configured(
    tmp_path: Path, environment: dict[str, Any] | None = None, run_date: str = "2026-11-22", **form: Any
) -> RunPlan:
    """resolve_run of ``FORM`` + ``form`` for the CIFAR-10 pipeline, with ``environment`` in the run's
    backend's file, as a scheduled run of ``run_date`` plans it; a named version has landed locally, and
    a cloud source is not listed (tests of the version choice list theirs)."""
    run = {**FORM, **form}
    for backend in ("local", "dlc", "arena"):
        settings = (environment or {}) if backend == run["backend"] else {}
        write_environment(tmp_path / "config", backend, settings)
    if run["backend"] == "local" and isinstance(run.get("dataset_version"), str):
        version = tmp_path / "object-store" / "cifar10" / run["dataset_version"]
        version.mkdir(parents=True, exist_ok=True)
        (version / "_SUCCESS").touch()  # landed: a run takes only a complete version
    date = datetime.fromisoformat(run_date).replace(tzinfo=UTC)
    when = RunContext(date, INSTALLATION, scheduled=True, list_sources=run["backend"] == "local")
    return resolve_run(run, when, cifar10(), LocalPaths(tmp_path), tmp_path / "config")


def pipelines_folder(folder: Path, *names: str, tracking_uri: str | None = None) -> Path:
    """A declarations folder holding only the shipped ``names`` (e.g. ``cifar10``), code paths absolute;
    with ``tracking_uri``, their MLflow registry is that one (e.g. a store deployments share)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        text = (CIFAR10.parent / f"{name}.yaml").read_text().replace("../include/", f"{PROJECT_DIR}/include/")
        if tracking_uri:
            text = text.replace(
                "registry:\n  kind: mlflow\n", f"registry:\n  kind: mlflow\n  tracking_uri: {tracking_uri}\n"
            )
        (folder / f"{name}.yaml").write_text(text)
    return folder
