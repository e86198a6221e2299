"""The CreateJob request for a ``TrainingJobSpec``, built with no call and no connection so a dry run
can show it: replicas per role, resources, mounts, the VPC and the owner tags; and DLC's own part
of a job (:class:`DlcJobSettings`), which the generic spec leaves out."""

from __future__ import annotations

import shlex
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.oss_location import oss_endpoint, parse_oss_uri
from aliyun_training.spec import Framework, JobOwner, TrainingJobSpec
from aliyun_training.validation import SpecError, field_fix, validate_record

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Set by DLC on Lingjun nodes to match the RDMA fabric; hand-set values select the wrong NICs.
DLC_NETWORK_ENV_PREFIXES = ("NCCL_IB_", "NCCL_SOCKET_IFNAME")
#: GPUs in one Lingjun node (8 x GPU bare-metal servers).
LINGJUN_GPUS_PER_NODE = 8

#: Elastic PyTorch training is a PyTorchJob with an ElasticSpec; ``elastic_batch`` is DLC's own
#: ElasticBatchJob type (CreateJobRequest.JobType lists both).
JOB_TYPES = {
    Framework.PYTORCH: "PyTorchJob",
    Framework.TENSORFLOW: "TFJob",
    Framework.MPI: "MPIJob",
    Framework.ELASTIC: "PyTorchJob",
    Framework.ELASTIC_BATCH: "ElasticBatchJob",
}


NAME_TAG = "airflow-job-name"


#: The owner tag naming the installation: what ``launched`` asks ListJobs to filter on.
INSTALLATION_TAG = JobOwner.tag_key("installation")


#: What an MPI launcher gets: it only runs mpirun, so a node's worth of CPU and memory on top of
#: the workers' would make the job need one node more than the quota was checked for.
LAUNCHER_CPU = "2"


LAUNCHER_MEMORY = "4Gi"

#: A DLC job's priority within its quota, wherever it is set (dlc.json, the form, the job).
Priority = Annotated[int, Field(ge=1, le=9, json_schema_extra=field_fix("use a priority from 1 to 9"))]


class ResourceType(StrEnum):
    """Which DLC resources run the job: Lingjun (always through a quota) or ECS."""

    LINGJUN = "lingjun"
    ECS = "ecs"


