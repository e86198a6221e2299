"""Wait for a scheduled run's dataset version to land, without holding a worker slot."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from aliyun_training.plan.models import DatasetPlan
from aliyun_training.records import OutcomeStatus
from aliyun_training.triggers.dataset_version import DatasetVersionTrigger
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context


class DatasetVersionSensor(BaseSensorOperator):
    """Succeeds once the plan's version is in its source; a run with nothing to wait for passes at once.

    Only scheduled runs wait (``DatasetPlan.wait_uri``): a version a user names must exist when the
    run is planned. The wait runs in the triggerer; when the version has not landed after the
    dataset's ``wait_minutes`` the task is skipped, and the run with it, saying which version it
    waited for: the next period's run trains on the next version.

    :param dataset: the run plan's ``DatasetPlan`` (templated), whose connection lists an OSS source.
    """

    template_fields = ("dataset",)

    def __init__(
        self, *, dataset: DatasetPlan | dict[str, Any], poke_interval: float = 300.0, **kwargs: Any
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.dataset = dataset.model_dump(mode="json") if isinstance(dataset, DatasetPlan) else dataset

    @property
    def plan(self) -> DatasetPlan:
        return validate_record(DatasetPlan, self.dataset)

    def poke(self, context: Context) -> bool:
        from aliyun_training.staging.versions import version_landed

        plan = self.plan
        if not plan.wait_uri:
            self.log.info("Version %s of %s: nothing to wait for", plan.version, plan.name)
            return True
        landed = version_landed(plan.wait_uri, plan.alibaba_cloud_conn_id)
        self.log.info("%s %s", plan.wait_uri, "has landed" if landed else "has not landed yet")
        return landed

    def execute(self, context: Context) -> None:
        if self.poke(context):
            return
        plan = self.plan
        assert plan.wait_uri is not None, "poke passes a plan without a version to wait for"
        self.defer(
            trigger=DatasetVersionTrigger(plan.wait_uri, plan.alibaba_cloud_conn_id, self.poke_interval),
            method_name="execute_complete",
            timeout=timedelta(minutes=plan.wait_minutes),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event["status"] != OutcomeStatus.SUCCEEDED:
            raise AirflowException(f"Waiting for the dataset version failed: {event['message']}")

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        from airflow.sdk.exceptions import AirflowSensorTimeout, TaskDeferralTimeout

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, AirflowSensorTimeout):  # a sensor's deferral timeout is the latter
            plan = self.plan
            raise AirflowSkipException(
                f"version {plan.version} of {plan.name} did not land in {plan.wait_uri} within "
                f"{plan.wait_minutes} minutes; this run is skipped (fix: upload it and clear this task, "
                "or trigger a run naming an existing version)"
            ) from None
