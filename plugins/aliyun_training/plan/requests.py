"""Every request a planned run would make, rendered without making one: the body of a dry run.

Each stage's request is built by the same code its operator uses (the SDK model's ``to_map()``
for DLC, the manifests the ACK backend and the remote runs create), with what only the stage can
know left as a placeholder in angle brackets: ids the platform assigns, a registry password, CIDR
blocks read at submit. Nothing here opens a connection or reads a secret.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from aliyun_training.backend_catalog import backend_record
from aliyun_training.backends import get_backend
from aliyun_training.model_registry import planned_registry_calls
from aliyun_training.plan.models import EvaluationContract, TryContract
from aliyun_training.stage_records import StagedDataset
from aliyun_training.staging.registration import PaiDatasetRegistration, PvcRegistration
from aliyun_training.task_ids import (
    BUILD_IMAGE,
    CHECK_RDMA,
    EVALUATE,
    PREPARE_DATASET,
    PROMOTE,
    PUBLISH_ARTIFACTS,
    STAGE_DATASET,
    TRAIN,
    VERIFY_IMAGE,
)
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from aliyun_training.plan.models import ImagePlan, JobPlan, RunPlan, StagingPlan
    from aliyun_training.spec import TrainingJobSpec

#: What a dry run cannot show of the train job: what differs per try.
RESUME_NOTE = (
    "each try also carries its task instance (DLC tags, Kubernetes annotations) and its try number; "
    "a retry after a preemption, an infrastructure fault or no room also gets RESUME_FROM=CHECKPOINT_DIR"
)
#: A job's deterministic name from its task id (the operator's ``job_name`` for the run).
JobNamer = Callable[[str], str]


@dataclass(frozen=True)
class PlannedRequest:
    """One request: the service it goes to, its action and its body, and the task that sends it.

    ``note`` says what in the body the stage only learns when it runs (from a read it makes first).
    """

    service: str
    action: str
    body: Any
    task: str
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        request = {"service": self.service, "action": self.action, "body": self.body, "task": self.task}
        return {**request, "note": self.note} if self.note else request


@dataclass(frozen=True)
class PlannedJob:
    """One job the run may start: the task that starts it, the backend settings (``job``) and spec
    it is sent with, how many tries the task may take, and the GPU-hours its tries may use together
    (``budget``, the run's ``max_gpu_hours``: the train job's only)."""

    task: str
    job: JobPlan
    spec: TrainingJobSpec
    tries: int = 1
    budget: float | None = None
    #: The dataset version a checkpointed job's checkpoints are named for.
    checkpointed: str | None = None
    note: str = ""


def planned_jobs(plan: RunPlan) -> list[PlannedJob]:
    """Every job the run may start, in order: the image's checks (a cloud run building or using a
    fixed image), the prepare job (a declared prepare stage), the training job, then the
    evaluation job (a declared evaluation)."""
    image = planned_image(plan.image)
    tries = plan.job_tries
    checks: list[PlannedJob] = []
    if backend_record(plan.backend).cloud and not (plan.image and plan.image.pinned):
        from aliyun_training.image.jobs import bandwidth_spec, verification_spec

        shaped = plan.job.shaped(image=image)
        verify = verification_spec(shaped)
        checks.append(PlannedJob(VERIFY_IMAGE, plan.job, verify, tries.get(VERIFY_IMAGE, 1)))
        if plan.rdma_check and plan.job.spec.nodes > 1 and plan.job.spec.rdma and not plan.rdma_check.skip:
            rdma = plan.rdma_check
            check = bandwidth_spec(shaped, device=rdma.device, gid_index=rdma.gid_index)
            checks.append(PlannedJob(CHECK_RDMA, plan.job, check, tries.get(CHECK_RDMA, 1)))
    prepare: list[PlannedJob] = []
    if plan.prepare is not None:
        job = plan.prepare.job
        note = f"skipped when {plan.prepare.output_uri} is already complete (its marker)"
        spec = job.spec.model_copy(update={"image": image or job.spec.image})
        prepare.append(PlannedJob(PREPARE_DATASET, job, spec, tries.get(PREPARE_DATASET, 1), note=note))
    train = PlannedJob(
        TRAIN,
        plan.job,
        training_spec(plan, image),
        tries.get(TRAIN, 1),
        budget=plan.job.max_gpu_hours,
        checkpointed=plan.dataset.version,
        note=RESUME_NOTE,
    )
    return [*checks, *prepare, train, *_evaluation_job(plan, image)]


#: What the evaluation job is told only when it runs, where the dry run shows placeholders.
EVALUATION_NOTE = (
    "CANDIDATE_DIR is the training job's output directory and CHAMPION_DIR the champion's (empty "
    "without one), as the job's nodes see them: both are known once the training job has run"
)


#: The evaluation job's contract as the dry run shows it: what the task fills in, as placeholders.
PLANNED_EVALUATION = EvaluationContract(
    candidate_dir="<train's output directory>", champion_dir="<the champion's, or empty>"
)


def _evaluation_job(plan: RunPlan, image: str | None) -> list[PlannedJob]:
    if plan.evaluation is None:
        return []
    job = plan.evaluation.job
    env = PLANNED_EVALUATION.env(
        "<DATA_DIR: the version the run trained on>" if plan.evaluation.own_version else None
    )
    spec = job.spec.model_copy(update={"image": image or job.spec.image, "env": {**job.spec.env, **env}})
    return [PlannedJob(EVALUATE, job, spec, plan.job_tries.get(EVALUATE, 1), note=EVALUATION_NOTE)]


def registry_requests(plan: RunPlan) -> list[PlannedRequest]:
    """What publishing and promoting ask of the model registry, as its kind's record plans them:
    register the candidate (every run that publishes), then move the champion pointer (only when
    the gate, and an approver, pass it)."""
    registry = plan.artifacts.registry
    if registry is None:
        return []
    gate = plan.artifacts.promotion
    calls = planned_registry_calls(registry, plan.installation)
    registered = [
        PlannedRequest(call.service, call.action, call.body, PUBLISH_ARTIFACTS, call.note)
        for call in calls.register
    ]
    if gate is None:
        return registered
    condition = "only when the gate passes the candidate" + (
        " and a person approves it" if gate.approval else ""
    )
    moved = [
        PlannedRequest(
            call.service, call.action, call.body, PROMOTE, "; ".join(filter(None, (condition, call.note)))
        )
        for call in calls.promote
    ]
    return [*registered, *moved]


def planned_requests(plan: RunPlan, job_namer: JobNamer) -> list[PlannedRequest]:
    """The run's requests in the order its stages would send them.

    Staging runs beside the image stages, unless a prepare job makes the version it stages: that job
    runs in the verified image, so the order is image, prepare, staging, train.
    """
    builds = build_requests(plan.image) if plan.image and plan.image.mode and not plan.image.pinned else []
    jobs = {
        job.task: [
            replace(request, note=job.note) if job.note else request
            for request in job_requests(job.job, job.spec, job_namer(job.task), job.task, job.checkpointed)
        ]
        for job in planned_jobs(plan)
    }
    images = [*builds, *jobs.pop(VERIFY_IMAGE, []), *jobs.pop(CHECK_RDMA, [])]
    staging = staging_requests(plan.staging) if plan.staging else []
    train = [*jobs.pop(TRAIN), *jobs.pop(EVALUATE, []), *registry_requests(plan)]
    if plan.prepare is None:
        return [*staging, *images, *train]
    return [*images, *jobs.pop(PREPARE_DATASET), *staging, *train]


def planned_image(image: ImagePlan | None) -> str | None:
    """The image the jobs run in: pinned, fixed, or the build's content-addressed reference."""
    if image is None:
        return None
    if image.pinned or not image.mode:
        return image.pinned or image.fixed
    from aliyun_training.image.context import image_reference

    return image_reference(image.repository or "", image.tag or "<tag>")


