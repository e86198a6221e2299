"""Stage a dataset version onto CPFS (or the local disk), then register it for the training job."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.operators.remote import RemoteRunMixin
from aliyun_training.plan.models import StagingPlan
from aliyun_training.staging.sources import StagingError
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context

    from aliyun_training.stage_records import StagedDataset

#: task_state_store key of a remote staging run, for stopping it after a timeout.
HANDLE_KEY = "staging_run_handle"


class DatasetStagingOperator(RemoteRunMixin, ReturnedRecordsMixin, BaseOperator):
    """Copy the version to ``<target_root>/<version>/``, verified and atomic; return a StagedDataset.

    Where the copy runs is the plan's ``mode``:

    - ``direct``: on this worker, which mounts the target (CPFS, or the local disk);
    - ``pod``: in a pod on ACK that mounts the CPFS claim (``remote`` holds the pod settings); the
      task defers while the pod copies;
    - ``dataflow``: CPFS imports from OSS itself through a data flow (``remote`` holds the file
      system and data flow ids); the task defers while the import runs.

    An already staged, unchanged version is not copied again, so backfills and retries are cheap.
    The plan's ``registration`` then makes the version mountable: a PAI dataset version for DLC, or
    a static PV and PVC for ACK (see ``aliyun_training.staging.registration``). Bad input fails
    without retries; a failed copy is retried and resumes.

    :param staging: the run plan's ``StagingPlan`` (or its dict form, or an XComArg of it;
        templated): source, target, version, mode, the remote stager's settings, the registration
        and the alibaba_cloud connection OSS, NAS and AIWorkspace are reached through.
    :param workers: objects or byte ranges copied in parallel on the worker (``direct``); a staging
        pod takes ``remote["workers"]``.
    :param poll_interval: seconds between checks of a remote staging run.
    :param staging_timeout: how long a remote run may take before it is stopped and the task fails.
    """

    template_fields = ("staging",)
    remote_kind = "staging"
    remote_key = HANDLE_KEY
    ui_color = "#b3e5fc"

    def __init__(
        self,
        *,
        staging: StagingPlan | dict[str, Any],
        workers: int = 16,
        poll_interval: float = 15.0,
        staging_timeout: timedelta = timedelta(hours=6),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.staging = staging.model_dump(mode="json") if isinstance(staging, StagingPlan) else staging
        self.workers = workers
        self.poll_interval = poll_interval
        self.staging_timeout = staging_timeout

    @property
    def plan(self) -> StagingPlan:
        """The staging part of the run plan, once templates are rendered."""
        try:
            return validate_record(StagingPlan, self.staging)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None

    def execute(self, context: Context) -> dict[str, Any]:
        plan = self.plan
        if plan.mode == "direct":
            return self._registered(plan, self._stage_here(plan))
        config = plan.remote_config()
        try:
            handle = self._stager(plan.mode, config).submit()
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info("Staging %s in mode %s: %s", plan.version, plan.mode, handle)
        self.defer_to_remote(context, plan.mode, config, handle, self.poll_interval, self.staging_timeout)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The remote run ended: turn it into a StagedDataset or fail with the run's own reason."""
        from aliyun_training.stage_records import OutcomeStatus

        plan = self.plan
        outcome = self.remote_outcome(event)
        if outcome.status is not OutcomeStatus.SUCCEEDED:
            raise AirflowException(f"{plan.mode} staging of {plan.version} failed: {outcome.message}")
        try:
            staged = self.remote_result(plan.mode, outcome)
        except StagingError as exc:
            raise AirflowException(str(exc)) from None
        return self._registered(plan, staged)

    # -- helpers ---------------------------------------------------------------------------------

    def _stage_here(self, plan: StagingPlan) -> StagedDataset:
        from aliyun_training.staging.engine import stage_dataset
        from aliyun_training.staging.opening import open_connected_source

        try:
            source = open_connected_source(plan.source_uri, plan.alibaba_cloud_conn_id, self.workers)
            return stage_dataset(source, plan.target_root, plan.version, workers=self.workers)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        except StagingError as exc:
            raise AirflowException(str(exc)) from None

    def _stager(self, mode: str, config: dict[str, Any]) -> Any:
        from aliyun_training.remote_runs import remote_run

        return remote_run("staging", mode, config)

    def _registered(self, plan: StagingPlan, staged: StagedDataset) -> dict[str, Any]:
        from aliyun_training.staging.registration import register_staged

        self.log.info(
            "Dataset %s staged at %s: %d files, %.1f MB, %d files (%.1f MB) copied in %.1f s",
            staged.version,
            staged.uri,
            staged.files,
            staged.bytes / 1e6,
            staged.transferred_files,
            staged.transferred_bytes / 1e6,
            staged.seconds,
        )
        if plan.registration:
            try:
                staged = register_staged(staged, plan.registration, plan.alibaba_cloud_conn_id)
            except SpecError as exc:
                raise AirflowFailException(str(exc)) from None
        return staged.model_dump(mode="json")
