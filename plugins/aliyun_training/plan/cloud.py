"""What both cloud backends plan alike: the environment with the run's overrides, image, outputs.

The DLC and ACK planners (``plan.dlc``, ``plan.ack``) call these for the parts their
environments name the same way; each decides its own job, staging and registration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from aliyun_training.environments import (
    AckEnvironment,
    CloudEnvironment,
    DlcEnvironment,
    load_environment,
    require_settings,
)
from aliyun_training.form import TriggerFormError
from aliyun_training.plan.evaluation import evaluation_plan
from aliyun_training.plan.inputs import DatasetSources
from aliyun_training.plan.models import (
    ArtifactsPlan,
    GpuHourPrice,
    ImagePlan,
    JobPlan,
    PreflightPlan,
    RdmaCheckPlan,
    RunPlan,
    StagingPlan,
)
from aliyun_training.plan.prepare import PREPARED_FOLDER, cloud_prepare_plan
from aliyun_training.plan.staging import no_source
from aliyun_training.spec import DatasetMount
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.backend_catalog import Backend
    from aliyun_training.declaration import PipelineDeclaration
    from aliyun_training.form import RunForm
    from aliyun_training.plan.inputs import PlanRequest
    from aliyun_training.settings import LocalPaths
    from aliyun_training.stage_records import FixedDataset

E = TypeVar("E", bound=CloudEnvironment)


def environment_for_run(path: Path, model: type[E], form: RunForm) -> E:
    """The environment file of the run's backend with the form's allow-listed overrides applied.

    Overrides replace a value only after the file parsed, so each one stays within the bounds
    ``RunOverrides`` gives it; a quota or a pinned image must be one the environment offers.
    """
    loaded = load_environment(path, form.backend.value)
    if not isinstance(loaded, model):
        raise SpecError(
            f"backend: {form.backend.value!r} is not a backend the {model.__name__} file configures"
        )
    environment: E = loaded
    require_settings(environment, path)
    overrides = form.overrides()
    quota = overrides.get("quota_id")
    if quota is not None:
        _check_offered_quota(quota, environment, path.name)
    if form.image:
        _check_pinned_image(form.image, environment, path.name)
    return environment.model_copy(update=overrides)


def _check_offered_quota(quota: str, environment: CloudEnvironment, environment_file: str) -> None:
    """A quota the form chooses must be one the environment offers (DLC: its own and the allowed ones)."""
    offered = (
        [q for q in (environment.quota_id, *environment.allowed_quota_ids) if q]
        if isinstance(environment, DlcEnvironment)
        else []
    )
    if quota not in offered:
        raise TriggerFormError(
            f"backend_overrides.quota_id: {quota!r} is not a quota this environment offers "
            f"(fix: use one of {offered}; an administrator adds quotas to allowed_quota_ids in "
            f"{environment_file})"
        )


def _check_pinned_image(image: str, environment: CloudEnvironment, environment_file: str) -> None:
    """A pinned image must come from a repository the environment already trusts with the job."""
    from aliyun_training.image.context import image_repository

    trusted = {
        image_repository(ref)
        for ref in (
            environment.image,
            environment.image_build.repository,
            *environment.allowed_image_repositories,
        )
        if ref
    }
    if image_repository(image) not in trusted:
        raise TriggerFormError(
            f"image: {image!r} is not from a repository of this environment (fix: pin a tag or digest of "
            f"{sorted(trusted) or 'the environment image'}; an administrator adds repositories to "
            f"allowed_image_repositories in {environment_file})"
        )


def job_env(request: PlanRequest, *, staged: bool, mount_path: str) -> dict[str, str]:
    """The declaration's job environment, and ``DATA_DIR`` where a fixed dataset holds the version.

    A staged version's ``DATA_DIR`` is its own mount, set when the stage's record is mounted.
    """
    fixed = {} if staged else {"DATA_DIR": f"{mount_path.rstrip('/')}/{request.version}"}
    return {**request.job["env"], **fixed}


def node_resources(environment: CloudEnvironment) -> dict[str, Any]:
    """Per-node resources, image and code directory, named the same in every cloud environment."""
    return {
        "image": environment.image,
        "cpu": environment.cpu_per_node,
        "memory_gib": environment.memory_gib_per_node,
        "shared_memory_gib": environment.shared_memory_gib_per_node,
        "rdma": environment.rdma,
        "working_dir": environment.code_dir,
    }


def image_plan(request: PlanRequest, environment: CloudEnvironment, inherited: dict[str, Any]) -> ImagePlan:
    """The image stage's part: a pinned or fixed image, or a build whose settings are checked now.

    ``inherited`` is where a kaniko build runs (the environment's cluster), under the builder's own
    block; the modes a backend offers are its environment model's ``image_build.mode``.
    """
    form, block = request.form, environment.image_build
    mode = block.mode
    builder: dict[str, Any] = {}
    build_args = {"BASE_IMAGE": block.base_image} if block.base_image else {}
    context_dir, code_dir = request.declaration.context_dir, request.declaration.code_dir
    tag = None
    if mode and not form.image:
        if context_dir is None:
            raise SpecError(
                f"image.context_dir: {request.environment.name} builds images ({mode}) but the declaration "
                "names no build context (fix: set image.context_dir to the folder with the Dockerfile, or "
                "pin an image)"
            )
        if mode == "acr" and block.base_image:
            raise SpecError(
                "image_build.base_image: ACR builds with its build rule's own BuildArgs "
                "(fix: set BASE_IMAGE on the build rule in the ACR console and leave base_image empty)"
            )
        own = getattr(block, mode).model_dump(exclude_none=True)
        builder = {**(inherited if mode == "kaniko" else _acr_inherited(environment)), **own}
        tag = build_tag(context_dir, code_dir, build_args)
        _check_builder(mode, builder, block.repository or "", tag)
    return ImagePlan(
        mode=mode,
        repository=block.repository,
        tag=tag,
        builder=builder,
        build_args=build_args,
        registry_conn_id=block.registry_conn_id or getattr(environment, "image_registry_conn_id", None),
        pinned=form.image,
        fixed=environment.image,
        force_rebuild=form.force_rebuild,
        context_dir=str(context_dir) if context_dir else None,
        code_dir=str(code_dir),
    )


def build_tag(context_dir: Path, code_dir: Path, build_args: dict[str, str]) -> str:
    """The content-addressed tag of the image the build stage would build from these inputs."""
    from aliyun_training.image.context import build_context, image_tag

    return image_tag(build_context(context_dir, code_dir), build_args)


def _acr_inherited(environment: CloudEnvironment) -> dict[str, Any]:
    """ACR builds through the environment's alibaba_cloud connection."""
    return {"alibaba_cloud_conn_id": environment.alibaba_cloud_conn_id}


def _check_builder(mode: str, builder: dict[str, Any], repository: str, tag: str) -> None:
    """The builder's settings model accepts them: a bad id fails now, not after the wait for a build."""
    from aliyun_training.image.context import image_reference
    from aliyun_training.remote_runs import remote_run

    reference = image_reference(repository, tag)
    target = {"destination": reference} if mode == "kaniko" else {"image": reference}
    remote_run("image", mode, {**builder, "tag": tag, **target})


def rdma_check_plan(form: RunForm, environment: CloudEnvironment) -> RdmaCheckPlan:
    """The bandwidth check's settings from the environment's ``rdma_check`` block."""
    return RdmaCheckPlan(
        **environment.rdma_check.model_dump(exclude_none=True), skip=form.skip_bandwidth_check
    )


def output_mount(environment: CloudEnvironment, mount_uri: str, output_root: str) -> list[DatasetMount]:
    """The read-write mount of ``output_uri`` at ``output_root``, or none when it is blank."""
    if not environment.output_uri:
        return []
    return [DatasetMount(uri=mount_uri, mount_path=output_root, read_only=False)]


def output_bucket_uri(environment: CloudEnvironment) -> str | None:
    """``output_uri`` as ``oss://bucket/prefix/`` (a DLC mount may also name the bucket's endpoint)."""
    from aliyun_training.oss_location import OssLocation, parse_oss_uri

    if not environment.output_uri:
        return None
    location = parse_oss_uri(environment.output_uri, field="output_uri")
    return OssLocation(location.bucket_name, location.prefix).uri


def artifacts_plan(request: PlanRequest, environment: CloudEnvironment) -> ArtifactsPlan:
    """Where artifact sets go, or why nothing can be published: a setting left blank, named."""
    backend, environment_file = request.form.backend, request.environment.name
    fixes = {
        "output_uri": "set output_uri to the OSS location mounted at output_root, e.g. oss://bucket/outputs/"
        + environment.output_uri_also,
        "artifact_root": "set artifact_root to where artifact sets go, e.g. oss://bucket/models/",
    }
    blank = [name for name in fixes if not getattr(environment, name)]
    unavailable = (
        f"artifacts of {backend.value} runs are not collected: {' and '.join(blank)} left blank in "
        f"{environment_file} (fix: {'; '.join(fixes[name] for name in blank)})"
        if blank
        else None
    )
    return request.artifacts_plan(
        artifact_root=environment.artifact_root,
        outputs_root=output_bucket_uri(environment),
        unavailable=unavailable,
        alibaba_cloud_conn_id=environment.alibaba_cloud_conn_id,
        registry=None if unavailable else request.registry_settings(environment),
    )


def check_remote_staging(staging: StagingPlan) -> None:
    """The remote stager's settings model accepts them: fail now, naming the setting."""
    from aliyun_training.remote_runs import remote_run

    if staging.mode != "direct":
        remote_run("staging", staging.mode, staging.remote_config())


def cloud_run_plan(
    request: PlanRequest,
    environment: CloudEnvironment,
    *,
    job: JobPlan,
    staging: StagingPlan | None,
    fixed: FixedDataset | None,
    kaniko_home: dict[str, Any],
    preflight: PreflightPlan,
    raw: tuple[DatasetMount | None, str] | None = None,
    evaluation_data: tuple[DatasetMount | None, str] | None = None,
) -> RunPlan:
    """A cloud run's plan from the parts its backend decided; the rest both backends plan alike.

    ``raw`` is where a prepare job reads the raw version (its mount, if the job needs one, and path);
    ``evaluation_data`` where an evaluation job reads a fixed version, when one is declared.
    """

    prepare = cloud_prepare_plan(request, job, raw, environment.alibaba_cloud_conn_id) if raw else None
    return request.run_plan(
        job=job,
        fixed=fixed,
        staging=staging,
        prepare=prepare,
        evaluation=evaluation_plan(request, job, evaluation_data, environment.alibaba_cloud_conn_id),
        image=image_plan(request, environment, kaniko_home),
        rdma_check=rdma_check_plan(request.form, environment),
        preflight=preflight,
        artifacts=artifacts_plan(request, environment),
        price=GpuHourPrice(per_gpu_hour=environment.price_per_gpu_hour, currency=environment.currency)
        if environment.price_per_gpu_hour
        else None,
    )


def dataset_sources(
    backend: Backend, environment: Path, declaration: PipelineDeclaration, paths: LocalPaths
) -> DatasetSources:
    """The versions' sources on the cloud ``backend`` (the catalog's ``dataset_sources``).

    Cloud runs that stage read the declaration's ``dataset.source_uri``, else the environment's
    ``staging.source_uri``; cloud runs that mount the environment's fixed dataset have no source to
    list. A cloud prepare stage writes
    under the environment's ``output_uri`` (``plan.prepare``) and reads its raw versions from the
    staging source on DLC, from the dataset claim on ACK.
    """
    loaded = load_environment(environment, backend.value)
    if not isinstance(loaded, DlcEnvironment | AckEnvironment):
        raise SpecError(f"backend: {backend.value!r} is not a backend {environment.name} configures")
    # ACK's prepare job reads its raw versions from the dataset claim, which cannot be listed.
    from_claim = isinstance(loaded, AckEnvironment)
    connection = loaded.alibaba_cloud_conn_id
    template = declaration.dataset.source_uri or loaded.staging.source_uri
    if declaration.dataset.prepare:
        if not (loaded.staging.mode and loaded.output_uri):
            raise SpecError(
                "staging: the prepare stage's shards are written to output_uri and staged like any "
                f"version (fix: set output_uri and a staging block in {environment.name}, or remove "
                "dataset.prepare from the declaration)"
            )
        derived = f"{loaded.output_uri.rstrip('/')}/{PREPARED_FOLDER}/{{dataset}}/{{version}}/"
        return DatasetSources(None if from_claim else template, connection, derived)
    if not loaded.staging.mode:
        return DatasetSources(None, connection)
    if not template:
        raise no_source()
    return DatasetSources(template, connection)
