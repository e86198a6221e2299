"""Who owns what this package creates: a task's job owner, and the registry as the installation sees it.

Several Airflow deployments (staging and production, one per team) may share one PAI workspace,
ACK namespace and OSS buckets. Each job carries its owner (``spec.JobOwner``): the installation
and the task instance that launched it. The reconciler, a failed run's callback and reattaching by
name act only on jobs whose owner names this installation, and the job name is derived from it,
so two deployments running the same scheduled run never share a job, its outputs or its artifacts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.installation import installation_id
from aliyun_training.spec import JobOwner

if TYPE_CHECKING:
    from aliyun_training.model_registry.base import ModelRegistry
    from aliyun_training.plan.models import ArtifactsPlan


def installation_registry(plan: ArtifactsPlan) -> ModelRegistry | None:
    """The plan's model registry as this installation sees it, with its own champion pointer (its
    SDK imported only when used); None where the plan names no registry."""
    if plan.registry is None:
        return None
    from aliyun_training.model_registry import open_registry

    return open_registry(plan.registry, installation_id())


def task_owner(ti: Any, installation: str) -> JobOwner:
    """The owner of the jobs task instance ``ti`` launches in its current try."""
    return JobOwner(
        installation=installation,
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=ti.map_index if ti.map_index is not None else -1,
        try_number=ti.try_number,
    )
