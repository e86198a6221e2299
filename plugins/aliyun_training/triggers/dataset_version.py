"""Waits in the triggerer until a dataset version has landed in its source."""

from __future__ import annotations

import asyncio

from aliyun_training.records import OutcomeStatus, TriggerOutcome
from aliyun_training.triggers.base import PollingTrigger


class DatasetVersionTrigger(PollingTrigger):
    """Lists the version's folder every ``poll_interval`` seconds until it holds an object.

    Nothing is started, so there is nothing to stop; the listing runs in a thread (oss2 is blocking).
    """

    def __init__(self, source_uri: str, alibaba_cloud_conn_id: str, poll_interval: float = 300.0) -> None:
        super().__init__()
        self.source_uri = source_uri
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self.poll_interval = poll_interval

    @property
    def subject(self) -> str:
        return f"dataset version {self.source_uri}"

    async def poll(self) -> TriggerOutcome[str] | None:
        from aliyun_training.staging.versions import version_landed

        if await asyncio.to_thread(version_landed, self.source_uri, self.alibaba_cloud_conn_id):
            return self.outcome(OutcomeStatus.SUCCEEDED)
        self.log.info("%s has not landed yet; looking again in %ss", self.source_uri, self.poll_interval)
        return None

    def outcome(self, status: OutcomeStatus, message: str = "") -> TriggerOutcome[str]:
        return TriggerOutcome[str](status=status, handle=self.source_uri, message=message)

    async def stop(self) -> None:
        """A wait starts nothing."""