def training_spec(plan: RunPlan, image: str | None) -> TrainingJobSpec:
    """The train task's spec: the plan's, reading the staged version as the stage will mount it."""
    return plan.job.shaped(predicted_staging(plan.staging) if plan.staging else None, image)


def predicted_staging(staging: StagingPlan) -> StagedDataset:
    """The stage's record as far as the plan knows it; the platform's ids are placeholders."""
    from aliyun_training.staging.volumes import version_volume_name

    registration = staging.registration
    return StagedDataset(
        uri=f"{staging.target_root.rstrip('/')}/{staging.version}",
        version=staging.version,
        files=1,
        bytes=0,
        manifest_uri="",
        checksum="",
        source_uri=staging.source_uri,
        mode=staging.mode,
        pai_dataset_id="<id of the PAI dataset, registered by stage_dataset>"
        if isinstance(registration, PaiDatasetRegistration)
        else None,
        pai_dataset_version="<version, registered by stage_dataset>"
        if isinstance(registration, PaiDatasetRegistration)
        else None,
        pvc=version_volume_name(registration.dataset, staging.version)
        if isinstance(registration, PvcRegistration)
        else None,
    )


def staging_requests(staging: StagingPlan) -> list[PlannedRequest]:
    """The copy (on a worker, in a pod, by a data flow) and the registration of the version."""
    task = STAGE_DATASET
    requests: list[PlannedRequest] = []
    if staging.mode == "direct":
        body = {
            "source_uri": staging.source_uri,
            "target": f"{staging.target_root.rstrip('/')}/{staging.version}",
        }
        requests.append(PlannedRequest("worker", "copy and publish", body, task))
    elif staging.mode == "pod":
        from aliyun_training.staging.pod import PodStagerSettings, build_pod

        settings = validate_record(PodStagerSettings, staging.remote_config())
        requests.append(PlannedRequest("kubernetes", "create Pod", build_pod(settings), task))
    else:
        requests.append(_data_flow_import(staging))
    registration = staging.registration
    if isinstance(registration, PaiDatasetRegistration):
        requests += _pai_dataset_requests(staging, registration)
    elif isinstance(registration, PvcRegistration):
        from aliyun_training.staging.registration import volume_arguments
        from aliyun_training.staging.volumes import build_volume

        volume, claim = build_volume(**volume_arguments(registration, staging.version))
        requests.append(PlannedRequest("kubernetes", "create PersistentVolume", volume, task))
        requests.append(PlannedRequest("kubernetes", "create PersistentVolumeClaim", claim, task))
    return requests


