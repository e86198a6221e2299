"""AIWorkspace 2021-02-04 through the ``alibaba_cloud`` connection: PAI datasets and models, with versions.

Look-ups are exact where the API is not: ListDatasets' Name filter is a fuzzy match, ListModels'
ModelName is documented only as "used to filter"; a dataset version is known by its Uri, a model
version by its labels. The list APIs page with PageNumber/PageSize (default 10) and
TotalCount; every page is read. No create has a client token, so the creates here never make two of
one thing (:meth:`AIWorkspaceHook.create_dataset`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
from aliyun_training.hooks.retry import AlibabaCloudApiError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

#: The page size of every list here; fewer round trips on workspaces with many datasets or versions.
PAGE_SIZE = 100


class AIWorkspaceHook(AlibabaCloudHook):
    """Datasets, models and their versions in PAI workspaces, each call under the retry policy."""

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

    def find_model(self, workspace_id: str, name: str) -> str | None:
        """The id of the workspace's model named exactly ``name``, or None (ListModels, every page)."""
        from alibabacloud_aiworkspace20210204 import models

        def page(number: int) -> tuple[list[Any], int | None]:
            request = models.ListModelsRequest(
                workspace_id=workspace_id, model_name=name, page_number=number, page_size=PAGE_SIZE
            )
            body = self.conn.list_models(request).body
            return body.models or [], body.total_count

        for model in self.call_pages("ListModels", page):
            if model.model_name == name and model.workspace_id in (None, workspace_id):
                return model.model_id
        return None

    def create_model(self, request: Any) -> str:
        """CreateModel (``CreateModelRequest``); the model id. Made once, as :meth:`create_dataset` is:
        what exists with the request's ModelName in its workspace is adopted."""
        return self._create_once(
            "CreateModel",
            lambda: self.conn.create_model(request).body.model_id,
            lambda: self.find_model(request.workspace_id, request.model_name),
        )

    def model_versions(self, model_id: str) -> list[Any]:
        """Every version of the model (``ModelVersion``), oldest first: ListModelVersions, every page."""
        from alibabacloud_aiworkspace20210204 import models

        def page(number: int) -> tuple[list[Any], int | None]:
            request = models.ListModelVersionsRequest(
                page_number=number, page_size=PAGE_SIZE, sort_by="GmtCreateTime", order="ASC"
            )
            body = self.conn.list_model_versions(model_id, request).body
            return body.versions or [], body.total_count

        return list(self.call_pages("ListModelVersions", page))

    def find_model_version(self, model_id: str, labels: Mapping[str, str]) -> Any | None:
        """The oldest version (``ModelVersion``) carrying every one of ``labels``, or None.

        Every version is read and compared here: ListModelVersions' Label filter is a substring match
        on keys or values, which cannot ask for one key's exact value.
        """
        wanted = set(labels.items())
        return next((v for v in self.model_versions(model_id) if wanted <= label_pairs(v)), None)

    def create_model_version(self, model_id: str, request: Any) -> str:
        """CreateModelVersion (``CreateModelVersionRequest``); the VersionName, the service's (0.1.0,
        0.2.0, ...) when the request names none.

        Made once: a version is known by its labels, so the request must carry labels that identify
        it (a retry, or a refusal, adopts the version that carries them all); without any, every
        version would match.
        """
        labels = {label.key: label.value for label in request.labels or []}
        if not labels:
            raise ValueError("CreateModelVersion needs the labels that identify the version (none given)")

        def find() -> str | None:
            found = self.find_model_version(model_id, labels)
            return found.version_name if found is not None else None

        return self._create_once(
            "CreateModelVersion",
            lambda: self.conn.create_model_version(model_id, request).body.version_name,
            find,
        )

    def add_model_version_labels(self, model_id: str, version_name: str, labels: Mapping[str, str]) -> None:
        """CreateModelVersionLabels (``CreateModelVersionLabelsRequest``): give the version ``labels``.

        Retried like a read: adding a label the version already carries changes nothing.
        """
        from alibabacloud_aiworkspace20210204 import models

        request = models.CreateModelVersionLabelsRequest(
            labels=[models.Label(key=key, value=value) for key, value in labels.items()]
        )
        self.call(
            "CreateModelVersionLabels",
            lambda: self.conn.create_model_version_labels(model_id, version_name, request),
        )

    def delete_model_version_labels(self, model_id: str, version_name: str, keys: Collection[str]) -> None:
        """DeleteModelVersionLabels (``DeleteModelVersionLabelsRequest``: LabelKeys, comma-separated)."""
        from alibabacloud_aiworkspace20210204 import models

        request = models.DeleteModelVersionLabelsRequest(label_keys=",".join(keys))
        self.call(
            "DeleteModelVersionLabels",
            lambda: self.conn.delete_model_version_labels(model_id, version_name, request),
        )

    def set_model_version_approval(
        self, model_id: str, version_name: str, status: str, extra_info: Mapping[str, Any] | None = None
    ) -> None:
        """UpdateModelVersion (``UpdateModelVersionRequest``) with ApprovalStatus (Pending, Approved
        or Rejected) and, when given, ExtraInfo, whole. The other fields are left out, so the
        service keeps them."""
        from alibabacloud_aiworkspace20210204 import models

        request = models.UpdateModelVersionRequest(
            approval_status=status, extra_info=dict(extra_info) if extra_info is not None else None
        )
        self.call(
            "UpdateModelVersion", lambda: self.conn.update_model_version(model_id, version_name, request)
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


def label_pairs(version: Any) -> set[tuple[str, str]]:
    """A ``ModelVersion``'s labels as (key, value) pairs."""
    return {(label.key, label.value) for label in version.labels or []}