class DlcJobSettings(BaseModel):
    """DLC's own part of a job: what CreateJob takes that no other backend has, read by DLC's request
    and by the checks that ask PAI about the same quota (preflight, the capacity wait). The DLC
    planner fills it from dlc.json (the form may change the quota and the priority), and it travels
    with the job among the backend's settings (``DlcBackend(job_settings=...)``), so every job the
    run starts on DLC (training, prepare, evaluation, the image checks) gets the same."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resource_type: Annotated[ResourceType, Field(json_schema_extra=field_fix("use lingjun or ecs"))] = (
        ResourceType.ECS
    )
    #: The resource quota the nodes come from (its ResourceId); without one, pay-as-you-go ECS.
    quota_id: Annotated[
        str | None,
        Field(json_schema_extra=field_fix("give the resource quota id (ResourceId), e.g. quota1xxxx")),
    ] = None
    #: The quota's GPU model, which CreateJob names for every node with GPUs.
    gpu_type: Annotated[
        str | None, Field(json_schema_extra=field_fix("name the GPU model of the quota, e.g. GU8TF or A100"))
    ] = None
    #: The pay-as-you-go ECS instance type each node runs on when the job has no quota.
    ecs_spec: Annotated[
        str | None,
        Field(json_schema_extra=field_fix("give a pay-as-you-go spec, e.g. ecs.gn6v-c8g1.2xlarge")),
    ] = None
    priority: Priority = 1

    @classmethod
    def from_backend_config(cls, backend_config: Mapping[str, Any]) -> DlcJobSettings:
        """The settings a job's backend settings carry; their defaults (no quota) where they carry
        none, as a job on another backend does."""
        return validate_record(cls, backend_config.get("job_settings") or {})


def check_spec(spec: TrainingJobSpec, job_settings: DlcJobSettings) -> None:
    """Refuse what PAI-DLC would refuse only after minutes in a queue (SpecError, worded as the spec's
    own errors are): the DLC planner checks every job it plans, and :meth:`DlcBackend.check` a job
    about to be looked for or sent."""
    problem = _spec_problem(spec, job_settings)
    if problem:
        raise SpecError(f"Invalid TrainingJobSpec:\n  - {problem}")


def _spec_problem(spec: TrainingJobSpec, job_settings: DlcJobSettings) -> str | None:
    """The first rule of DLC's that ``spec`` with DLC's ``job_settings`` breaks, as ``field: what is
    wrong; the fix``."""
    network = sorted(name for name in spec.env if name.startswith(DLC_NETWORK_ENV_PREFIXES))
    if network:
        return (
            f"env: {network} are set by DLC on every node to match the RDMA network; remove them "
            "(hand-set values pick the wrong NICs and NCCL falls back to TCP)"
        )
    if job_settings.resource_type is ResourceType.LINGJUN and not job_settings.quota_id:
        return (
            "quota_id: Lingjun resources are only usable through a resource quota; set quota_id "
            "to the quota's id (PAI console, Resource Quota)"
        )
    if job_settings.resource_type is ResourceType.LINGJUN and spec.gpus_per_node > LINGJUN_GPUS_PER_NODE:
        return (
            f"gpus_per_node: a Lingjun node has {LINGJUN_GPUS_PER_NODE} GPUs, not {spec.gpus_per_node}; "
            "use more nodes instead"
        )
    if not job_settings.quota_id and not job_settings.ecs_spec:
        return "ecs_spec: without quota_id the job runs on pay-as-you-go ECS; set ecs_spec"
    if job_settings.quota_id and spec.gpus_per_node and not job_settings.gpu_type:
        return (
            f"gpu_type: {spec.gpus_per_node} GPUs per node requested from quota {job_settings.quota_id} "
            "without a GPU type; set gpu_type to the quota's GPU model"
        )
    return None


def roles(spec: TrainingJobSpec) -> list[tuple[str, int, bool]]:
    """(JobSpecs Type, PodCount, gets GPUs) per role: how ``nodes`` become DLC replicas."""
    if spec.framework in (Framework.PYTORCH, Framework.ELASTIC):
        workers = [("Worker", spec.nodes - 1, True)] if spec.nodes > 1 else []
        return [("Master", 1, True), *workers]
    if spec.framework is Framework.MPI:
        return [("Launcher", 1, False), ("Worker", spec.nodes, True)]
    return [("Worker", spec.nodes, True)]


def create_job_request(
    spec: TrainingJobSpec,
    name: str,
    *,
    job_settings: DlcJobSettings,
    workspace_id: str | None,
    region: str,
    vpc: dict[str, Any] | None,
    extended_cidrs: list[str],
    image_config: Any | None,
) -> Any:
    """The CreateJob request that runs ``spec`` with DLC's ``job_settings`` (its quota or ECS spec,
    GPU model and priority) under the job name ``name``, in the SDK's own models.

    Pure: no call, no connection, no secret beyond what ``image_config`` carries. ``region`` is the
    job's (the endpoint of bare OSS mounts); ``vpc`` is the environment's ``{vpc_id, switch_id,
    security_group_id}`` and ``extended_cidrs`` every CIDR block of that VPC, which DLC requires
    once a vSwitch is named; ``image_config`` is an ``ImageConfig`` with the private registry's
    login, or None. :meth:`DlcBackend.create_request` reads the last two from DescribeVpcs and the
    registry connection; a dry run passes what it knows.
    """
    from alibabacloud_pai_dlc20201203 import models

    job_specs = []
    for role, pods, gpus in roles(spec):
        resources = (
            models.ResourceConfig(
                cpu=str(spec.cpu) if gpus else LAUNCHER_CPU,
                gpu=str(spec.gpus_per_node if gpus else 0),
                gputype=job_settings.gpu_type if gpus and spec.gpus_per_node else None,
                memory=f"{spec.memory_gib}Gi" if gpus else LAUNCHER_MEMORY,
                shared_memory=f"{spec.shared_memory_gib}Gi" if spec.shared_memory_gib and gpus else None,
            )
            if job_settings.quota_id
            else None
        )
        job_specs.append(
            models.JobSpec(
                type=role,
                image=spec.image,
                pod_count=pods,
                resource_config=resources,
                ecs_spec=None if job_settings.quota_id else job_settings.ecs_spec,
                image_config=image_config,
            )
        )
    envs = {**spec.env, **({"OUTPUT_DIR": spec.output_dir} if spec.output_dir else {})}
    return models.CreateJobRequest(
        display_name=name,
        job_type=JOB_TYPES[spec.framework],
        job_specs=job_specs,
        elastic_spec=_elastic_spec(spec),
        user_command=_user_command(spec),
        resource_id=job_settings.quota_id,
        workspace_id=workspace_id,
        envs=envs or None,
        data_sources=[
            models.CreateJobRequestDataSources(
                data_source_id=mount.dataset_id,
                data_source_version=mount.dataset_version,
                uri=None if mount.dataset_id else dlc_mount_uri(mount.uri, region),
                mount_path=mount.mount_path,
                mount_access="RO" if mount.read_only else "RW",
            )
            for mount in spec.datasets
        ]
        or None,
        user_vpc=_user_vpc(vpc, extended_cidrs),
        settings=models.JobSettings(enable_rdma=spec.rdma or None, tags=job_tags(spec, name)),
        job_max_running_time_minutes=spec.timeout_minutes,
        priority=job_settings.priority,
    )


def job_tags(spec: TrainingJobSpec, name: str) -> dict[str, str]:
    """JobSettings.Tags ("The custom tags"): the job's name, and the task instance that launched it
    when the operator set ``spec.owner``, which ``launched`` reads back."""
    return {NAME_TAG: name, **(spec.owner.tags() if spec.owner else {})}


def _user_vpc(vpc: dict[str, Any] | None, extended_cidrs: list[str]) -> Any:
    """UserVpc with every CIDR block of the VPC: DLC requires them once a vSwitch is named.

    The SDK's CreateJobRequestUserVpc says of ExtendedCIDRs: "If the vSwitch ID is specified,
    this parameter is required. Specify all CIDR blocks in the VPC."
    """
    if not vpc:
        return None
    from alibabacloud_pai_dlc20201203 import models

    return models.CreateJobRequestUserVpc(
        vpc_id=vpc["vpc_id"],
        switch_id=vpc["switch_id"],
        security_group_id=vpc["security_group_id"],
        extended_cidrs=list(extended_cidrs) or None,
    )


def _user_command(spec: TrainingJobSpec) -> str:
    """The spec's command, run from its working directory: the path is quoted for the shell."""
    if not spec.working_dir:
        return spec.command
    return f"cd {shlex.quote(spec.working_dir)} && {spec.command}"


