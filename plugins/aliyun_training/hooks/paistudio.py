"""PAI Studio 2022-01-12 (resource quotas) through the ``alibaba_cloud`` connection.

:meth:`PaiStudioHook.quota_capacity` and its async twin are the one look at a quota that the
preflight quota check, the ``QuotaCapacitySensor`` and the ``QuotaCapacityTrigger`` share: the
quota, its free GPUs and its queue, with one rule for a quota that does not exist (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook, abody


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


@dataclass(frozen=True)
class QuotaCapacity:
    """One look at a quota: GetQuota's body, its GPUs, and how many workloads wait in its queue."""

    quota: Any
    capacity: Capacity
    queued: int


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


def quota_missing(code: str) -> bool:
    """GetQuota's answer for an unknown quota: no code is documented, so any NotFound or a bare 404."""
    return "NotFound" in code or code == "HTTP404"


class PaiStudioHook(AlibabaCloudHook):
    """Resource quotas: GetQuota and ListQuotaWorkloads; ``a*`` methods are the async twins."""

    hook_name = "Alibaba Cloud PAI Studio"
    service = "paistudio"

    def get_quota(self, quota_id: str) -> Any | None:
        """GetQuota's body, or None when the quota does not exist."""
        return self.call_or_none(
            "GetQuota", lambda: self.conn.get_quota(quota_id, _quota_request()).body, quota_missing
        )

    async def aget_quota(self, quota_id: str) -> Any | None:
        return await self.acall_or_none(
            "GetQuota", lambda: abody(self.conn.get_quota_async(quota_id, _quota_request())), quota_missing
        )

    def queued_workloads(self, quota_id: str) -> int:
        """How many workloads wait in the quota's queue."""
        body = self.call(
            "ListQuotaWorkloads", lambda: self.conn.list_quota_workloads(quota_id, queue_request()).body
        )
        return int(body.total_count or 0)

    async def aqueued_workloads(self, quota_id: str) -> int:
        body = await self.acall(
            "ListQuotaWorkloads",
            lambda: abody(self.conn.list_quota_workloads_async(quota_id, queue_request())),
        )
        return int(body.total_count or 0)

    def queue_info(self, quota_id: str, workload_id: str) -> Any | None:
        """The QueueInfo of one workload (a DLC job's id is its workload id) while it waits in the
        quota's queue: its Position, Reason and GmtEnqueuedTime; None once it left the queue. One
        attempt: the next poll asks again."""
        body = self.call_once_only(
            "ListQuotaWorkloads",
            lambda: self.conn.list_quota_workloads(quota_id, _workload_request(workload_id)).body,
        )
        return _enqueued(body)

    async def aqueue_info(self, quota_id: str, workload_id: str) -> Any | None:
        body = await self.acall_once_only(
            "ListQuotaWorkloads",
            lambda: abody(self.conn.list_quota_workloads_async(quota_id, _workload_request(workload_id))),
        )
        return _enqueued(body)

    def quota_capacity(self, quota_id: str) -> QuotaCapacity | None:
        """The quota, its free GPUs and its queue; None when the quota does not exist."""
        quota = self.get_quota(quota_id)
        if quota is None:
            return None
        return QuotaCapacity(quota, free_gpus(quota), self.queued_workloads(quota_id))

    async def aquota_capacity(self, quota_id: str) -> QuotaCapacity | None:
        quota = await self.aget_quota(quota_id)
        if quota is None:
            return None
        return QuotaCapacity(quota, free_gpus(quota), await self.aqueued_workloads(quota_id))


def queue_request() -> Any:
    """ListQuotaWorkloads asking only for the count of workloads still in the queue.

    ``Status`` filters on the queue status (Enqueued / Dequeued), not on the workload's own status.
    TotalCount counts every match whatever the page size, so one page of one item is all it takes:
    nothing here is paged, because no workload is read.
    """
    from alibabacloud_paistudio20220112 import models

    return models.ListQuotaWorkloadsRequest(status="Enqueued", page_size=1)


def _workload_request(workload_id: str) -> Any:
    from alibabacloud_paistudio20220112 import models

    return models.ListQuotaWorkloadsRequest(workload_ids=workload_id, status="Enqueued", page_size=1)


def _enqueued(body: Any) -> Any | None:
    """The first workload of a ListQuotaWorkloads answer, or None."""
    workloads = body.workloads or []
    return workloads[0] if workloads else None


def _quota_request() -> Any:
    from alibabacloud_paistudio20220112 import models

    return models.GetQuotaRequest()
