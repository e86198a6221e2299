"""The prepare stage's plan: a CPU job that converts a raw version into the shards the run trains on.

The derived version is named after the raw one and a digest of the prepare command and the code
that runs it (``<raw version>.<digest>`` of ``<dataset>-<suffix>``), so a rerun of the same raw
version with the same code finds it complete (a marker the stage writes last) and reuses it, and a
change of code prepares anew. Where the job reads and writes:

- local: a process reads the raw version in the local object store and writes the derived one next
  to it, which staging then copies like any version;
- DLC: the raw version's OSS folder is mounted read-only; the job writes into the environment's
  ``output_uri`` (mounted at ``output_root``) under ``prepared/<dataset>/<version>/``;
- ACK: the raw version is read from the dataset claim (``data_pvc`` at ``mount_path``, where the
  bare-metal guide keeps raw ImageNet on CPFS) and written to the output claim as on DLC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.plan.inputs import DatasetChoice, PlanRequest
from aliyun_training.plan.models import JobPlan, PreparePlan
from aliyun_training.plan.side_jobs import side_job_spec
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable

    from aliyun_training.declaration import PipelineDeclaration
    from aliyun_training.spec import DatasetMount, TrainingJobSpec

#: Where a cloud prepare job mounts the raw version's OSS folder.
RAW_MOUNT_PATH = "/mnt/raw"
#: The folder of a cloud output location holding derived versions.
PREPARED_FOLDER = "prepared"


def derived_dataset(declaration: PipelineDeclaration, raw: DatasetChoice, template: str) -> DatasetChoice:
    """The version the prepare stage makes of ``raw``: named by the raw version and the code's digest."""
    prepare = declaration.dataset.prepare
    assert prepare is not None, "only a declaration with a prepare stage has a derived dataset"
    name = f"{raw.name}-{prepare.suffix}"
    return DatasetChoice(
        name, f"{raw.version}.{declaration.code_digest(declaration.render_prepare())}", template
    )


def prepare_plan(
    request: PlanRequest, backend_config: dict[str, Any], node_path: Callable[[str], str]
) -> PreparePlan | None:
    """The local prepare job: ``node_path`` turns the raw and derived URIs into its paths."""
    if request.raw is None:
        return None
    raw_uri, output_uri = request.raw.source_uri, request.chosen.source_uri
    assert raw_uri and output_uri, "the local object store names every version"
    spec = _prepare_spec(
        request,
        {"working_dir": str(request.declaration.code_dir), "output_dir": node_path(output_uri)},
        {"RAW_DIR": node_path(raw_uri)},
    )
    return PreparePlan(
        raw_uri=raw_uri,
        output_uri=output_uri,
        job=JobPlan(spec=spec, backend_config=backend_config, output_root=str(request.paths.outputs)),
    )


def cloud_prepare_plan(
    request: PlanRequest,
    job: JobPlan,
    raw: tuple[DatasetMount | None, str],
    connection: str,
) -> PreparePlan | None:
    """A cloud prepare job like the training job (image, quota, output mount), on one CPU node.

    ``raw`` is the raw version's mount (None: it is on a mount the job has already) and its path.
    """
    if request.raw is None:
        return None
    if not (job.output_uri and job.output_root):
        raise SpecError(
            "output_uri: the prepare stage writes its shards to the environment's output_uri (fix: set "
            "output_uri, mounted at output_root, or remove dataset.prepare from the declaration)"
        )
    relative = f"{PREPARED_FOLDER}/{request.dataset}/{request.version}"
    mount, raw_dir = raw
    outputs = [m for m in job.spec.datasets if not m.read_only]
    spec = _prepare_spec(
        request,
        {
            "output_dir": f"{job.output_root.rstrip('/')}/{relative}",
            "datasets": [*([mount] if mount else []), *outputs],
        },
        {"RAW_DIR": raw_dir},
        like=job.spec,
    )
    return PreparePlan(
        raw_uri=request.raw.source_uri or raw_dir,
        output_uri=f"{job.output_uri.rstrip('/')}/{relative}/",
        # The GPU-hour budget bounds the training job's tries, not the prepare job's.
        job=job.model_copy(update={"spec": spec, "max_gpu_hours": None}),
        alibaba_cloud_conn_id=connection,
    )


def _prepare_spec(
    request: PlanRequest, settings: dict[str, Any], env: dict[str, str], like: TrainingJobSpec | None = None
) -> TrainingJobSpec:
    """One CPU node running the prepare command (``side_job_spec``), with the declaration's
    environment and ``env``."""
    prepare = request.declaration.dataset.prepare
    assert prepare is not None
    return side_job_spec(
        like,
        request.job["backend"],
        command=request.declaration.render_prepare(),
        cpu=prepare.cpu,
        memory_gib=prepare.memory_gib,
        timeout_minutes=prepare.timeout_minutes,
        env={**request.declaration.training.env, **env},
        **settings,
    )
