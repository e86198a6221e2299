"""The ``PlanRequest`` a run's planner receives, built the way ``resolve_run`` builds it, for the
tests that call a backend's planner directly (tests/unit/test_plan_*.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.declaration import load_declaration
from aliyun_training.form import RunForm
from aliyun_training.plan.inputs import DatasetChoice, PlanRequest
from aliyun_training.plan.prepare import derived_dataset
from aliyun_training.settings import LocalPaths
from fakes.environment_files import INSTALLATION, PROJECT_DIR, cifar10

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.backend_catalog import Backend
    from aliyun_training.declaration import PipelineDeclaration

#: The version every planned run trains on.
VERSION = "2026-11-22"
#: The raw version the ImageNet pipeline's prepare stage shards.
RAW_VERSION = "2026-11-01"
#: Where the prepare stage writes the training versions it derives.
DERIVED = "oss://ml-bucket/outputs/prepared/{dataset}/{version}/"


def cifar10_request(
    root: Path,
    environment: Path,
    backend: Backend,
    *,
    template: str | None = None,
    declaration: PipelineDeclaration | None = None,
    parameters: dict[str, Any] | None = None,
    **form: Any,
) -> PlanRequest:
    """A two-node CIFAR-10 run of VERSION on ``backend`` (``form`` adds to the form), its settings
    in the file ``environment``, its versions at ``template``, its local root ``root``."""
    declared = declaration or cifar10()
    return PlanRequest(
        form=RunForm(backend=backend, **{"nodes": 2, **form}),
        declaration=declared,
        parameters=declared.parse_parameters(parameters or {}),
        chosen=DatasetChoice("cifar10", VERSION, template),
        paths=LocalPaths(root),
        environment=environment,
        installation=INSTALLATION,
    )


def imagenet_prepare_request(
    root: Path,
    environment: Path,
    backend: Backend,
    raw_template: str | None,
    derived: str = DERIVED,
    **form: Any,
) -> PlanRequest:
    """A one-node run of the ImageNet pipeline, whose prepare stage shards RAW_VERSION (at
    ``raw_template``) into the version it trains on (at ``derived``); ``form`` adds to the form."""
    declaration = load_declaration(PROJECT_DIR / "pipelines" / "imagenet_resnet.yaml")
    raw = DatasetChoice("imagenet", RAW_VERSION, raw_template)
    return PlanRequest(
        form=RunForm(backend=backend, **{"nodes": 1, **form}),
        declaration=declaration,
        parameters=declaration.parse_parameters({}),
        chosen=derived_dataset(declaration, raw, derived),
        paths=LocalPaths(root),
        environment=environment,
        installation=INSTALLATION,
        raw=raw,
    )
