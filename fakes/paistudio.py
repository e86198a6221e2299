"""PAI Studio 2022-01-12 emulator: resource quotas and the workloads queued on them (ROA).

A test makes a quota with so many allocatable and allocated GPUs, frees capacity while a sensor
waits (``set_allocated``), and queues workloads to see queue positions.

Wire facts from the SDK: every ResourceAmount field is a string (``"GPU": "64"``), except
GPUMemoryBytes; QueueInfo.Position and Priority are integers. QueueInfo has two statuses: ``Status``
is the workload's place in the queue (the reference's example: ``Enqueued``; ``Dequeued`` once it
left the queue) and ``WorkloadStatus`` is the product's own status of the job (for DLC e.g.
``Queuing``). ListQuotaWorkloads' ``Status`` parameter filters on the former,
``WorkloadStatuses`` (comma-separated) on the latter.

Decisions where the service's behaviour is not documented:

- An unknown quota answers 404 ``QuotaNotFound`` (no error code is documented); a RAM denial
  answers 403 ``Forbidden.RAM``.
- QuotaDetails: AllocatableQuota is what the quota holds; AllocatedQuota and UsedQuota (its
  deprecated twin) what running workloads hold; RequestedQuota what dequeued workloads hold
  (= allocated here); SelfSubmittedQuota adds the queued workloads; SystemReservedQuota is zero,
  so ActualMinQuota = DesiredMinQuota = AllocatableQuota. CPU and memory follow the GPUs
  (16 cores and 200 GiB per GPU).
- Positions count from 1 over the quota's Enqueued workloads in the order they were added;
  workloads that left the queue have no Position. ``BeforeWorkloadId`` keeps the Enqueued
  workloads ahead of the given one. PageSize defaults to 10 (the SDK documents no default or
  maximum); TotalCount is "the number of instances that match the filter conditions" (SDK
  response docstring), whatever the page. Filters not listed in
  ``WORKLOAD_PARAMETERS`` are refused with 400 ``InvalidParameter`` rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alibabacloud_paistudio20220112 import models as studio_models

from fakes.base import ApiError, ApiRequest, iso_utc
from fakes.ram import RamAuthorizedEmulator

if TYPE_CHECKING:
    from collections.abc import Mapping

CPU_PER_GPU = 16
MEMORY_GIB_PER_GPU = 200
DEFAULT_PAGE_SIZE = 10
WORKLOAD_PARAMETERS = frozenset(
    {
        "Status",
        "WorkloadStatuses",
        "WorkloadIds",
        "WorkloadType",
        "BeforeWorkloadId",
        "ShowOwn",
        "PageNumber",
        "PageSize",
    }
)


@dataclass
class EmulatedQuota:
    quota_id: str
    name: str
    resource_type: str
    gpu_type: str | None
    allocatable_gpus: int
    allocated_gpus: int
    status: str
    created_at: float


@dataclass
class QueuedWorkload:
    """A workload on a quota: ``status`` is its queue status, ``workload_status`` the product's."""

    workload_id: str
    quota_id: str
    status: str
    workload_status: str
    gpus: int
    gpu_type: str | None
    priority: int
    workload_type: str
    name: str
    enqueued_at: float
    workspace_id: str = "ws-test"
    #: QueueInfo's Reason: why the workload waits (the SDK documents the field, not its values).
    reason: str = ""


