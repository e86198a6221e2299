"""Stage a dataset version onto CPFS (or the local disk), then register it for the training job."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.operators.remote import RemoteRunMixin
from aliyun_training.spec import SpecError, StagedDataset
from aliyun_training.staging.sources import StagingError

if TYPE_CHECKING:
    from airflow.sdk import Context

MODES = ("direct", "pod", "dataflow")
#: task_state_store key of a remote staging run, for stopping it after a timeout.
HANDLE_KEY = "staging_run_handle"


class DatasetStagingOperator(RemoteRunMixin, BaseOperator):
    """Copy ``source_uri`` to ``<target_root>/<version>/``, verified and atomic; return a StagedDataset.

    Where the copy runs is the ``mode``:

    - ``direct``: on this worker, which mounts the target (CPFS, or the local disk);
    - ``pod``: in a pod on ACK that mounts the CPFS claim (``remote`` holds the pod settings); the
      task defers while the pod copies;
    - ``dataflow``: CPFS imports from OSS itself through a data flow (``remote`` holds the file
      system and data flow ids); the task defers while the import runs.

    An already staged, unchanged version is not copied again, so backfills and retries are cheap.
    ``register`` then makes the version mountable: a PAI dataset version for DLC, or a static PV
    and PVC for ACK (see ``aliyun_training.staging.registration``). Bad input fails without
    retries; a failed copy is retried and resumes.

    :param source_uri: ``oss://bucket/prefix/`` or ``file:///path/`` of the version (templated).
    :param target_root: directory holding the staged versions, as the stager sees it (templated).
    :param version: dataset version name (templated).
    :param mode: ``direct``, ``pod`` or ``dataflow`` (templated).
    :param remote: settings of the pod or data flow stager (templated).
    :param register: how to register the staged version, or None (templated).
    :param alibaba_cloud_conn_id: connection for OSS, AIWorkspace and NAS.
    :param workers: objects or byte ranges copied in parallel on the worker (``direct``); a staging
        pod takes ``remote["workers"]``.
    :param poll_interval: seconds between checks of a remote staging run.
    :param staging_timeout: how long a remote run may take before it is stopped and the task fails.
    """

    template_fields = ("source_uri", "target_root", "version", "mode", "remote", "register")
    remote_kind = "staging"
    remote_key = HANDLE_KEY
    ui_color = "#b3e5fc"

    def __init__(
        self,
        *,
        source_uri: str,
        target_root: str,
        version: str,
        mode: str = "direct",
        remote: dict[str, Any] | None = None,
        register: dict[str, Any] | None = None,
        alibaba_cloud_conn_id: str = "alibaba_cloud_default",
        workers: int = 16,
        poll_interval: float = 15.0,
        staging_timeout: timedelta = timedelta(hours=6),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_uri = source_uri
        self.target_root = target_root
        self.version = version
        self.mode = mode
        self.remote = remote or {}
        self.register = register
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self.workers = workers
        self.poll_interval = poll_interval
        self.staging_timeout = staging_timeout

    def execute(self, context: Context) -> dict[str, Any]:
        if self.mode not in MODES:
            raise AirflowFailException(f"mode: {self.mode!r} is not a staging mode (fix: use one of {MODES})")
        if self.mode == "direct":
            return self._registered(self._stage_here())
        config = self._remote_config()
        try:
            handle = self._stager(config).submit()
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info("Staging %s in mode %s: %s", self.version, self.mode, handle)
        self.defer_to_remote(context, self.mode, config, handle, self.poll_interval, self.staging_timeout)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The remote run ended: turn it into a StagedDataset or fail with the run's own reason."""
        if event["status"] != "succeeded":
            raise AirflowException(f"{self.mode} staging of {self.version} failed: {event.get('message')}")
        try:
            staged = self.remote_result(self.mode, event)
        except StagingError as exc:
            raise AirflowException(str(exc)) from None
        return self._registered(staged)

    # -- helpers ---------------------------------------------------------------------------------

    def _stage_here(self) -> StagedDataset:
        from aliyun_training.staging.engine import stage_dataset
        from aliyun_training.staging.sources import open_source

        try:
            options: dict[str, Any] = {}
            if self.source_uri.startswith("oss://"):
                from aliyun_training.staging.oss import OssClientConfig

                options["config"] = OssClientConfig.from_connection(self.alibaba_cloud_conn_id, self.workers)
            source = open_source(self.source_uri, **options)
            return stage_dataset(source, self.target_root, self.version, workers=self.workers)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        except StagingError as exc:
            raise AirflowException(str(exc)) from None

    def _remote_config(self) -> dict[str, Any]:
        return {
            **self.remote,
            "source_uri": self.source_uri,
            "target_root": self.target_root,
            "version": self.version,
        }

    def _stager(self, config: dict[str, Any]) -> Any:
        from aliyun_training.remote import remote_run

        return remote_run("staging", self.mode, config)

    def _registered(self, staged: StagedDataset) -> dict[str, Any]:
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
        if self.register:
            try:
                staged = register_staged(staged, self.register, self.alibaba_cloud_conn_id)
            except SpecError as exc:
                raise AirflowFailException(str(exc)) from None
        return staged.model_dump(mode="json")
