"""The jobs a run starts beside its training job (the prepare and evaluation stages): one node each."""

from __future__ import annotations

from typing import Any

from aliyun_training.spec import Framework, TrainingJobSpec


def side_job_spec(
    like: TrainingJobSpec | None,
    backend: str,
    *,
    command: str,
    cpu: int,
    memory_gib: int,
    timeout_minutes: int,
    env: dict[str, str],
    gpus: int = 0,
    **settings: Any,
) -> TrainingJobSpec:
    """One node running ``command``; on a cloud backend ``like`` the training job (its image and
    mounts, unless ``settings`` name others; DLC's quota, GPU model, ECS spec and priority come with
    the backend's settings), as one PyTorch replica without RDMA. A local one (``like`` None) takes
    its working and output directories from ``settings``."""
    base = like.model_dump(exclude={"min_nodes", "max_nodes", "output_dir"}) if like else {"backend": backend}
    fields = {
        **base,
        **settings,
        "framework": Framework.PYTORCH,
        "nodes": 1,
        "gpus_per_node": gpus,
        "cpu": cpu,
        "memory_gib": memory_gib,
        "shared_memory_gib": 0,
        "rdma": False,
        "command": command,
        "timeout_minutes": timeout_minutes,
        "env": env,
    }
    return TrainingJobSpec.parse(fields)