class PaiStudioEmulator(RamAuthorizedEmulator):
    """PAI Studio: GetQuota and ListQuotaWorkloads."""

    api_version = "2022-01-12"

    def __init__(self, access_keys: Mapping[str, str | None] | None = None) -> None:
        super().__init__(access_keys)
        self.quotas: dict[str, EmulatedQuota] = {}
        self.workloads: list[QueuedWorkload] = []
        quota = "/api/v1/quotas/{QuotaId}"
        self.add_roa_route("GET", quota, "GetQuota", self._get_quota, studio_models.GetQuotaResponseBody)
        self.add_roa_route(
            "GET",
            f"{quota}/workloads",
            "ListQuotaWorkloads",
            self._list_quota_workloads,
            studio_models.ListQuotaWorkloadsResponseBody,
        )

    # ----------------------------------------------------------------------------- setup

    def add_quota(
        self,
        quota_id: str,
        resource_type: str = "Lingjun",
        gpu_type: str | None = "GU8TF",
        allocatable_gpus: int = 64,
        allocated_gpus: int = 0,
        name: str | None = None,
        status: str = "Ready",
    ) -> None:
        """A quota holding ``allocatable_gpus`` GPUs of which ``allocated_gpus`` are in use."""
        with self._lock:
            self.quotas[quota_id] = EmulatedQuota(
                quota_id,
                name or quota_id,
                resource_type,
                gpu_type,
                allocatable_gpus,
                allocated_gpus,
                status,
                self.clock(),
            )

    def set_allocated(self, quota_id: str, gpus: int) -> None:
        """Change how many GPUs running workloads hold, e.g. to free capacity while a sensor waits."""
        with self._lock:
            self.quotas[quota_id].allocated_gpus = gpus

    def add_workload(
        self,
        quota_id: str,
        workload_id: str,
        status: str = "Enqueued",
        gpus: int = 8,
        workload_status: str = "Queuing",
        priority: int = 1,
        workload_type: str = "dlc",
        name: str | None = None,
        reason: str = "",
    ) -> None:
        """Queue a workload on the quota (``status="Dequeued"`` for one that already left the queue);
        ``reason`` is QueueInfo's Reason, why it waits."""
        with self._lock:
            quota = self.quotas[quota_id]
            self.workloads.append(
                QueuedWorkload(
                    workload_id,
                    quota_id,
                    status,
                    workload_status,
                    gpus,
                    quota.gpu_type,
                    priority,
                    workload_type,
                    name or workload_id,
                    self.clock(),
                    reason=reason,
                )
            )

    def clear_workloads(self, quota_id: str | None = None) -> None:
        """Drop the workloads of one quota (of every quota when None)."""
        with self._lock:
            self.workloads = [w for w in self.workloads if quota_id is not None and w.quota_id != quota_id]

    # ----------------------------------------------------------------------------- handlers

    def _quota(self, request: ApiRequest) -> EmulatedQuota:
        quota_id = request.path_params["QuotaId"]
        if quota_id not in self.quotas:
            raise ApiError(404, "QuotaNotFound", f"Quota {quota_id} is not found.")
        return self.quotas[quota_id]

    def _get_quota(self, request: ApiRequest) -> dict[str, Any]:
        quota = self._quota(request)
        body: dict[str, Any] = {
            "QuotaId": quota.quota_id,
            "QuotaName": quota.name,
            "ResourceType": quota.resource_type,
            "Status": quota.status,
            "QueueStrategy": "PaiStrategyIntelligent",
            "GmtCreatedTime": iso_utc(quota.created_at),
            "GmtModifiedTime": iso_utc(quota.created_at),
            "QuotaDetails": self._details(quota),
        }
        if quota.gpu_type:
            body["GPUType"] = quota.gpu_type
        return body

    def _details(self, quota: EmulatedQuota) -> dict[str, dict[str, str]]:
        queued = sum(w.gpus for w in self._workloads_of(quota.quota_id) if w.status == "Enqueued")
        allocatable = _amount(quota.allocatable_gpus, quota.gpu_type)
        allocated = _amount(quota.allocated_gpus, quota.gpu_type)
        return {
            "ActualMinQuota": allocatable,
            "DesiredMinQuota": allocatable,
            "AllocatableQuota": allocatable,
            "AllocatedQuota": allocated,
            "UsedQuota": allocated,
            "RequestedQuota": allocated,
            "SelfAllocatedQuota": allocated,
            "SelfSubmittedQuota": _amount(quota.allocated_gpus + queued, quota.gpu_type),
            "SystemReservedQuota": _amount(0, quota.gpu_type),
        }

    def _list_quota_workloads(self, request: ApiRequest) -> dict[str, Any]:
        quota, query = self._quota(request), request.query
        unsupported = sorted(query.keys() - WORKLOAD_PARAMETERS)
        if unsupported:
            raise ApiError(
                400, "InvalidParameter", f"ListQuotaWorkloads parameters {unsupported} are not emulated."
            )
        positions = self._positions(quota.quota_id)
        matching = [w for w in self._workloads_of(quota.quota_id) if _matches(w, query)]
        if query.get("BeforeWorkloadId"):
            limit = positions.get(query["BeforeWorkloadId"], 0)
            matching = [w for w in matching if 0 < positions.get(w.workload_id, 0) < limit]
        number = _int_param(query, "PageNumber", 1)
        size = _int_param(query, "PageSize", DEFAULT_PAGE_SIZE)
        page = matching[(number - 1) * size : number * size]
        return {
            "Workloads": [_queue_info(w, positions.get(w.workload_id)) for w in page],
            "TotalCount": len(matching),
        }

    def _workloads_of(self, quota_id: str) -> list[QueuedWorkload]:
        return [w for w in self.workloads if w.quota_id == quota_id]

    def _positions(self, quota_id: str) -> dict[str, int]:
        """Queue position (from 1) of each Enqueued workload of the quota, in the order they were added."""
        queued = [w for w in self._workloads_of(quota_id) if w.status == "Enqueued"]
        return {w.workload_id: index for index, w in enumerate(queued, start=1)}


def _amount(gpus: int, gpu_type: str | None) -> dict[str, str]:
    """A ResourceAmount in wire shape: every amount a string, CPU and memory following the GPUs."""
    amount = {"CPU": str(gpus * CPU_PER_GPU), "GPU": str(gpus), "Memory": f"{gpus * MEMORY_GIB_PER_GPU}Gi"}
    if gpu_type:
        amount["GPUType"] = gpu_type
    return amount


def _queue_info(workload: QueuedWorkload, position: int | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "WorkloadId": workload.workload_id,
        "WorkloadName": workload.name,
        "WorkloadType": workload.workload_type,
        "WorkloadStatus": workload.workload_status,
        "Status": workload.status,
        "QuotaId": workload.quota_id,
        "Priority": workload.priority,
        "WorkspaceId": workload.workspace_id,
        "GmtCreatedTime": iso_utc(workload.enqueued_at),
        "GmtEnqueuedTime": iso_utc(workload.enqueued_at),
        "Resource": _amount(workload.gpus, workload.gpu_type),
    }
    if position is not None:
        info["Position"] = position
    if workload.reason:
        info["Reason"] = workload.reason
    return info


def _matches(workload: QueuedWorkload, query: dict[str, str]) -> bool:
    """Status, WorkloadStatuses, WorkloadIds (comma-separated lists) and WorkloadType filters."""
    checks = (
        ("Status", workload.status),
        ("WorkloadStatuses", workload.workload_status),
        ("WorkloadIds", workload.workload_id),
        ("WorkloadType", workload.workload_type),
    )
    return all(not query.get(name) or value in query[name].split(",") for name, value in checks)


def _int_param(query: dict[str, str], name: str, default: int) -> int:
    try:
        value = int(query.get(name, default))
    except ValueError as exc:
        raise ApiError(400, "InvalidParameter", f"The parameter {name} must be an integer.") from exc
    if value < 1:
        raise ApiError(400, "InvalidParameter", f"The parameter {name} must be at least 1.")
    return value