def _data_flow_import(staging: StagingPlan) -> PlannedRequest:
    """The CreateDataFlowTask of a data flow import, its directories as the URIs name them."""
    from aliyun_training.oss_location import parse_oss_uri
    from aliyun_training.staging.dataflow_api import import_task_request

    source = parse_oss_uri(staging.source_uri)
    request = import_task_request(
        file_system_id=staging.remote["file_system_id"],
        data_flow_id=staging.remote["data_flow_id"],
        directory=f"/{source.prefix}",
        dst_directory=f"{staging.target_root.rstrip('/')}/{staging.version}/",
        client_token="stage-0000000000000000000000000000000000000000",
    )
    note = (
        "Directory and DstDirectory are relative to the data flow's OSS path and file system path "
        "(read with DescribeDataFlows at submit); ClientToken is a hash of the source listing"
    )
    return PlannedRequest("nas", "CreateDataFlowTask", request.to_map(), STAGE_DATASET, note)


def _pai_dataset_requests(staging: StagingPlan, registration: PaiDatasetRegistration) -> list[PlannedRequest]:
    from aliyun_training.staging.pai_dataset import create_dataset_request, create_dataset_version_request
    from aliyun_training.staging.registration import DATA_SOURCE_TYPES, pai_dataset_uri

    path = f"{registration.cpfs_path.rstrip('/')}/{staging.version}"
    common: dict[str, Any] = {
        "version_uri": pai_dataset_uri(
            registration, path, registration.region or "<region of the connection>"
        ),
        "data_source_type": DATA_SOURCE_TYPES[registration.uri_kind],
        "mount_path": registration.mount_path,
        "version_description": f"{staging.version}: <files and bytes staged, checksum>",
    }
    dataset = create_dataset_request(
        workspace_id=registration.workspace_id,
        name=registration.name,
        provider_type=registration.provider_type,
        **common,
    )
    task = STAGE_DATASET
    return [
        PlannedRequest(
            "aiworkspace",
            "CreateDataset",
            dataset.to_map(),
            task,
            "only when the workspace has no dataset of this name (ListDatasets); its v1 is the version",
        ),
        PlannedRequest(
            "aiworkspace",
            "CreateDatasetVersion",
            create_dataset_version_request(**common).to_map(),
            task,
            "when the dataset exists and has no version of this URI (ListDatasetVersions)",
        ),
    ]


