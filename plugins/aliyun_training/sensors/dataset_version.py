"""Wait for a scheduled run's dataset version to land, without holding a worker slot."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from aliyun_training.plan.models import DatasetPlan
from aliyun_training.stage_records import OutcomeStatus
from aliyun_training.triggers.dataset_version import DatasetVersionTrigger
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context


class DatasetVersionSensor(ReturnedRecordsMixin, BaseSensorOperator):
    """Succeeds once the plan's version has landed; a run with nothing to wait for passes at once.

    A scheduled run waits for its version (``DatasetPlan.wait_uri``); a version a run takes without
    waiting (named in the form, or the newest) was seen landed when the run was planned
    (``plan.resolve.choose_version``), except that a marker-less one can only be seen settling
    there: this task takes the second look it needs. A version has landed when its completion
    marker (``wait_marker``) exists, or, with none declared, when two looks a poll apart list the
    same objects, none of an upload in progress (``staging.versions.look_at_version``). The wait
    runs in the triggerer; when the version has not landed after the dataset's ``wait_minutes`` the
    task is skipped, and the run with it, saying what it waited for: the next period's run trains on
    the next version. With ``wait_minutes`` 0 the first look decides, without deferring (a
    marker-less version, which no single look lands, is then always skipped).

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
        """One look, passing only on the marker: a marker-less version needs two looks a poll apart,
        which the trigger takes."""
        from aliyun_training.staging.versions import check_landing

        plan = self.plan
        if not plan.wait_uri:
            self.log.info("Version %s of %s: nothing to wait for", plan.version, plan.name)
            return True
        if plan.wait_marker is None:
            self.log.info(
                "No completion marker is declared (dataset.version.marker: null): %s has landed once two "
                "listings %ss apart are the same and hold no upload in progress",
                plan.wait_uri,
                self.poke_interval,
            )
            return False
        check = check_landing(plan.wait_uri, plan.wait_marker, plan.alibaba_cloud_conn_id)
        self.log.info("%s", check.message)
        return check.landed

    def execute(self, context: Context) -> None:
        if self.poke(context):
            return
        plan = self.plan
        assert plan.wait_uri is not None, "poke passes a plan without a version to wait for"
        if not plan.wait_minutes:
            raise AirflowSkipException(self._not_landed(plan))
        self.defer(
            trigger=DatasetVersionTrigger(
                source_uri=plan.wait_uri,
                alibaba_cloud_conn_id=plan.alibaba_cloud_conn_id,
                marker=plan.wait_marker,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(minutes=plan.wait_minutes),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event["status"] != OutcomeStatus.SUCCEEDED:
            raise AirflowException(f"Waiting for the dataset version failed: {event['message']}")
        self.log.info("%s", event["message"])

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        from airflow.sdk.exceptions import AirflowSensorTimeout, TaskDeferralTimeout

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, AirflowSensorTimeout):  # a sensor's deferral timeout is the latter
            raise AirflowSkipException(self._not_landed(self.plan)) from None

    def _not_landed(self, plan: DatasetPlan) -> str:
        """Why the run is skipped: what never appeared, and the fix."""
        folder = (plan.wait_uri or "").rstrip("/") + "/"
        if plan.wait_marker is not None:
            missing = f"its completion marker {folder}{plan.wait_marker} never appeared"
            fix = (
                f"have the upload write {plan.wait_marker} last, or set dataset.version.marker: null "
                "to wait for an unchanged listing instead"
            )
        else:
            missing = (
                f"no two looks {self.poke_interval:g}s apart listed the same objects without an upload "
                "in progress (dataset.version.marker is null)"
            )
            fix = "have the upload write an empty _SUCCESS last and set dataset.version.marker: _SUCCESS"
        return (
            f"version {plan.version} of {plan.name} did not land in {folder} within "
            f"{plan.wait_minutes} minutes: {missing}; this run is skipped (fix: {fix}; then clear "
            "this task, or trigger a run naming an existing version)"
        )
