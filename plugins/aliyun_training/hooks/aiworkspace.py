"""AIWorkspace 2021-02-04 through the ``alibaba_cloud`` connection: PAI datasets and their versions.

Look-ups are exact where the API is not: ListDatasets' Name filter is a fuzzy match, and a version
is known by its Uri. Both list APIs page with PageNumber/PageSize (default 10) and TotalCount;
every page is read. Neither CreateDataset nor CreateDatasetVersion has a client token, so the
creates here never make two of one thing (:meth:`AIWorkspaceHook.create_dataset`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
from aliyun_training.hooks.retry import AlibabaCloudApiError

if TYPE_CHECKING:
    from collections.abc import Callable

#: ListDatasets / ListDatasetVersions page size; fewer round trips on workspaces with many datasets.
PAGE_SIZE = 100


class AIWorkspaceHook(AlibabaCloudHook):
    """Datasets and dataset versions of PAI workspaces, each call under the retry policy."""

    hook_name = "Alibaba Cloud PAI AIWorkspace"
    service = "aiworkspace"

    def find_dataset(self, workspace_id: str, name: str) -> str | None:
        """The id of the workspace's dataset named exactly ``name``, or None."""
        from alibabacloud_aiworkspace20210204 import models

        def page(number: int) -> tuple[list[Any], int | None]:
            request = models.ListDatasetsRequest(
                workspace_id=workspace_id, name=name, page_number=number, page_size=PAGE_SIZE
            )
            body = self.conn.list_datasets(request).body
            return body.datasets or [], body.total_count

        for dataset in self.call_pages("ListDatasets", page):
            if dataset.name == name and dataset.workspace_id in (None, workspace_id):
                return dataset.dataset_id
        return None

    def create_dataset(self, request: Any) -> str:
        """CreateDataset (its Uri, Property and Options make the dataset's v1); the dataset id.

        Made once: a retry, or a refusal such as the duplicate name of a concurrent run's create,
        adopts the dataset of that name that exists by then.
        """
        return self._create_once(
            "CreateDataset",
            lambda: self.conn.create_dataset(request).body.dataset_id,
            lambda: self.find_dataset(request.workspace_id, request.name),
        )

    def find_dataset_version(self, dataset_id: str, uri: str) -> str | None:
        """The name of the dataset's version whose Uri is ``uri`` (trailing ``/`` insensitive), or None."""
        from alibabacloud_aiworkspace20210204 import models

        def page(number: int) -> tuple[list[Any], int | None]:
            request = models.ListDatasetVersionsRequest(page_number=number, page_size=PAGE_SIZE)
            body = self.conn.list_dataset_versions(dataset_id, request).body
            return body.dataset_versions or [], body.total_count

        wanted = uri.rstrip("/")
        for version in self.call_pages("ListDatasetVersions", page):
            if (version.uri or "").rstrip("/") == wanted:
                return version.version_name
        return None

    def create_dataset_version(self, dataset_id: str, request: Any) -> str:
        """CreateDatasetVersion; the version name the service chose (v1, v2, ...). Made once, as
        :meth:`create_dataset` is: what exists with the request's Uri is adopted."""
        return self._create_once(
            "CreateDatasetVersion",
            lambda: self.conn.create_dataset_version(dataset_id, request).body.version_name,
            lambda: self.find_dataset_version(dataset_id, request.uri),
        )

    def _create_once(self, action: str, create: Callable[[], str], find: Callable[[], str | None]) -> str:
        """:meth:`call_once`, and after a refusal for good a last look: found means another create won."""
        try:
            return self.call_once(action, create, find)
        except AlibabaCloudApiError:
            made = find()
            if made:
                return made
            raise