def _elastic_spec(spec: TrainingJobSpec) -> Any:
    """ElasticSpec of elastic PyTorch training: between ``min_nodes`` and ``max_nodes`` replicas."""
    if spec.framework is not Framework.ELASTIC:
        return None
    from alibabacloud_pai_dlc20201203 import models

    return models.JobElasticSpec(
        enable_elastic_training=True,
        min_parallelism=spec.elastic_min_nodes,
        max_parallelism=spec.elastic_max_nodes,
    )


def dlc_mount_uri(uri: str | None, region: str) -> str | None:
    """A mount's URI as DLC's DataSources take it: OSS with the bucket's internal endpoint.

    Every DataSources example in the CreateJob reference names the endpoint
    (``oss://bucket.oss-cn-hangzhou-internal.aliyuncs.com/path/``), while the environment writes a
    bare ``oss://bucket/path/``. A bare bucket gets the internal endpoint of ``region`` (the job's;
    a bucket elsewhere must be written with its endpoint). A host with a dot already is an endpoint:
    OSS bucket names are lower-case letters, digits and hyphens only. Other schemes pass unchanged.
    """
    if not uri or not uri.startswith("oss://"):
        return uri
    location = parse_oss_uri(uri, field="datasets.uri")
    if location.endpoint:
        return uri
    return f"oss://{location.bucket}.{oss_endpoint(region, internal=True)}/{location.prefix}"