def build_requests(image: ImagePlan) -> list[PlannedRequest]:
    """The image build: a kaniko pod with its context ConfigMap, or an ACR build of the rule."""
    from aliyun_training.image.context import image_reference

    reference = image_reference(image.repository or "", image.tag or "")
    task = BUILD_IMAGE
    if image.mode == "kaniko":
        from aliyun_training.image.context import build_context
        from aliyun_training.image.kaniko import KanikoSettings, build_context_map, build_pod

        config = {
            **image.builder,
            "destination": reference,
            "tag": image.tag,
            "context_files": build_context(image.context_path, image.code_dir),
            "build_args": image.build_args,
        }
        kaniko = validate_record(KanikoSettings, config)
        context = build_context_map(kaniko)
        # The context's file contents are the repository's own files: name them, do not repeat them.
        context = {
            **context,
            "data": {key: f"<{len(text)} characters>" for key, text in context["data"].items()},
        }
        return [
            PlannedRequest("kubernetes", "create ConfigMap", context, task),
            PlannedRequest("kubernetes", "create Pod", build_pod(kaniko), task),
        ]
    from types import SimpleNamespace

    from aliyun_training.image.acr import AcrBuildSettings, build_record_request, rule_update_request

    settings = validate_record(AcrBuildSettings, {**image.builder, "tag": image.tag, "image": reference})
    repo_id = settings.repo_id or f"<id of {settings.namespace}/{settings.repo_name}, from GetRepository>"
    kept = "<as the build rule has it (ListRepoBuildRule)>"
    rule = SimpleNamespace(
        build_args=None,
        dockerfile_location=kept,
        dockerfile_name=kept,
        platforms=None,
        push_name=kept,
        push_type=kept,
    )
    return [
        PlannedRequest(
            "cr",
            "UpdateRepoBuildRule",
            rule_update_request(settings, repo_id, rule).to_map(),
            task,
            "the rule's other settings are sent back as ListRepoBuildRule reports them",
        ),
        PlannedRequest(
            "cr", "CreateBuildRecordByRule", build_record_request(settings, repo_id).to_map(), task
        ),
    ]


def job_requests(
    job: JobPlan, spec: TrainingJobSpec, name: str, task: str, checkpointed: str | None = None
) -> list[PlannedRequest]:
    """The requests that launch ``spec`` as ``name`` on the plan's backend: the first try's job as
    the operator makes it (``JobPlan.for_try``; a job ``checkpointed`` on a dataset version gets its
    contract variables), rendered by the backend's own ``planned_requests``."""
    contract = TryContract(dataset_version=checkpointed) if checkpointed is not None else None
    spec = job.for_try(spec, name, contract=contract)
    backend = get_backend(spec.backend, job.backend_config)
    return [
        PlannedRequest(planned.service, planned.action, planned.body, task)
        for planned in backend.planned_requests(spec, name)
    ]
