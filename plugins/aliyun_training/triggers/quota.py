"""Waits in the triggerer until a PAI resource quota has room for a job."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class QuotaCapacityTrigger(BaseTrigger):
    """Polls GetQuota (and the queue through ListQuotaWorkloads) until ``gpus`` GPUs are free."""

    def __init__(
        self,
        quota_id: str,
        gpus: int,
        conn_id: str = "alibaba_cloud_default",
        region: str | None = None,
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__()
        self.quota_id = quota_id
        self.gpus = gpus
        self.conn_id = conn_id
        self.region = region
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "quota_id": self.quota_id,
                "gpus": self.gpus,
                "conn_id": self.conn_id,
                "region": self.region,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from alibabacloud_paistudio20220112 import models

        from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
        from aliyun_training.preflight.quota import free_gpus, queue_request, room_message, waiting_message

        hook = AlibabaCloudHook(self.conn_id, region=self.region)
        try:
            await hook.aload()
            client = hook.client("paistudio")
            while True:
                quota = (
                    await hook.acall(
                        "GetQuota", lambda: client.get_quota_async(self.quota_id, models.GetQuotaRequest())
                    )
                ).body
                capacity = free_gpus(quota)
                if capacity.free >= self.gpus:
                    self.log.info("%s", room_message(self.quota_id, capacity, self.gpus))
                    yield TriggerEvent(
                        {"status": "success", "free": capacity.free, "allocatable": capacity.allocatable}
                    )
                    return
                request = queue_request()
                queued = (
                    await hook.acall(
                        "ListQuotaWorkloads",
                        lambda request=request: client.list_quota_workloads_async(self.quota_id, request),
                    )
                ).body.total_count
                self.log.info("%s", waiting_message(self.quota_id, capacity, self.gpus, int(queued or 0)))
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
