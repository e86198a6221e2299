"""Waits in the triggerer until a dataset version has landed in its source."""

from __future__ import annotations

import asyncio

from aliyun_training.stage_records import OutcomeStatus, TriggerOutcome
from aliyun_training.triggers.base import PollingTrigger


class DatasetVersionTrigger(PollingTrigger):
    """Looks at the version's folder every ``poll_interval`` seconds until the version has landed.

    Each look is one request (``staging.versions.check_landing``): the ``marker`` object's HEAD, or,
    with no marker, the listing's first page, which must equal the previous look's. That digest is
    kept here between polls, not serialized: a trigger rebuilt elsewhere starts comparing afresh,
    which only delays the landing by one poll. Nothing is started, so there is nothing to stop; the
    look runs in a thread (oss2 is blocking).
    """

    def __init__(
        self,
        source_uri: str,
        alibaba_cloud_conn_id: str,
        marker: str | None = "_SUCCESS",
        poll_interval: float = 300.0,
    ) -> None:
        super().__init__()
        self.source_uri = source_uri
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self.marker = marker
        self.poll_interval = poll_interval
        self._previous: str | None = None

    @property
    def subject(self) -> str:
        return f"dataset version {self.source_uri}"

    async def poll(self) -> TriggerOutcome[str] | None:
        from aliyun_training.staging.versions import check_landing

        check = await asyncio.to_thread(
            check_landing, self.source_uri, self.marker, self.alibaba_cloud_conn_id, self._previous
        )
        self._previous = check.digest
        if check.landed:
            self.log.info("%s", check.message)
            return self.outcome(OutcomeStatus.SUCCEEDED, check.message)
        self.log.info("%s; looking again in %ss", check.message, self.poll_interval)
        return None

    def outcome(self, status: OutcomeStatus, message: str = "") -> TriggerOutcome[str]:
        return TriggerOutcome[str](status=status, handle=self.source_uri, message=message)

    async def stop(self) -> None:
        """A wait starts nothing."""
