"""The ACK plan: a Kubeflow job in the environment's namespace, submitted the way arena submits it.

The job mounts the dataset claim ``data_pvc`` and reads ``<mount_path>/<version>``, or, with a
``staging`` block, the staged version's own static PV and PVC (created by the staging stage) at
``mount_path``. The OSS-backed claim ``output_pvc`` (whose volume is ``output_uri``) is mounted
read-write at ``output_root``. OSS itself (direct staging, artifacts, ACR builds) is reached
through ``alibaba_cloud_conn_id``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.environments import AckEnvironment
from aliyun_training.plan import cloud
from aliyun_training.plan.evaluation import fixed_evaluation_version
from aliyun_training.plan.models import PreflightPlan, RunPlan, StagingPlan
from aliyun_training.plan.staging import staged_source, versions_directory
from aliyun_training.spec import DatasetMount, TrainingJobSpec
from aliyun_training.stage_records import FixedDataset
from aliyun_training.staging.registration import PvcRegistration
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from aliyun_training.plan.inputs import PlanRequest

DEFAULT_OUTPUT_ROOT = "/mnt/data/outputs"


def plan_run(request: PlanRequest) -> RunPlan:
    env = cloud.environment_for_run(request.environment, AckEnvironment, request.form)
    version, mount_path = request.version, env.mount_path
    output_root = env.output_root or DEFAULT_OUTPUT_ROOT
    _check_output_pvc(env)
    staging = _staging(request, env)
    fixed = (
        None if staging else FixedDataset(version=version, uri=f"pvc://{env.data_pvc}", mount_path=mount_path)
    )
    spec = TrainingJobSpec.parse(
        {
            **request.job,
            **cloud.node_resources(env),
            # A staged version is mounted from its own claim instead (see spec.mount_staged).
            "datasets": [
                *([DatasetMount(uri=fixed.uri, mount_path=mount_path)] if fixed else []),
                *cloud.output_mount(env, f"pvc://{env.output_pvc}", output_root),
            ],
            "env": cloud.job_env(request, staged=staging is not None, mount_path=mount_path),
        }
    )
    backend_config = ack_backend_config(env)
    kaniko_home = {
        "kubernetes_conn_id": env.kubernetes_conn_id,
        "namespace": env.namespace,
        "image_pull_secrets": env.image_pull_secrets,
        "installation": request.installation,
    }
    return cloud.cloud_run_plan(
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
        kaniko_home=kaniko_home,
        preflight=PreflightPlan(),
        raw=_on_claim(env, request.raw.version, "the prepare stage reads raw versions")
        if request.raw
        else None,
        evaluation_data=_on_claim(env, evaluated, "the evaluation reads its fixed version")
        if (evaluated := fixed_evaluation_version(request))
        else None,
    )


def ack_backend_config(env: AckEnvironment) -> dict[str, Any]:
    """The ACK backend's settings from its environment: what a job carries and the reconciler reads.

    The cluster's own rules (names, NCCL variables, API versions) are checked here, before anything runs.
    """
    from aliyun_training.backends.ack.request import ack_settings

    backend_config: dict[str, Any] = {
        "kubernetes_conn_id": env.kubernetes_conn_id,
        "namespace": env.namespace,
        "rdma_resource": env.rdma_resource,
        "host_network": env.host_network,
        "nccl_env": env.nccl_env,
        "image_pull_secrets": env.image_pull_secrets,
        "mpi_api_version": env.mpi_api_version,
        "max_gpus_per_node": env.max_gpus_per_node,
        "username": env.username,
        "gpu_metrics_url": env.gpu_metrics_url,
    }
    ack_settings(backend_config)
    return backend_config


def _on_claim(env: AckEnvironment, version: str, who: str) -> tuple[DatasetMount | None, str]:
    """A prepare or evaluation job reads a version on the dataset claim, as the bare-metal guide
    keeps raw ImageNet there: ``who`` says which, for the error."""
    if not env.data_pvc:
        raise SpecError(
            f"data_pvc: on ACK {who} from the dataset claim (fix: set data_pvc to the claim holding "
            "<mount_path>/<version>)"
        )
    mount = DatasetMount(uri=f"pvc://{env.data_pvc}", mount_path=env.mount_path)
    return mount, f"{env.mount_path.rstrip('/')}/{version}"


def _check_output_pvc(env: AckEnvironment) -> None:
    """On ACK the claim mounts the outputs and ``output_uri`` says where they are: both or neither."""
    if env.output_uri and not env.output_pvc:
        raise SpecError(
            "output_pvc: output_uri is set but no claim mounts it on the job's nodes (fix: set "
            "output_pvc to an OSS-backed PVC whose volume is output_uri, or leave output_uri blank)"
        )
    if env.output_pvc and not env.output_uri:
        raise SpecError(
            f"output_uri: output_pvc {env.output_pvc!r} is set but not which OSS location backs it (fix: "
            "set output_uri to the bucket and path of the claim's volume, e.g. oss://bucket/outputs/)"
        )
    if env.output_pvc and env.output_pvc == env.data_pvc:
        raise SpecError(
            f"output_pvc: {env.output_pvc!r} is also data_pvc (fix: use an OSS-backed claim of its own)"
        )


def _staging(request: PlanRequest, env: AckEnvironment) -> StagingPlan | None:
    """Copy the version onto CPFS and register it as a static PV and PVC; None: not staged."""
    block = env.staging
    if not block.mode:
        return None
    source_uri, target_root = staged_source(block, request)
    remote: dict[str, Any] = {}
    if block.mode == "pod":
        remote = {
            "kubernetes_conn_id": env.kubernetes_conn_id,
            "namespace": env.namespace,
            "dataset": request.dataset,
            "installation": request.installation,
            **block.model_dump(
                include={"staging_pvc", "image", "credentials_secret", "region", "oss_endpoint"}
            ),
        }
    register = PvcRegistration(
        kubernetes_conn_id=env.kubernetes_conn_id,
        namespace=env.namespace,
        dataset=request.dataset,
        installation=request.installation,
        volume_kind=block.volume_kind,
        cpfs_path=versions_directory(block.cpfs_path),
        **block.model_dump(include={"server", "file_system_id", "vpc_mount_target", "vsc_mount_target"}),
    )
    staging = StagingPlan(
        mode=block.mode,
        source_uri=source_uri,
        target_root=target_root,
        version=request.version,
        remote=remote,
        registration=register,
        alibaba_cloud_conn_id=env.alibaba_cloud_conn_id,
    )
    cloud.check_remote_staging(staging)
    from aliyun_training.staging.registration import check_registration

    check_registration(register, request.version)
    return staging
