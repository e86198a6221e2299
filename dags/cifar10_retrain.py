"""
### Weekly CIFAR-10 retraining

Takes one dataset version from "it exists in the object store" to "a verified model is published":

1. **configure** — resolve the run (dataset version, training spec, backend settings) and reject
   bad values before anything happens.
2. **preflight** — parallel checks for the chosen backend (local: CPUs/GPUs, disk, port; DLC:
   region, VPC/vSwitch/security group/NAT/SNAT, quota type/GPU model/capacity, RAM role actions,
   DLC access; ACK: the dataset PVC is bound), then one report with a fix for every finding.
3. **route** — local runs stage and probe here; DLC runs wait for quota capacity; cloud runs stage
   when the environment's `staging` block says how (else they mount the fixed dataset configured in
   `include/config/<backend>.json`).
4. **stage_dataset** — copy the version from OSS onto CPFS (or the local disk), verified, published
   atomically, and register it for the job (a PAI dataset version on DLC, a PV and PVC on ACK); on a
   worker, in a pod on ACK, or as a CPFS data flow import.
5. **training_runtime** — record and check the runtime the job runs in (Python, torch, CUDA, NCCL).
6. **train** — distributed training (`torchrun`, one process tree per node), monitored while deferred.
7. **publish_artifacts** — checkpoints, metrics and an HTML run report with a manifest (dataset
   version, runtime or verified image, job id, metrics); emits the `cifar10_model` Asset. Cloud jobs
   write to OSS mounted at their `output_root` (the environment's `output_uri`), and the set is
   collected from there; when `output_uri` or `artifact_root` is blank this task is skipped, saying
   which to set.

Each weekly logical date maps to the dataset version named after it (`YYYY-MM-DD`), so
`airflow backfill create` over past weeks retrains on past versions. A manual run may name any
version in the trigger form.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, Param, TaskGroup, task

from aliyun_training.backends import IMPLEMENTED_BACKENDS
from aliyun_training.form import overrides_schema
from aliyun_training.operators.artifacts import ArtifactsOperator
from aliyun_training.operators.image import ImageBuildOperator, ImageVerifyOperator, RdmaBandwidthOperator
from aliyun_training.operators.preflight import CHECK_GROUPS, PreflightCheckOperator, PreflightReportOperator
from aliyun_training.operators.runtime import LocalRuntimeOperator
from aliyun_training.operators.staging import DatasetStagingOperator
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.sensors.quota import QuotaCapacitySensor
from aliyun_training.spec import DATASET_VERSION_PATTERN, whole_string_pattern

#: The project root: training scripts are referenced relative to it, as they would be in an image.
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where the environment files are unless the deployment sets ALIYUN_TRAINING_ENVIRONMENT_DIR.
DEFAULT_ENVIRONMENT_DIR = os.path.join(PROJECT_DIR, "include", "config")
MODEL_ASSET = Asset(name="cifar10_model", uri="model://cifar10")
BACKEND_LABELS = {
    "local": "local — torchrun processes on the Airflow worker",
    "dlc": "dlc — PAI-DLC job (settings in include/config/dlc.json)",
    "arena": "arena — Kubeflow job on ACK, as arena submits it (settings in include/config/arena.json)",
}

with DAG(
    dag_id="cifar10_retrain",
    description="Stage a CIFAR-10 dataset version, train a CNN with DDP, publish the model with a manifest.",
    doc_md=__doc__,
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 10, 4, tz="UTC"),
    # Turning the DAG on trains the latest week only; past versions are retrained with
    # `airflow backfill create`, so a new deployment never launches a GPU job per missed week.
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=12),
    tags=["training", "cifar10", "aliyun"],
    default_args={
        "owner": "ml-platform",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
    },
    params={
        "backend": Param(
            "local",
            type="string",
            enum=[backend.value for backend in IMPLEMENTED_BACKENDS],
            values_display={b.value: BACKEND_LABELS[b.value] for b in IMPLEMENTED_BACKENDS},
            title="Backend",
            description="Where the training job runs.",
        ),
        "nodes": Param(
            2,
            type="integer",
            minimum=1,
            maximum=16,
            title="Nodes",
            description="Number of nodes; each runs one torchrun with RANK set to its index.",
        ),
        "gpus_per_node": Param(
            0,
            type="integer",
            minimum=0,
            maximum=8,
            title="GPUs per node",
            description="0 trains on CPU with gloo (one process per node); N > 0 starts N per node.",
        ),
        "dataset_version": Param(
            None,
            type=["null", "string"],
            pattern=whole_string_pattern(DATASET_VERSION_PATTERN),
            title="Dataset version",
            description="Version to train on, e.g. 2026-11-22. Empty: the version named after the run date.",
        ),
        "epochs": Param(
            3, type="integer", minimum=1, maximum=100, title="Epochs", description="Training epochs."
        ),
        "batch_size": Param(
            64,
            type="integer",
            minimum=8,
            maximum=1024,
            title="Batch size",
            description="Samples per process and step.",
        ),
        "timeout_minutes": Param(
            60,
            type="integer",
            minimum=1,
            maximum=7 * 24 * 60,
            title="Timeout (minutes)",
            description="The job is stopped and the task fails when training runs longer than this.",
        ),
        "skip_preflight": Param(
            False,
            type="boolean",
            title="Skip preflight",
            description="Run without the preflight checks (logged as a warning); only for emergencies.",
        ),
        "image": Param(
            None,
            type=["null", "string"],
            pattern=whole_string_pattern(r"^[a-z0-9][a-z0-9.:/_-]*[:@][A-Za-z0-9_.:-]+$"),
            title="Pin an image",
            description="Train in this image as it is: no build, no verification (cloud backends). "
            "It must be a tag or digest of a repository the environment file uses.",
        ),
        "force_rebuild": Param(
            False,
            type="boolean",
            title="Force image rebuild",
            description="Build the training image even when its content-addressed tag already exists.",
        ),
        "skip_bandwidth_check": Param(
            False,
            type="boolean",
            title="Skip RDMA bandwidth check",
            description="Do not measure RDMA bandwidth between two nodes before a multi-node run.",
        ),
        "backend_overrides": Param(
            {},
            **overrides_schema(),
            title="Backend overrides",
            description="The few environment settings a run may change: priority and quota_id (DLC; "
            "quota_id among those the environment offers), rdma, cpu_per_node, memory_gib_per_node, "
            'shared_memory_gib_per_node; e.g. {"priority": 5}. Everything else is an administrator\'s '
            "setting in the environment file.",
        ),
    },
) as dag:

    @task(multiple_outputs=True)
    def configure(params: dict[str, Any], logical_date: Any = None, dag_run: Any = None) -> dict[str, Any]:
        """Resolve and validate the whole run once; a bad value fails here, naming the field."""
        from pathlib import Path

        from airflow.sdk.exceptions import AirflowFailException

        from aliyun_training.pipeline import resolve_run
        from aliyun_training.settings import environment_files, local_paths
        from aliyun_training.spec import SpecError

        run_date = (logical_date or dag_run.run_after).strftime("%Y-%m-%d")
        environments = environment_files(Path(DEFAULT_ENVIRONMENT_DIR))
        try:
            return resolve_run(dict(params), run_date, PROJECT_DIR, local_paths(), environments)
        except SpecError as exc:
            # A bad setting stays bad on retry: fail at once, naming the field and the fix.
            raise AirflowFailException(str(exc)) from None

    @task.branch
    def route(backend: str, staging_mode: str | None) -> list[str]:
        """Local runs stage and probe the runtime; DLC runs wait for quota room; cloud runs stage when
        their environment configures it, else mount its fixed dataset."""
        stage = ["stage_dataset"] if staging_mode else []
        if backend == "local":
            return [*stage, "training_runtime"]
        if backend == "dlc":
            return [*stage, "build_image", "wait_for_capacity"]
        return [*stage, "build_image"]

    run = configure()
    with TaskGroup("preflight") as preflight:
        checks = [
            PreflightCheckOperator(
                task_id=f"check_{group}",
                group=group,
                spec=run["spec"],
                backend_config=run["backend_config"],
                settings=run["preflight"],
                skip="{{ params.skip_preflight }}",
            )
            for group in CHECK_GROUPS
        ]
        checks >> PreflightReportOperator(
            task_id="report", check_task_ids=[f"preflight.check_{group}" for group in CHECK_GROUPS]
        )
    wait_for_capacity = QuotaCapacitySensor(
        task_id="wait_for_capacity",
        spec=run["spec"],
        backend_config=run["backend_config"],
        poke_interval=30,
        timeout=6 * 3600,
    )
    stage = DatasetStagingOperator(
        task_id="stage_dataset",
        source_uri=run["source_uri"],
        target_root=run["staging_root"],
        version=run["dataset_version"],
        mode=run["staging_mode"],
        remote=run["staging_remote"],
        register=run["staging_register"],
    )
    runtime = LocalRuntimeOperator(task_id="training_runtime")
    build_image = ImageBuildOperator(
        task_id="build_image",
        context_dir=os.path.join(PROJECT_DIR, "include", "docker"),
        code_dir=os.path.join(PROJECT_DIR, "include", "training"),
        repository=run["image_repository"],
        mode=run["image_build_mode"],
        builder=run["image_builder"],
        build_args=run["image_build_args"],
        registry_conn_id=run["image_registry_conn_id"],
        pinned_image=run["image_pinned"],
        fixed_image=run["image_fixed"],
        force_rebuild=run["image_force_rebuild"],
    )
    # The image checks are jobs on the run's backend, with the run's spec and settings.
    job = {
        "spec": run["spec"],
        "backend_config": run["backend_config"],
        "output_root": run["output_root"],
        "output_uri": run["output_uri"],
    }
    verify_image = ImageVerifyOperator(
        task_id="verify_image", image=build_image.output, poll_interval=10, **job
    )
    check_rdma = RdmaBandwidthOperator(
        task_id="check_rdma",
        image=verify_image.output,
        **job,
        line_rate_gbps=run["rdma_line_rate_gbps"],
        pass_ratio=run["rdma_pass_ratio"],
        device=run["rdma_device"],
        gid_index=run["rdma_gid_index"],
        skip=run["rdma_skip"],
        poll_interval=10,
    )
    train = TrainingJobOperator(
        task_id="train",
        **job,
        dataset=stage.output,
        dataset_mount_path=run["dataset_mount_path"],
        image=verify_image.output,
        poll_interval=5,
        retries=1,
        trigger_rule="none_failed_min_one_success",
    )
    # Its records come from branches of which only the backend's ran: it runs once train succeeded
    # although the others were skipped; a failed train fails it upstream, a skipped one skips it.
    publish = ArtifactsOperator(
        task_id="publish_artifacts",
        model="cifar10",
        artifact_root=run["artifact_root"],
        job_result=train.output,
        dataset=stage.output,
        fixed_dataset=run["fixed_dataset"],
        runtime=[verify_image.output, runtime.output],
        bandwidth=check_rdma.output,
        unavailable=run["artifacts_unavailable"],
        alibaba_cloud_conn_id=run["oss_conn_id"],
        outlets=[MODEL_ASSET],
        trigger_rule="none_failed_min_one_success",
    )
    branches = [stage, runtime, build_image, wait_for_capacity]
    preflight >> route(run["backend"], run["staging_mode"]) >> branches
    build_image >> verify_image >> check_rdma
    [stage, runtime, wait_for_capacity, check_rdma] >> train
