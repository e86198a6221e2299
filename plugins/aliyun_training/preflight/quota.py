"""Is there room for the job in its PAI resource quota? (PAI Studio SDK)

A job that does not fit waits in Queuing with no message; a quota of the wrong resource type or
GPU model never runs it at all. Free GPUs are derived in ``free_gpus`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.preflight.report import Finding, Verdict
from aliyun_training.spec import TrainingJobSpec


@dataclass(frozen=True)
class Capacity:
    """A quota's GPUs: what it can hold, what is allocated now, and what is therefore free."""

    allocatable: int
    allocated: int

    @property
    def free(self) -> int:
        return max(self.allocatable - self.allocated, 0)

    def describe(self) -> str:
        return (
            f"{self.free} free GPUs "
            f"(AllocatableQuota.GPU {self.allocatable} - AllocatedQuota.GPU {self.allocated})"
        )


def free_gpus(quota: Any) -> Capacity:
    """Free GPUs of a quota = AllocatableQuota.GPU - AllocatedQuota.GPU.

    No document states this formula; it is derived from the GetQuota fields (allocatable: what the
    quota may hold; allocated: what running workloads hold now) and logged with both inputs, so a
    wrong derivation is visible. GPU amounts are strings in the API.
    """
    details = quota.quota_details
    allocatable = details.allocatable_quota if details else None
    allocated = details.allocated_quota if details else None
    return Capacity(
        allocatable=int(float(allocatable.gpu or 0)) if allocatable else 0,
        allocated=int(float(allocated.gpu or 0)) if allocated else 0,
    )


def get_quota(hook: AlibabaCloudHook, quota_id: str) -> Any | None:
    from alibabacloud_paistudio20220112 import models

    try:
        return hook.call(
            "GetQuota", lambda: hook.client("paistudio").get_quota(quota_id, models.GetQuotaRequest())
        ).body
    except AlibabaCloudApiError as exc:
        if "NotFound" in exc.code or exc.code == "HTTP404":
            return None
        raise


def quota_gpu_type(quota: Any) -> str | None:
    details = quota.quota_details
    allocatable = details.allocatable_quota if details else None
    return quota.gputype or (allocatable.gputype if allocatable else None)


def check_quota(hook: AlibabaCloudHook, spec: TrainingJobSpec) -> list[Finding]:
    """The quota exists, has the right resource type and GPU model, and can hold the job."""
    if not spec.quota_id:
        return [Finding(check="quota", verdict=Verdict.PASS, found="no quota: pay-as-you-go ECS resources")]
    quota = get_quota(hook, spec.quota_id)
    if quota is None:
        return [
            Finding(
                check="quota",
                verdict=Verdict.FAIL,
                found=f"quota {spec.quota_id} does not exist in {hook.region}",
                fix="use a quota id from the PAI console (Resource Quota) of this region",
            )
        ]
    findings = []
    wanted_type = spec.resource_type.value
    actual_type = (quota.resource_type or "").lower()
    if actual_type != wanted_type:
        findings.append(
            Finding(
                check="quota_type",
                verdict=Verdict.FAIL,
                found=f"quota {spec.quota_id} holds {quota.resource_type} resources, "
                f"the job asks for {wanted_type}",
                fix=f"set resource_type to {actual_type} or use a {wanted_type} quota",
            )
        )
    gpu_type = quota_gpu_type(quota)
    if spec.gpus_per_node and spec.gpu_type and gpu_type and gpu_type != spec.gpu_type:
        findings.append(
            Finding(
                check="gpu_type",
                verdict=Verdict.FAIL,
                found=f"quota {spec.quota_id} has {gpu_type} GPUs, the job asks for {spec.gpu_type}",
                fix=f"set gpu_type to {gpu_type} or use a quota with {spec.gpu_type}",
            )
        )
    findings.append(_check_capacity(spec, free_gpus(quota)))
    return findings


def _check_capacity(spec: TrainingJobSpec, capacity: Capacity) -> Finding:
    needed = spec.nodes * spec.gpus_per_node
    if needed <= capacity.free:
        return Finding(
            check="quota_capacity", verdict=Verdict.PASS, found=f"{needed} GPUs needed, {capacity.describe()}"
        )
    if needed > capacity.allocatable:
        return Finding(
            check="quota_capacity",
            verdict=Verdict.FAIL,
            found=f"{needed} GPUs needed but quota {spec.quota_id} holds at most {capacity.allocatable}",
            fix="lower nodes or gpus_per_node, or enlarge the quota",
        )
    return Finding(
        check="quota_capacity",
        verdict=Verdict.WARN,
        found=f"{needed} GPUs needed, {capacity.describe()} right now",
        fix="the job will wait for capacity (wait_for_capacity) or queue; lower nodes to start sooner",
    )


def queue_request() -> Any:
    """ListQuotaWorkloads asking only for the count of workloads still in the queue.

    ``Status`` filters on the queue status (Enqueued / Dequeued), not on the workload's own status.
    TotalCount counts every match whatever the page size, so one page of one item is all it takes:
    nothing here is paged, because no workload is read.
    """
    from alibabacloud_paistudio20220112 import models

    return models.ListQuotaWorkloadsRequest(status="Enqueued", page_size=1)


def queued_workloads(hook: AlibabaCloudHook, quota_id: str) -> int:
    """How many workloads wait in the quota's queue."""
    request = queue_request()
    body = hook.call(
        "ListQuotaWorkloads", lambda: hook.client("paistudio").list_quota_workloads(quota_id, request)
    ).body
    return int(body.total_count or 0)


def waiting_message(quota_id: str, capacity: Capacity, gpus: int, queued: int) -> str:
    """What a capacity wait logs at each poll (the sensor's poke and its trigger alike)."""
    return f"Waiting for quota {quota_id}: {capacity.describe()}, {gpus} needed, {queued} workloads queued"


def room_message(quota_id: str, capacity: Capacity, gpus: int) -> str:
    return f"Quota {quota_id} has room: {capacity.describe()} for {gpus}"
