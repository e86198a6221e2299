"""The local backend's plan: torchrun processes on this machine, reading a version staged to disk.

The local root (``ALIYUN_TRAINING_LOCAL_ROOT``) stands in for the cloud: the version is copied from
its object store into its CPFS stand-in and the job writes into its ``outputs``; artifact sets go
to its ``artifacts``. An optional ``local.json`` environment names the rendezvous port and how long
a stopped job's processes get to exit.
"""

from __future__ import annotations

from aliyun_training.environments import LocalEnvironment, load_environment
from aliyun_training.plan.models import (
    ArtifactsPlan,
    DatasetPlan,
    JobPlan,
    PreflightPlan,
    RunPlan,
    StagingPlan,
)
from aliyun_training.plan.resolve import PlanRequest
from aliyun_training.spec import Backend, TrainingJobSpec


def plan_run(request: PlanRequest) -> RunPlan:
    paths, version = request.paths, request.version
    environment = (
        load_environment(request.environment, Backend.LOCAL.value)
        if request.environment.exists()
        else LocalEnvironment()
    )
    staging_root = str(paths.cpfs / "datasets" / request.dataset)
    source_uri = f"file://{paths.object_store / request.dataset / version}/"
    # DATA_DIR is set when the staged version is mounted (``spec.mount_staged``): where it was staged.
    spec = TrainingJobSpec.parse({**request.job, "working_dir": request.project_dir})
    return RunPlan(
        backend=Backend.LOCAL,
        dataset=DatasetPlan(name=request.dataset, version=version, source_uri=source_uri),
        job=JobPlan(
            spec=spec,
            backend_config=environment.model_dump(exclude_none=True),
            output_root=str(paths.outputs),
        ),
        staging=StagingPlan(mode="direct", source_uri=source_uri, target_root=staging_root, version=version),
        preflight=PreflightPlan(source_uri=source_uri, target_root=staging_root),
        artifacts=ArtifactsPlan(model=request.model, artifact_root=str(paths.artifacts)),
    )
