"""Stage a dataset version onto the training filesystem (the local stand-in for CPFS)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.spec import SpecError
from aliyun_training.staging.engine import StagingError, stage_dataset

if TYPE_CHECKING:
    from airflow.sdk import Context


class DatasetStagingOperator(BaseOperator):
    """Copy ``source_uri`` to ``<target_root>/<version>/``, verified and atomic; return a StagedDataset.

    An already staged, unchanged and verified version is not copied again, so backfills and retries
    are cheap. Bad input fails without retries; a failed copy is retried and resumes.

    :param source_uri: object-store prefix of the version, e.g. ``file:///data/cifar10/v1/`` (templated).
    :param target_root: directory holding the staged versions (templated).
    :param version: dataset version name (templated).
    :param workers: objects copied in parallel.
    """

    template_fields = ("source_uri", "target_root", "version")

    def __init__(self, *, source_uri: str, target_root: str, version: str, workers: int = 8, **kwargs: Any):
        super().__init__(**kwargs)
        self.source_uri = source_uri
        self.target_root = target_root
        self.version = version
        self.workers = workers

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            staged = stage_dataset(self.source_uri, self.target_root, self.version, workers=self.workers)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        except StagingError as exc:
            raise AirflowException(str(exc)) from None
        self.log.info(
            "Dataset %s staged at %s: %d files, %.1f MB, %d copied",
            staged.version,
            staged.uri,
            staged.files,
            staged.bytes / 1e6,
            staged.transferred_files,
        )
        return staged.model_dump(mode="json")
