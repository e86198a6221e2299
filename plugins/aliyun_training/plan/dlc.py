"""The PAI-DLC plan: a DLC job in the environment's workspace and quota, its data and outputs.

A staged version is copied onto CPFS (on a worker that mounts it, or by a CPFS data flow import)
and registered as a PAI dataset version, which the job mounts by id at ``dataset.mount_path``;
without a ``staging`` block the job mounts the environment's fixed dataset and reads
``<mount_path>/<version>``. ``output_uri`` is mounted read-write at ``output_root`` on every node.

DLC's own rules on a spec (``backends.dlc.request.check_spec``: what it would refuse only after a
queue) are checked here, on every job the run starts, so a bad setting fails the plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.backends.dlc.request import DlcJobSettings, ResourceType, check_spec
from aliyun_training.environments import DlcEnvironment
from aliyun_training.plan import cloud
from aliyun_training.plan.evaluation import mounted_evaluation_source
from aliyun_training.plan.models import PreflightPlan, RunPlan, StagingPlan
from aliyun_training.plan.prepare import RAW_MOUNT_PATH
from aliyun_training.plan.staging import no_source, staged_source, versions_directory
from aliyun_training.spec import DatasetMount, TrainingJobSpec
from aliyun_training.stage_records import FixedDataset
from aliyun_training.staging.registration import PaiDatasetRegistration
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from aliyun_training.plan.inputs import PlanRequest

DEFAULT_OUTPUT_ROOT = "/mnt/output"
#: The actions the Lingjun guide's job role needs, which the permissions check asks RAM about.
POLICY_FILE = Path(__file__).resolve().parents[1] / "preflight" / "dlc_role_policy.json"


def plan_run(request: PlanRequest) -> RunPlan:
    env = cloud.environment_for_run(request.environment, DlcEnvironment, request.form)
    if "shared_memory_gib_per_node" in request.form.overrides() and not request.form.gpus_per_node:
        raise SpecError(
            "backend_overrides.shared_memory_gib_per_node: DLC sets shared memory on GPU nodes only and "
            "this run requests none, so it would be ignored (fix: leave it out, or request GPUs)"
        )
    connection = env.alibaba_cloud_conn_id
    version, mount_path = request.version, env.dataset.mount_path
    output_root = env.output_root or DEFAULT_OUTPUT_ROOT
    staging = _staging(request, env, connection)
    fixed = None if staging else _fixed_dataset(env, version)
    mounts = (
        [DatasetMount(dataset_id=fixed.dataset_id, uri=fixed.uri, mount_path=mount_path)]
        if fixed and (fixed.dataset_id or fixed.uri)
        else []
    )
    spec = TrainingJobSpec.parse(
        {
            **request.job,
            **cloud.node_resources(env),
            "datasets": [*mounts, *cloud.output_mount(env, env.output_uri or "", output_root)],
            # A staged version's DATA_DIR is its own mount, set when the stage's record is mounted.
            "env": cloud.job_env(request, staged=staging is not None, mount_path=mount_path),
        }
    )
    job_settings = dlc_job_settings(env)
    check_spec(spec, job_settings)
    backend_config = dlc_backend_config(env)
    run = cloud.cloud_run_plan(
        request,
        env,
        job=request.job_plan(
            spec,
            backend_config,
            output_root=output_root,
            output_uri=cloud.output_bucket_uri(env),
            dataset_mount_path=mount_path,
        ),
        staging=staging,
        fixed=fixed,
        kaniko_home={},
        evaluation_data=mounted_evaluation_source(request),
        preflight=PreflightPlan(
            lingjun_regions=env.lingjun_regions,
            zone_id=env.zone_id,
            role_name=env.role_name,
            policy_file=str(POLICY_FILE),
        ),
        raw=_raw_mount(request),
    )
    for side_job in (run.prepare, run.evaluation):
        if side_job is not None:
            check_spec(side_job.job.spec, job_settings)
    return run


def dlc_backend_config(env: DlcEnvironment) -> dict[str, Any]:
    """The DLC backend's settings from its environment: what a job carries and the reconciler reads."""
    vpc = env.vpc
    return {
        "alibaba_cloud_conn_id": env.alibaba_cloud_conn_id,
        "region": env.region,
        "workspace_id": env.workspace_id,
        "vpc": vpc.model_dump() if vpc.vpc_id and vpc.switch_id and vpc.security_group_id else None,
        "image_registry_conn_id": env.image_registry_conn_id,
        "job_settings": dlc_job_settings(env).model_dump(mode="json"),
    }


def dlc_job_settings(env: DlcEnvironment) -> DlcJobSettings:
    """DLC's own part of every job the run starts, from the environment (with the form's quota and
    priority)."""
    return DlcJobSettings(
        resource_type=ResourceType(env.resource_type),
        quota_id=env.quota_id,
        gpu_type=env.gpu_type,
        ecs_spec=env.ecs_spec,
        priority=env.priority,
    )


def _raw_mount(request: PlanRequest) -> tuple[DatasetMount | None, str] | None:
    """A prepare job reads the raw version's OSS folder, mounted read-only."""

    if request.raw is None:
        return None
    if not request.raw.source_uri:
        raise no_source()
    return DatasetMount(uri=request.raw.source_uri, mount_path=RAW_MOUNT_PATH), RAW_MOUNT_PATH


def _fixed_dataset(env: DlcEnvironment, version: str) -> FixedDataset:
    """The environment's dataset the job mounts when the run stages nothing, for the manifest."""
    return FixedDataset(
        version=version,
        uri=env.dataset.uri,
        dataset_id=env.dataset.dataset_id,
        mount_path=env.dataset.mount_path,
    )


def _staging(request: PlanRequest, env: DlcEnvironment, connection: str) -> StagingPlan | None:
    """Copy the version onto CPFS and register it as a PAI dataset version; None: not staged."""
    block = env.staging
    if not block.mode:
        return None
    source_uri, target_root = staged_source(block, request)
    remote: dict[str, Any] = {}
    if block.mode == "dataflow":
        remote = {
            "file_system_id": block.file_system_id,
            "data_flow_id": block.data_flow_id,
            "alibaba_cloud_conn_id": connection,
        }
    if not env.workspace_id:
        raise SpecError("workspace_id: a PAI dataset lives in a workspace (fix: set workspace_id)")
    register = PaiDatasetRegistration(
        workspace_id=env.workspace_id,
        name=request.dataset,
        uri_kind=block.uri_kind,
        file_system_id=block.file_system_id,
        mount_target=block.mount_target,
        protocol_service_id=block.protocol_service_id,
        export_id=block.export_id,
        cpfs_path=versions_directory(block.cpfs_path or (target_root if block.mode == "dataflow" else None)),
        provider_type="Lingjun" if env.resource_type == "lingjun" else "Ecs",
        mount_path=env.dataset.mount_path,
        region=env.region,
        installation=request.installation,
    )
    staging = StagingPlan(
        mode=block.mode,
        source_uri=source_uri,
        target_root=target_root,
        version=request.version,
        remote=remote,
        registration=register,
        alibaba_cloud_conn_id=connection,
    )
    cloud.check_remote_staging(staging)
    from aliyun_training.staging.registration import check_registration

    check_registration(register, request.version)
    return staging
