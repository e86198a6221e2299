"""Waits in the triggerer until a PAI resource quota has room for a job."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class QuotaCapacityTrigger(BaseTrigger):
    """Polls the quota (``PaiStudioHook.aquota_capacity``: GetQuota and its queue) until ``gpus`` GPUs
    are free; an unknown quota ends the wait with an error, as the sensor's poke fails on one."""

    def __init__(
        self,
        quota_id: str,
        gpus: int,
        conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID,
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
        from aliyun_training.hooks.alibaba_cloud import shared_hook
        from aliyun_training.hooks.paistudio import PaiStudioHook
        from aliyun_training.preflight.quota import room_message, waiting_message

        hook = shared_hook(PaiStudioHook, self.conn_id, self.region)
        try:
            while True:
                state = await hook.aquota_capacity(self.quota_id)
                if state is None:
                    yield TriggerEvent(
                        {"status": "error", "message": f"quota {self.quota_id} does not exist"}
                    )
                    return
                capacity = state.capacity
                if capacity.free >= self.gpus:
                    self.log.info("%s", room_message(self.quota_id, capacity, self.gpus))
                    yield TriggerEvent(
                        {"status": "success", "free": capacity.free, "allocatable": capacity.allocatable}
                    )
                    return
                self.log.info("%s", waiting_message(self.quota_id, capacity, self.gpus, state.queued))
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
