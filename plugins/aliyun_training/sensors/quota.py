"""Wait until the job's PAI resource quota has enough free GPUs, without holding a worker slot."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.plan.models import JobPlan
from aliyun_training.triggers.quota import QuotaCapacityTrigger
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context


class QuotaCapacitySensor(ReturnedRecordsMixin, BaseSensorOperator):
    """Succeeds once the job's quota can hold nodes x gpus_per_node GPUs.

    Deferrable by default: the wait runs in the triggerer, which logs the free count and the queue
    length at each poll. ``timeout`` bounds the wait (``soft_fail=True`` skips instead of failing);
    a job without a quota (or not on DLC) passes at once.

    :param job: the run plan's ``JobPlan`` (or its dict form, or an XComArg of it; templated): the
        spec names the GPUs; the DLC backend settings name the connection, the region and, in their
        ``job_settings``, the quota.
    """

    template_fields = ("job",)

    def __init__(
        self,
        *,
        job: JobPlan | dict[str, Any],
        deferrable: bool = True,
        poke_interval: float = 60.0,
        timeout: float = 6 * 3600,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, timeout=timeout, **kwargs)
        self.job = job.model_dump(mode="json") if isinstance(job, JobPlan) else job
        self.deferrable = deferrable

    @property
    def plan(self) -> JobPlan:
        return validate_record(JobPlan, self.job)

    def _needs(self) -> tuple[str | None, int]:
        """The quota DLC's job settings name (None: none to wait for) and the GPUs the spec needs."""
        from aliyun_training.backends.dlc.request import DlcJobSettings

        plan = self.plan
        quota_id = DlcJobSettings.from_backend_config(plan.backend_config).quota_id
        return quota_id, plan.spec.nodes * plan.spec.gpus_per_node

    def _connection(self) -> tuple[str, str | None]:
        config = self.plan.backend_config
        return config.get("alibaba_cloud_conn_id", ALIBABA_CLOUD_DEFAULT_CONN_ID), config.get("region")

    def _hook(self) -> Any:
        from aliyun_training.hooks.paistudio import PaiStudioHook

        conn_id, region = self._connection()
        return PaiStudioHook(conn_id, region)

    def poke(self, context: Context) -> bool:
        from aliyun_training.preflight.quota import room_message, waiting_message

        quota_id, gpus = self._needs()
        if not quota_id or not gpus:
            self.log.info(
                "No quota to wait for (backend %s, quota %s)", self.plan.spec.backend.value, quota_id
            )
            return True
        state = self._hook().quota_capacity(quota_id)
        if state is None:
            raise AirflowException(f"quota {quota_id} does not exist")
        if state.capacity.free >= gpus:
            self.log.info("%s", room_message(quota_id, state.capacity, gpus))
            return True
        self.log.info("%s", waiting_message(quota_id, state.capacity, gpus, state.queued))
        return False

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        quota_id, gpus = self._needs()
        self.defer(
            trigger=QuotaCapacityTrigger(
                quota_id=quota_id,  # type: ignore[arg-type]  # poke returned True without one
                gpus=gpus,
                conn_id=self._connection()[0],
                region=self._connection()[1],
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event["status"] != "success":
            raise AirflowException(f"Waiting for quota capacity failed: {event['message']}")
        return event
