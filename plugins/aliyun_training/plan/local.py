"""The local backend's plan: torchrun processes on this machine, reading a version staged to disk.

The local root (``ALIYUN_TRAINING_LOCAL_ROOT``) stands in for the cloud: the version is copied from
its object store into its CPFS stand-in and the job writes into its ``outputs``; artifact sets go
to its ``artifacts``. An optional ``local.json`` environment names the rendezvous port and how long
a stopped job's processes get to exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.environments import LocalEnvironment, load_local_environment
from aliyun_training.plan.evaluation import evaluation_plan, fixed_evaluation_source
from aliyun_training.plan.inputs import DatasetSources
from aliyun_training.plan.models import (
    PreflightPlan,
    RunPlan,
    StagingPlan,
)
from aliyun_training.plan.prepare import prepare_plan
from aliyun_training.spec import TrainingJobSpec

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.backend_catalog import Backend
    from aliyun_training.declaration import PipelineDeclaration
    from aliyun_training.plan.inputs import PlanRequest
    from aliyun_training.settings import LocalPaths


def plan_run(request: PlanRequest) -> RunPlan:
    request.form.overrides()  # the local backend reads none: any override is refused, named
    # Nor does it read image or force_rebuild (it runs the worker's Python): the form refuses them.
    paths, version = request.paths, request.version
    environment = load_local_environment(request.environment)
    staging_root = str(paths.cpfs / "datasets" / request.dataset)
    source_uri = request.chosen.source_uri or ""
    # DATA_DIR is set when the staged version is mounted (``spec.mount_staged``): where it was staged.
    spec = TrainingJobSpec.parse({**request.job, "working_dir": str(request.declaration.code_dir)})
    backend_config = local_backend_config(environment)
    job = request.job_plan(spec, backend_config, output_root=str(paths.outputs))
    fixed_source = fixed_evaluation_source(request)
    return request.run_plan(
        job=job,
        evaluation=evaluation_plan(
            request, job, (None, fixed_source.removeprefix("file://")) if fixed_source else None, "local"
        ),
        staging=StagingPlan(mode="direct", source_uri=source_uri, target_root=staging_root, version=version),
        prepare=prepare_plan(request, backend_config, lambda uri: uri.removeprefix("file://")),
        # A version still to be prepared is about as large as the raw one it is made of.
        preflight=PreflightPlan(
            source_uri=(request.raw or request.chosen).source_uri, target_root=staging_root
        ),
        artifacts=request.artifacts_plan(
            artifact_root=str(paths.artifacts),
            outputs_root=str(paths.outputs),
            registry=request.registry_settings(),
        ),
    )


def dataset_sources(
    backend: Backend, environment: Path, declaration: PipelineDeclaration, paths: LocalPaths
) -> DatasetSources:
    """Local runs read (and prepare into) the local object store (the catalog's ``dataset_sources``)."""
    store = f"file://{paths.object_store}/{{dataset}}/{{version}}/"
    return DatasetSources(store, derived=store)


def local_backend_config(environment: LocalEnvironment) -> dict[str, Any]:
    """``LocalBackend``'s arguments: ``local.json`` without its use policy."""
    return environment.backend_config()
