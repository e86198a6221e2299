"""The most GPU-hours a run can use: every job it may start, with every try its task may take.

A dry run is for deciding a spend, so its ceiling counts what the run can really start, not one
try of the training job: the image check (one GPU), the two-node RDMA bandwidth check, a prepare
job (CPU only) and the training job, each as often as its task may try (``RunPlan.job_tries``),
each try as long as its timeout. The training job's tries together stop at the run's
``max_gpu_hours`` (the monitor stops the job there), so that budget caps its share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.monitor import TRAIN_POLL_SECONDS, monitoring_rate
from aliyun_training.plan.requests import PlannedJob, planned_jobs
from aliyun_training.task_ids import TRAIN

if TYPE_CHECKING:
    from aliyun_training.plan.models import RunPlan


def cost_ceiling(plan: RunPlan) -> dict[str, Any]:
    """``jobs``: each job's size, tries and GPU-hours at most; ``gpu_hours``: their sum; with the
    environment's ``price_per_gpu_hour``, ``money`` in its ``currency`` as well."""
    jobs = [_job_ceiling(job, plan.backend) for job in planned_jobs(plan)]
    hours = round(sum(job["gpu_hours"] for job in jobs), 3)
    if plan.price is None:
        return {"jobs": jobs, "gpu_hours": hours}
    price = plan.price
    money = {"money": round(hours * price.per_gpu_hour, 2), "currency": price.currency}
    return {"jobs": jobs, "gpu_hours": hours, "price_per_gpu_hour": price.per_gpu_hour, **money}


def _job_ceiling(job: PlannedJob, backend: str) -> dict[str, Any]:
    spec = job.spec
    per_try = spec.nodes * spec.gpus_per_node * spec.timeout_minutes / 60
    every_try = per_try * job.tries
    hours = every_try if job.budget is None else min(every_try, job.budget)
    return {
        "task": job.task,
        "nodes": spec.nodes,
        "gpus_per_node": spec.gpus_per_node,
        "timeout_minutes": spec.timeout_minutes,
        "tries": job.tries,
        "gpu_hours_per_try": round(per_try, 3),
        "gpu_hours": round(hours, 3),
        **({"capped_by": "max_gpu_hours"} if hours < every_try else {}),
        **({"monitoring": _monitoring(backend, spec.nodes)} if job.task == TRAIN else {}),
    }


def _monitoring(backend: str, nodes: int) -> dict[str, float]:
    """The training job's monitoring: API requests a minute while it runs steadily, alone in the
    triggerer and among a fleet sharing its listing (``monitor.monitoring_rate``)."""
    rate = monitoring_rate(backend, nodes, TRAIN_POLL_SECONDS)
    return {
        "requests_per_minute_alone": round(rate.alone, 2),
        "requests_per_minute_in_fleet": round(rate.in_fleet, 2),
    }
