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

A **dry run** (the form's `dry_run` switch) plans the run and runs the read-only preflight checks,
then `show_plan` writes every request the run would make (`plan.json`, `plan.html`) and the rest
is skipped: nothing is created, copied, built or submitted.

Each weekly logical date maps to the dataset version named after it (`YYYY-MM-DD`), so
`airflow backfill create` over past weeks retrains on past versions. A manual run may name any
version in the trigger form.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, TaskGroup, task

from aliyun_training.operators.artifacts import ArtifactsOperator
from aliyun_training.operators.image import ImageBuildOperator, ImageVerifyOperator, RdmaBandwidthOperator
from aliyun_training.operators.plan import RunPlanOperator
from aliyun_training.operators.preflight import CHECK_GROUPS, PreflightCheckOperator, PreflightReportOperator
from aliyun_training.operators.runtime import LocalRuntimeOperator
from aliyun_training.operators.staging import DatasetStagingOperator
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.params import run_params
from aliyun_training.sensors.quota import QuotaCapacitySensor

#: The project root: training scripts are referenced relative to it, as they would be in an image.
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where the environment files are unless the deployment sets ALIYUN_TRAINING_ENVIRONMENT_DIR.
DEFAULT_ENVIRONMENT_DIR = os.path.join(PROJECT_DIR, "include", "config")
MODEL_ASSET = Asset(name="cifar10_model", uri="model://cifar10")

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
    params=run_params(),
) as dag:

    @task(multiple_outputs=True)
    def configure(params: dict[str, Any], logical_date: Any = None, dag_run: Any = None) -> dict[str, Any]:
        """Plan and validate the whole run once; a bad value fails here, naming the field."""
        from aliyun_training.operators.plan import plan_for_task

        return plan_for_task(params, logical_date or dag_run.run_after, PROJECT_DIR, DEFAULT_ENVIRONMENT_DIR)

    @task.branch
    def route(backend: str, staging: dict[str, Any] | None, dry_run: bool) -> list[str]:
        """A dry run only shows its plan; local runs stage and probe the runtime; DLC runs wait for
        quota room; cloud runs stage when their environment configures it, else mount its fixed dataset."""
        if dry_run:
            return ["show_plan"]
        # train and publish_artifacts follow a run's records from any branch; a dry run skips them here.
        stage = ["stage_dataset", "train", "publish_artifacts"] if staging else ["train", "publish_artifacts"]
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
                job=run["job"],
                preflight=run["preflight"],
                skip=run["skip_preflight"],
            )
            for group in CHECK_GROUPS
        ]
        checks >> PreflightReportOperator(
            task_id="report", check_task_ids=[f"preflight.check_{group}" for group in CHECK_GROUPS]
        )
    show_plan = RunPlanOperator(task_id="show_plan", plan=run, report_task_id="preflight.report")
    wait_for_capacity = QuotaCapacitySensor(
        task_id="wait_for_capacity", job=run["job"], poke_interval=30, timeout=6 * 3600
    )
    stage = DatasetStagingOperator(task_id="stage_dataset", staging=run["staging"])
    runtime = LocalRuntimeOperator(task_id="training_runtime")
    build_image = ImageBuildOperator(task_id="build_image", build=run["image"])
    # The image checks are jobs on the run's backend, with the run's spec and settings.
    verify_image = ImageVerifyOperator(
        task_id="verify_image", job=run["job"], image=build_image.output, poll_interval=10
    )
    check_rdma = RdmaBandwidthOperator(
        task_id="check_rdma",
        job=run["job"],
        image=verify_image.output,
        check=run["rdma_check"],
        poll_interval=10,
    )
    train = TrainingJobOperator(
        task_id="train",
        job=run["job"],
        dataset=stage.output,
        image=verify_image.output,
        poll_interval=5,
        retries=1,
        trigger_rule="none_failed_min_one_success",
    )
    # Its records come from branches of which only the backend's ran: it runs once train succeeded
    # although the others were skipped; a failed train fails it upstream, a skipped one skips it.
    publish = ArtifactsOperator(
        task_id="publish_artifacts",
        artifacts=run["artifacts"],
        planned_dataset=run["dataset"],
        job_result=train.output,
        dataset=stage.output,
        runtime=[verify_image.output, runtime.output],
        bandwidth=check_rdma.output,
        outlets=[MODEL_ASSET],
        trigger_rule="none_failed_min_one_success",
    )
    branches = [show_plan, stage, runtime, build_image, wait_for_capacity, train, publish]
    preflight >> route(run["backend"], run["staging"], run["dry_run"]) >> branches
    build_image >> verify_image >> check_rdma
    [stage, runtime, wait_for_capacity, check_rdma] >> train
