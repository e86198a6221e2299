"""The two DAGs of ``bench/monitoring_cost.py``: N DLC jobs watched deferred, and N watched by polling.

Both map one ``TrainingJobOperator`` over N copies of one spec (each mapped task gets its own job
name from its map index), so the two modes differ only in ``deferrable``. N and the poll interval
come from the benchmark through the services' environment, which the dag-processor reads on every
parse; nothing else happens at import.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from aliyun_training.operators.training import TrainingJobOperator

JOBS = int(os.environ.get("MONITORING_COST_JOBS", "200"))
POLL_INTERVAL = float(os.environ.get("MONITORING_COST_POLL_INTERVAL", "10"))
#: One Lingjun node of eight GPUs (the quota's, in BACKEND_CONFIG); the emulator keeps the job
#: Running far past the measurement.
SPEC = {
    "backend": "dlc",
    "nodes": 1,
    "gpus_per_node": 8,
    "cpu": 96,
    "memory_gib": 800,
    "image": "registry.example.com/train/pytorch:2.13",
    "command": "torchrun --nproc_per_node=8 train.py",
    "timeout_minutes": 180,
}
BACKEND_CONFIG = {
    "alibaba_cloud_conn_id": "alibaba_cloud_default",
    "workspace_id": "ws-bench",
    "job_settings": {"resource_type": "lingjun", "quota_id": "quota12345", "gpu_type": "GU8TF"},
}

for dag_id, deferrable in (("monitoring_cost_deferred", True), ("monitoring_cost_sync", False)):
    # Deferred tasks do not count against max_active_tasks, blocking ones do: all N may run at once.
    with DAG(dag_id, schedule=None, max_active_tasks=JOBS, max_active_runs=1, tags=["benchmark"]):
        TrainingJobOperator.partial(
            task_id="train",
            backend_config=BACKEND_CONFIG,
            output_root="/mnt/output",
            deferrable=deferrable,
            poll_interval=POLL_INTERVAL,
        ).expand(spec=[SPEC] * JOBS)
