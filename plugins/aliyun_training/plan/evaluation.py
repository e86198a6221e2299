"""The evaluation job's plan: one node that scores the candidate and the champion on the same data.

It runs like the prepare job: locally a process, on DLC or ACK one replica like the training job
(its image, quota or ECS spec, its output mount), without RDMA, writing under the run's outputs.
What it reads is only known when it runs (``operators.evaluation``): the candidate's outputs, the
champion's, and, when it scores on the run's own version, that version mounted as the training job
mounts it. A fixed ``evaluation.dataset_version`` is planned here: the backend says where its
nodes read it (``data``: a mount the job needs, if any, and the path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aliyun_training.plan.inputs import DatasetChoice
from aliyun_training.plan.models import EvaluationContract, EvaluationPlan, JobPlan
from aliyun_training.plan.side_jobs import side_job_spec
from aliyun_training.spec import DatasetMount
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from aliyun_training.plan.inputs import PlanRequest

#: Where a cloud evaluation job mounts a fixed version's OSS folder.
EVAL_MOUNT_PATH = "/mnt/evaluation-data"


def evaluation_plan(
    request: PlanRequest, job: JobPlan, data: tuple[DatasetMount | None, str] | None, connection: str
) -> EvaluationPlan | None:
    """The evaluation job of ``request``'s declaration, shaped like the training ``job``.

    ``data`` is where a fixed evaluation version is read (None when the run scores on its own).
    """
    evaluation = request.declaration.evaluation
    if evaluation is None:
        return None
    fixed = evaluation.dataset_version is not None
    if fixed and data is None:
        raise SpecError(
            f"evaluation.dataset_version: {request.form.backend.value} runs of this environment read no "
            "versions' source to take the fixed version from (fix: set the environment's staging "
            "source_uri or the declaration's dataset.source_uri, or remove evaluation.dataset_version "
            "to score on the version each run trained on)"
        )
    mount, path = data if data and fixed else (None, "")
    like = job.spec
    spec = side_job_spec(
        like,
        like.backend,
        command=request.declaration.render_evaluation(),
        cpu=evaluation.cpu,
        memory_gib=evaluation.memory_gib,
        timeout_minutes=evaluation.timeout_minutes,
        # The training job's environment: a fixed dataset's DATA_DIR is where it reads its version.
        env={**like.env, **(EvaluationContract.data_env(path) if fixed else {})},
        gpus=evaluation.gpus,
        datasets=[
            *like.datasets,
            *([mount] if mount and mount.mount_path not in {m.mount_path for m in like.datasets} else []),
        ],
    )
    return EvaluationPlan(
        # The GPU-hour budget bounds the training job's tries, not the evaluation's.
        job=job.model_copy(update={"spec": spec, "max_gpu_hours": None}),
        dataset_version=evaluation.dataset_version or request.version,
        own_version=not fixed,
        alibaba_cloud_conn_id=connection,
    )


def mounted_evaluation_source(request: PlanRequest) -> tuple[DatasetMount | None, str] | None:
    """A cloud job reads a fixed evaluation version's OSS folder, mounted read-only."""
    source = fixed_evaluation_source(request)
    return (DatasetMount(uri=source, mount_path=EVAL_MOUNT_PATH), EVAL_MOUNT_PATH) if source else None


def fixed_evaluation_version(request: PlanRequest) -> str | None:
    """The fixed version the declaration evaluates on, if it names one."""
    evaluation = request.declaration.evaluation
    return evaluation.dataset_version if evaluation else None


def fixed_evaluation_source(request: PlanRequest) -> str | None:
    """Where the fixed version the declaration evaluates on is read from (the source of the
    versions the run trains on), if it names one and the backend has such a source."""
    version = fixed_evaluation_version(request)
    return DatasetChoice(request.dataset, version, request.chosen.template).source_uri if version else None
