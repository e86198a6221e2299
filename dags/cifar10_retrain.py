"""
### Weekly CIFAR-10 retraining

Takes one dataset version from "it exists in the object store" to "a verified model is published":

1. **preflight** — can the chosen backend run this job (CPUs/GPUs, disk, rendezvous port)?
2. **stage_dataset** — copy the version onto the training filesystem, verified, published atomically.
3. **training_runtime** — record and check the runtime the job runs in (Python, torch, CUDA, NCCL).
4. **train** — distributed training (`torchrun`, one process tree per node), monitored while deferred.
5. **publish_artifacts** — checkpoints, metrics and an HTML run report with a manifest; emits the
   `cifar10_model` Asset.

Each weekly logical date maps to the dataset version named after it (`YYYY-MM-DD`), so
`airflow backfill create` over past weeks retrains on past versions. A manual run may name any
version in the trigger form.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, Param

from aliyun_training.backends import IMPLEMENTED_BACKENDS
from aliyun_training.operators.artifacts import ArtifactsOperator
from aliyun_training.operators.preflight import LocalPreflightOperator
from aliyun_training.operators.runtime import LocalRuntimeOperator
from aliyun_training.operators.staging import DatasetStagingOperator
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.settings import local_paths
from aliyun_training.spec import DATASET_VERSION_PATTERN

#: The project root: training scripts are referenced relative to it, as they would be in an image.
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_ASSET = Asset(name="cifar10_model", uri="model://cifar10")

DATASET_VERSION = "{{ params.dataset_version or (logical_date or dag_run.run_after) | ds }}"
SOURCE_URI = "file://{{ local_paths().object_store }}/cifar10/" + DATASET_VERSION + "/"
STAGING_ROOT = "{{ local_paths().cpfs }}/datasets/cifar10"


def training_spec(data_dir: str | None = None) -> dict[str, Any]:
    """The job every backend runs; the torchrun line relies only on what DLC injects per node."""
    return {
        "backend": "{{ params.backend }}",
        "nodes": "{{ params.nodes }}",
        "gpus_per_node": "{{ params.gpus_per_node }}",
        "cpu": 1,
        "memory_gib": 4,
        "working_dir": PROJECT_DIR,
        "command": (
            "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
            "--master_port=$MASTER_PORT --nproc_per_node={{ [params.gpus_per_node, 1] | max }} "
            "include/training/cifar10_ddp.py "
            "--epochs {{ params.epochs }} --batch-size {{ params.batch_size }}"
        ),
        "env": {"DATA_DIR": data_dir} if data_dir is not None else {},
        "timeout_minutes": "{{ params.timeout_minutes }}",
    }


with DAG(
    dag_id="cifar10_retrain",
    description="Stage a CIFAR-10 dataset version, train a CNN with DDP, publish the model with a manifest.",
    doc_md=__doc__,
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 10, 4, tz="UTC"),
    catchup=True,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=12),
    tags=["training", "cifar10", "aliyun"],
    user_defined_macros={"local_paths": local_paths},
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
            values_display={"local": "local — torchrun processes on the Airflow worker"},
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
            pattern=DATASET_VERSION_PATTERN,
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
    },
) as dag:
    preflight = LocalPreflightOperator(
        task_id="preflight", spec=training_spec(), source_uri=SOURCE_URI, target_root=STAGING_ROOT
    )
    stage = DatasetStagingOperator(
        task_id="stage_dataset", source_uri=SOURCE_URI, target_root=STAGING_ROOT, version=DATASET_VERSION
    )
    runtime = LocalRuntimeOperator(task_id="training_runtime")
    train = TrainingJobOperator(
        task_id="train",
        spec=training_spec(data_dir="{{ ti.xcom_pull(task_ids='stage_dataset')['uri'] }}"),
        poll_interval=5,
        retries=1,
    )
    publish = ArtifactsOperator(
        task_id="publish_artifacts",
        model="cifar10",
        artifact_root="{{ local_paths().artifacts }}",
        job_result=train.output,
        dataset=stage.output,
        runtime=runtime.output,
        outlets=[MODEL_ASSET],
    )
    preflight >> [stage, runtime] >> train >> publish
