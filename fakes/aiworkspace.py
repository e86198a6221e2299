"""AIWorkspace 2021-02-04 emulator: PAI datasets, models and their versions (ROA).

Operations, paths and wire names are the SDK's (alibabacloud_aiworkspace20210204 8.3.5):

- CreateDataset          POST /api/v1/datasets                                   -> DatasetId
- GetDataset             GET  /api/v1/datasets/{DatasetId}
- ListDatasets           GET  /api/v1/datasets                                   -> Datasets, TotalCount
- CreateDatasetVersion   POST /api/v1/datasets/{DatasetId}/versions              -> VersionName
- GetDatasetVersion      GET  /api/v1/datasets/{DatasetId}/versions/{VersionName}
- ListDatasetVersions    GET  /api/v1/datasets/{DatasetId}/versions              -> DatasetVersions, paging
- CreateModel              POST   /api/v1/models                                   -> ModelId
- ListModels               GET    /api/v1/models                                   -> Models, TotalCount
- CreateModelVersion       POST   /api/v1/models/{ModelId}/versions                -> VersionName
- ListModelVersions        GET    /api/v1/models/{ModelId}/versions                -> Versions, TotalCount
- UpdateModelVersion       PUT    /api/v1/models/{ModelId}/versions/{VersionName}
- CreateModelVersionLabels POST   /api/v1/models/{ModelId}/versions/{VersionName}/labels
- DeleteModelVersionLabels DELETE /api/v1/models/{ModelId}/versions/{VersionName}/labels (LabelKeys)

Facts from the SDK docstrings that shape the emulation:

- CreateDataset requires Name, DataSourceType, Property and Uri; CreateDatasetVersion requires
  DataSourceType, Property and Uri, and "the DataSourceType of the version must be the same as the
  DataSourceType of the dataset" (checked on create). Name: 1-127 characters, starting with a
  letter, digit or Chinese character, then also ``_`` and ``-``.
- GetDataset documents Uri/Property/Options/SourceType as those "of the initial version v1": so
  CreateDataset makes version ``v1`` from its own Uri, Property, Options, VersionDescription and
  VersionLabels. The request of CreateDatasetVersion has no version name; the service assigns it.
  The emulator names versions ``v1``, ``v2``, ... in creation order (one more than the highest
  number so far; names are never reused).
- ListDatasets' Name is a fuzzy match (the emulator: case-sensitive substring), so callers must
  compare names exactly themselves. DataSourceTypes, Properties, DataTypes, DatasetIds and
  SourceTypes are comma-separated lists; PageNumber defaults to 1 and PageSize to 10.
- ListDatasetVersions documents PageNumber and PageSize as required: the emulator refuses a request
  without them (400 ``MissingParameter``) although their docstrings also name defaults, so a caller
  that relies on the defaults is caught here rather than in the cloud.
- Times are ISO 8601 UTC with milliseconds (``YYYY-MM-DDTHH:mm:ss.sssZ``), as documented.

Models, from the SDK's request and ``Model``/``ModelVersion`` docstrings and the API reference's
ModelVersion page (help/en/pai/developer-reference/api-aiworkspace-2021-02-04-struct-modelversion):

- CreateModel requires ModelName, "1 to 127 characters"; Accessibility is PRIVATE (default) or PUBLIC.
- CreateModelVersion requires Uri: an ``http(s)://`` URL, or for OSS
  "``oss://<bucket>.<endpoint>/object``" (the bucket's endpoint named; ``oss://bucket/path`` is
  refused). VersionName is optional, "unique within the model", of the form
  ``<major>.<minor>.<patch>[_<stage>]`` (numbers, and a stage of word characters); without it "the
  first version defaults to 0.1.0" and the minor number grows by one for each next version (the
  emulator: one more than the highest minor of the highest major so far, patch 0). ApprovalStatus
  is Pending, Approved or Rejected (on UpdateModelVersion too); SourceType Custom (default), PAIFlow
  or TrainingService, the last two with a SourceId ``region=<id>,workspaceId=<id>,kind=<kind>,id=<id>``
  (the docstrings name kinds PipelineRun and ServiceJob; Pulumi's example sends TrainingJob, so the
  kind is not checked). Metrics, serialized, "cannot exceed 8,192 bytes" (the emulator: compact JSON).
- CreateModelVersion's FormatType is one of OfflineModel, SavedModel, Keras H5, Frozen Pb, Caffe
  Prototxt, TorchScript, XGBoost, PMML, AlinkModel, ONNX, and its FrameworkType one of Pytorch,
  XGBoost, Keras, Caffe, Alink, Xflow, TensorFlow, spelled as the docstrings spell them (the PAI
  Python SDK's docstring writes "PyTorch": which spelling the service takes, and whether it
  compares case, is unverified, so the emulator takes the documented one only).
  UpdateModelVersionRequest has neither field. ExtraInfo, Metrics and the ``*Spec`` fields are
  ``Dict[str, Any]`` in the SDK: JSON objects.
- Labels (``Label``): keys and values "up to 128 bytes" without ``=`` or ``,``.
- ListModels and ListModelVersions: PageNumber from 1 (default 1), PageSize default 10, TotalCount;
  Order ASC (default) or DESC; SortBy "only GmtCreateTime". ListModels returns the workspace's
  models; its ModelName is "used to filter", and the emulator matches it as a substring, as
  ListDatasets' Name (whether the service matches exactly is not documented: callers compare).
- Times are ISO 8601 UTC; the reference's examples have whole seconds (``2021-01-21T17:12:35Z``).

Decisions where the service's behaviour is not documented:

- A second dataset with the same Name in the same workspace is refused with 409
  ``DatasetNameAlreadyExists`` (the SDK documents no code; the console refuses duplicate names).
  Callers should not depend on the code: look the dataset up again on any create failure.
- Unknown dataset: 404 ``DatasetNotFound``; unknown version: 404 ``DatasetVersionNotFound``; bad
  parameter values: 400 ``InvalidParameter`` naming the parameter; a denied action: 403
  ``Forbidden.RAM`` (through :class:`RamAuthorizedEmulator`).
- Any workspace id is accepted (workspaces themselves are not emulated); without WorkspaceId the
  ``default_workspace_id`` is used, and when that is None the request fails with 400
  ``InvalidParameter`` ("the default workspace does not exist", as the docstring describes).
- The Uri must fit the DataSourceType: ``oss://`` for OSS; ``nas://`` for NAS and EXTREMENAS;
  ``http(s)://`` for URL. The SDK documents no form for CPFS or BMCPFS; the emulator takes the
  forms the PAI Python SDK and DSW build: CPFS (general-purpose 2.0) is
  ``cpfs://<fsid>.<region>/<protocol service id>/<export id>/<path>/`` (the ``nas://`` form is
  reported refused for CPFS), BMCPFS (CPFS for Lingjun) is ``bmcpfs://<mount target domain>/<path>/``
  whose host is a DNS name of at least three labels (a mount target's domain, never bare ids).
  Whether the service itself refuses other shapes is unverified. Options, when given, must be a
  JSON object.
- PageSize above 100 is refused (no limit is documented; 100 is the usual PAI maximum).
- DryRun validates and answers without creating anything (no DatasetId / VersionName).
- Model ids are ``model-`` and 18 lower-case letters and digits (their form is not documented). A
  second model of one name in a workspace: 409 ``ModelNameAlreadyExists``; a VersionName the model
  has: 409 ``ModelVersionAlreadyExists``; unknown model: 404 ``ModelNotFound``; unknown version:
  404 ``ModelVersionNotFound`` (no codes are documented). Without WorkspaceId, CreateModel and
  ListModels use the default workspace, as the dataset requests do. ApprovalStatus has no default
  (an omitted one stays absent); a model's GmtModifiedTime is its creation time (no emulated
  request changes a model).
- CreateModelVersionLabels replaces the value of a key the version has (one label per key) and
  requires Labels; DeleteModelVersionLabels requires LabelKeys and ignores keys the version lacks,
  so both are safe to retry. Neither changes the version's GmtModifiedTime; UpdateModelVersion does,
  and keeps every field its request leaves out; a field it sends replaces the version's whole (an
  ExtraInfo is not merged into the one the version has: whether the service merges is not documented).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alibabacloud_aiworkspace20210204 import models as ws_models

from fakes.base import ApiError, ApiRequest, Handler, iso_utc, model_mismatches
from fakes.ram import RamAuthorizedEmulator

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

DEFAULT_WORKSPACE_ID = "ws-default"
DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 100
DATA_SOURCE_TYPES = frozenset({"OSS", "NAS", "EXTREMENAS", "CPFS", "BMCPFS", "MAXCOMPUTE", "URL"})
PROPERTIES = frozenset({"FILE", "DIRECTORY"})
PROVIDER_TYPES = frozenset({"Ecs", "Lingjun"})
URI_SCHEMES: dict[str, tuple[str, ...]] = {
    "OSS": ("oss://",),
    "NAS": ("nas://",),
    "EXTREMENAS": ("nas://",),
    "CPFS": ("cpfs://",),
    "BMCPFS": ("bmcpfs://",),
    "URL": ("http://", "https://"),
}
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: Whole-Uri shapes of the CPFS types (see the module docstring for their sources).
URI_SHAPES: dict[str, tuple[re.Pattern[str], str]] = {
    "CPFS": (
        re.compile(r"cpfs://[a-z0-9-]+\.[a-z0-9-]+/ptc-[a-z0-9]+/exp-[a-z0-9]+/([^/]+/)*"),
        "cpfs://<fsid>.<region>/<ptc-id>/<exp-id>/<path>/",
    ),
    "BMCPFS": (
        re.compile(rf"bmcpfs://{_LABEL}(\.{_LABEL}){{2,}}/([^/]+/)*"),
        "bmcpfs://<mount target domain>/<path>/",
    ),
}
ACCESSIBILITIES = frozenset({"PRIVATE", "PUBLIC"})
APPROVAL_STATUSES = frozenset({"Pending", "Approved", "Rejected"})
MODEL_SOURCE_TYPES = frozenset({"Custom", "PAIFlow", "TrainingService"})
MODEL_FORMAT_TYPES = frozenset(
    {
        "OfflineModel",
        "SavedModel",
        "Keras H5",
        "Frozen Pb",
        "Caffe Prototxt",
        "TorchScript",
        "XGBoost",
        "PMML",
        "AlinkModel",
        "ONNX",
    }
)
MODEL_FRAMEWORK_TYPES = frozenset({"Pytorch", "XGBoost", "Keras", "Caffe", "Alink", "Xflow", "TensorFlow"})
#: The fields of a model version the SDK types ``Dict[str, Any]``.
MODEL_VERSION_OBJECTS = (
    "CompressionSpec",
    "DistillationSpec",
    "EvaluationSpec",
    "ExtraInfo",
    "InferenceSpec",
    "Metrics",
    "TrainingSpec",
)
MODEL_NAME_MAX = 127
METRICS_MAX_BYTES = 8192
MODEL_URI = re.compile(r"https?://\S+|oss://[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\.[a-z0-9.-]+/\S*")
MODEL_SOURCE_ID = re.compile(r"region=[^,=]+,workspaceId=[^,=]+,kind=[^,=]+,id=[^,=]+")
VERSION_NAME = re.compile(r"(\d+)\.(\d+)\.\d+(_\w+)?")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9\u4e00-\u9fff][A-Za-z0-9_\-\u4e00-\u9fff]{0,126}$")
LIST_DATASETS_FILTERS = frozenset(
    {
        "WorkspaceId",
        "Name",
        "DataSourceTypes",
        "Properties",
        "DataTypes",
        "DatasetIds",
        "SourceTypes",
        "Label",
        "Edition",
        "Accessibility",
        "Order",
        "SortBy",
        "PageNumber",
        "PageSize",
    }
)
LIST_MODELS_FILTERS = frozenset({"WorkspaceId", "ModelName", "Order", "SortBy", "PageNumber", "PageSize"})
LIST_MODEL_VERSIONS_FILTERS = frozenset({"Order", "SortBy", "PageNumber", "PageSize"})
LIST_VERSIONS_FILTERS = frozenset(
    {
        "LabelKeys",
        "LabelValues",
        "Properties",
        "SourceTypes",
        "SourceId",
        "Order",
        "SortBy",
        "PageNumber",
        "PageSize",
    }
)


def iso_millis(epoch: float) -> str:
    """``YYYY-MM-DDTHH:mm:ss.sssZ`` in UTC, the format AIWorkspace documents for its times."""
    millis = round(epoch * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{millis:03d}Z"


@dataclass
class EmulatedVersion:
    """One dataset version as the service keeps it."""

    version_name: str
    data_source_type: str
    property: str
    uri: str
    created_at: float
    options: str | None = None
    description: str | None = None
    labels: list[dict[str, str]] = field(default_factory=list)
    source_type: str = "USER"
    source_id: str | None = None
    data_count: int | None = None
    data_size: int | None = None
    import_info: str | None = None


@dataclass
class EmulatedDataset:
    """A dataset; ``versions`` in creation order, the first being v1."""

    dataset_id: str
    workspace_id: str
    name: str
    data_source_type: str
    created_at: float
    modified_at: float
    owner_id: str
    provider_type: str = "Ecs"
    description: str | None = None
    data_type: str = "COMMON"
    edition: str = "BASIC"
    accessibility: str = "PRIVATE"
    labels: list[dict[str, str]] = field(default_factory=list)
    versions: list[EmulatedVersion] = field(default_factory=list)

    @property
    def first(self) -> EmulatedVersion:
        return self.versions[0]


@dataclass
class EmulatedModelVersion:
    """One model version; ``fields`` holds what its create and updates set (Uri, Metrics, ...) by
    wire name, as its views answer them."""

    version_name: str
    created_at: float
    modified_at: float
    labels: list[dict[str, str]] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class EmulatedModel:
    """A model of a workspace; ``versions`` in creation order."""

    model_id: str
    workspace_id: str
    name: str
    created_at: float
    owner_id: str
    accessibility: str = "PRIVATE"
    description: str | None = None
    labels: list[dict[str, str]] = field(default_factory=list)
    versions: list[EmulatedModelVersion] = field(default_factory=list)


class AIWorkspaceEmulator(RamAuthorizedEmulator):
    """AIWorkspace: datasets, models and their versions."""

    api_version = "2021-02-04"

    def __init__(
        self,
        access_keys: Mapping[str, str | None] | None = None,
        default_workspace_id: str | None = DEFAULT_WORKSPACE_ID,
        owner_id: str = "1234567890123456",
    ) -> None:
        super().__init__(access_keys)
        self.default_workspace_id = default_workspace_id
        self.owner_id = owner_id
        self.datasets: dict[str, EmulatedDataset] = {}
        self.models: dict[str, EmulatedModel] = {}
        self._numbers = itertools.count(1)
        self._lost_answers: dict[str, int] = {}
        datasets = "/api/v1/datasets"
        dataset = f"{datasets}/{{DatasetId}}"
        models = "/api/v1/models"
        model_versions = f"{models}/{{ModelId}}/versions"
        model_version = f"{model_versions}/{{VersionName}}"
        routes = (
            ("POST", datasets, "CreateDataset", self._create_dataset, ws_models.CreateDatasetResponseBody),
            ("GET", datasets, "ListDatasets", self._list_datasets, ws_models.ListDatasetsResponseBody),
            ("GET", dataset, "GetDataset", self._get_dataset, ws_models.GetDatasetResponseBody),
            (
                "POST",
                f"{dataset}/versions",
                "CreateDatasetVersion",
                self._create_dataset_version,
                ws_models.CreateDatasetVersionResponseBody,
            ),
            (
                "GET",
                f"{dataset}/versions",
                "ListDatasetVersions",
                self._list_dataset_versions,
                ws_models.ListDatasetVersionsResponseBody,
            ),
            (
                "GET",
                f"{dataset}/versions/{{VersionName}}",
                "GetDatasetVersion",
                self._get_dataset_version,
                ws_models.GetDatasetVersionResponseBody,
            ),
            ("POST", models, "CreateModel", self._create_model, ws_models.CreateModelResponseBody),
            ("GET", models, "ListModels", self._list_models, ws_models.ListModelsResponseBody),
            (
                "POST",
                model_versions,
                "CreateModelVersion",
                self._create_model_version,
                ws_models.CreateModelVersionResponseBody,
            ),
            (
                "GET",
                model_versions,
                "ListModelVersions",
                self._list_model_versions,
                ws_models.ListModelVersionsResponseBody,
            ),
            (
                "PUT",
                model_version,
                "UpdateModelVersion",
                self._update_model_version,
                ws_models.UpdateModelVersionResponseBody,
            ),
            (
                "POST",
                f"{model_version}/labels",
                "CreateModelVersionLabels",
                self._create_model_version_labels,
                ws_models.CreateModelVersionLabelsResponseBody,
            ),
            (
                "DELETE",
                f"{model_version}/labels",
                "DeleteModelVersionLabels",
                self._delete_model_version_labels,
                ws_models.DeleteModelVersionLabelsResponseBody,
            ),
        )
        for method, path, action, handler, model in routes:
            self.add_roa_route(method, path, action, self._committing(handler), model)

    # ----------------------------------------------------------------------------- setup

    def lose_answer_after_commit(self, action: str, times: int = 1) -> None:
        """Carry out the next ``times`` requests of ``action`` but answer them 503 ServiceUnavailable.

        This is the failure idempotent callers must survive: the service made the dataset, model
        or version, and the caller, seeing a retryable error, tries again.
        """
        with self._lock:
            self._lost_answers[action] = self._lost_answers.get(action, 0) + times

    def dataset_named(self, name: str, workspace_id: str | None = None) -> EmulatedDataset | None:
        """The dataset called ``name`` in the workspace (the default one when None), if any."""
        with self._lock:
            return _named(self.datasets.values(), name, workspace_id or self.default_workspace_id)

    def model_named(self, name: str, workspace_id: str | None = None) -> EmulatedModel | None:
        """The model called ``name`` in the workspace (the default one when None), if any."""
        with self._lock:
            return _named(self.models.values(), name, workspace_id or self.default_workspace_id)

    # ----------------------------------------------------------------------------- handlers

    def _committing(self, handler: Handler) -> Handler:
        """Run the handler; answer 503 afterwards when :meth:`lose_answer_after_commit` asks to."""

        def run(request: ApiRequest) -> dict[str, Any]:
            answer = handler(request)
            if self._lost_answers.get(request.action):
                self._lost_answers[request.action] -= 1
                raise ApiError(
                    503,
                    "ServiceUnavailable",
                    "The request has failed due to a temporary failure of the server.",
                )
            return answer

        return run

    def _create_dataset(self, request: ApiRequest) -> dict[str, Any]:
        body = _checked_body(request, ws_models.CreateDatasetRequest)
        for name in ("Name", "DataSourceType", "Property", "Uri"):
            _require(body, name)
        name = body["Name"]
        if not NAME_PATTERN.match(name):
            raise _invalid(
                "Name", f"{name!r} must be 1-127 letters, digits, '_' or '-', not starting with _ or -"
            )
        source_type = _one_of(body, "DataSourceType", DATA_SOURCE_TYPES)
        _check_version_fields(body, source_type)
        if "ProviderType" in body:
            _one_of(body, "ProviderType", PROVIDER_TYPES)
        _check_labels(body.get("Labels") or [], "Labels")
        workspace = self._workspace(body.get("WorkspaceId"))
        if _named(self.datasets.values(), name, workspace):
            raise ApiError(
                409,
                "DatasetNameAlreadyExists",
                f"A dataset named {name} already exists in workspace {workspace}.",
            )
        if _truthy(body.get("DryRun")):
            return {}
        now = self.clock()
        dataset = EmulatedDataset(
            dataset_id=self._new_id("d-", workspace, name),
            workspace_id=workspace,
            name=name,
            data_source_type=source_type,
            created_at=now,
            modified_at=now,
            owner_id=self.owner_id,
            provider_type=body.get("ProviderType", "Ecs"),
            description=body.get("Description"),
            data_type=body.get("DataType", "COMMON"),
            edition=body.get("Edition", "BASIC"),
            accessibility=body.get("Accessibility", "PRIVATE"),
            labels=list(body.get("Labels") or []),
        )
        dataset.versions.append(
            _version_from(
                "v1", body, now, description=body.get("VersionDescription"), labels=body.get("VersionLabels")
            )
        )
        self.datasets[dataset.dataset_id] = dataset
        return {"DatasetId": dataset.dataset_id}

    def _list_datasets(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        _check_query(query, ws_models.ListDatasetsRequest, LIST_DATASETS_FILTERS, "ListDatasets")
        workspace = self._workspace(query.get("WorkspaceId"))
        matching = [
            d for d in self.datasets.values() if d.workspace_id == workspace and _dataset_matches(d, query)
        ]
        matching = _sorted(matching, query, lambda d: d.created_at, lambda d: d.modified_at)
        page = _page(matching, query, required=False)
        return {"Datasets": [self._dataset_view(d) for d in page], "TotalCount": len(matching)}

    def _get_dataset(self, request: ApiRequest) -> dict[str, Any]:
        return self._dataset_view(self._dataset(request))

    def _create_dataset_version(self, request: ApiRequest) -> dict[str, Any]:
        dataset = self._dataset(request)
        body = _checked_body(request, ws_models.CreateDatasetVersionRequest)
        for name in ("DataSourceType", "Property", "Uri"):
            _require(body, name)
        source_type = _one_of(body, "DataSourceType", DATA_SOURCE_TYPES)
        if source_type != dataset.data_source_type:
            raise _invalid(
                "DataSourceType",
                f"{source_type} differs from the dataset's DataSourceType {dataset.data_source_type}",
            )
        _check_version_fields(body, source_type)
        _check_labels(body.get("Labels") or [], "Labels")
        if _truthy(body.get("DryRun")):
            return {}
        numbers = [int(v.version_name[1:]) for v in dataset.versions if v.version_name[1:].isdigit()]
        name = f"v{max(numbers, default=0) + 1}"
        now = self.clock()
        dataset.versions.append(
            _version_from(name, body, now, description=body.get("Description"), labels=body.get("Labels"))
        )
        dataset.modified_at = now
        return {"VersionName": name}

    def _list_dataset_versions(self, request: ApiRequest) -> dict[str, Any]:
        dataset, query = self._dataset(request), request.query
        _check_query(
            query, ws_models.ListDatasetVersionsRequest, LIST_VERSIONS_FILTERS, "ListDatasetVersions"
        )
        matching = [v for v in dataset.versions if _version_matches(v, query)]
        matching = _sorted(matching, query, lambda v: v.created_at, lambda v: v.created_at)
        page = _page(matching, query, required=True)
        return {
            "DatasetVersions": [_version_view(v) for v in page],
            "PageNumber": int(query["PageNumber"]),
            "PageSize": int(query["PageSize"]),
            "TotalCount": len(matching),
        }

    def _get_dataset_version(self, request: ApiRequest) -> dict[str, Any]:
        dataset = self._dataset(request)
        wanted = request.path_params["VersionName"]
        version = next((v for v in dataset.versions if v.version_name == wanted), None)
        if version is None:
            raise ApiError(
                404,
                "DatasetVersionNotFound",
                f"Version {wanted} of dataset {dataset.dataset_id} is not found.",
            )
        return {**_version_view(version), "DatasetId": dataset.dataset_id}

    def _create_model(self, request: ApiRequest) -> dict[str, Any]:
        body = _checked_body(request, ws_models.CreateModelRequest)
        _require(body, "ModelName")
        name = body["ModelName"]
        if len(name) > MODEL_NAME_MAX:
            raise _invalid("ModelName", f"must be 1 to {MODEL_NAME_MAX} characters")
        if "Accessibility" in body:
            _one_of(body, "Accessibility", ACCESSIBILITIES)
        _check_labels(body.get("Labels") or [], "Labels")
        workspace = self._workspace(body.get("WorkspaceId"))
        if _named(self.models.values(), name, workspace):
            raise ApiError(
                409,
                "ModelNameAlreadyExists",
                f"A model named {name} already exists in workspace {workspace}.",
            )
        model = EmulatedModel(
            model_id=self._new_id("model-", workspace, name),
            workspace_id=workspace,
            name=name,
            created_at=self.clock(),
            owner_id=self.owner_id,
            accessibility=body.get("Accessibility", "PRIVATE"),
            description=body.get("ModelDescription"),
            labels=list(body.get("Labels") or []),
        )
        self.models[model.model_id] = model
        return {"ModelId": model.model_id}

    def _list_models(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        _check_query(query, ws_models.ListModelsShrinkRequest, LIST_MODELS_FILTERS, "ListModels")
        workspace = self._workspace(query.get("WorkspaceId"))
        wanted = query.get("ModelName", "")
        matching = [m for m in self.models.values() if m.workspace_id == workspace and wanted in m.name]
        page = _page(_sorted(matching, query, lambda m: m.created_at), query, required=False)
        return {"Models": [self._model_view(m) for m in page], "TotalCount": len(matching)}

    def _create_model_version(self, request: ApiRequest) -> dict[str, Any]:
        model = self._model(request)
        body = _checked_body(request, ws_models.CreateModelVersionRequest)
        _require(body, "Uri")
        if not MODEL_URI.fullmatch(body["Uri"]):
            raise _invalid(
                "Uri", f"{body['Uri']!r} is not http(s)://... or oss://<bucket>.<endpoint>/<object>"
            )
        _check_model_version_fields(body)
        name = body.get("VersionName") or _next_version_name(model)
        if not VERSION_NAME.fullmatch(name):
            raise _invalid("VersionName", f"{name!r} is not <major>.<minor>.<patch>[_<stage>], e.g. 1.1.0")
        if any(v.version_name == name for v in model.versions):
            raise ApiError(
                409, "ModelVersionAlreadyExists", f"Version {name} of model {model.model_id} already exists."
            )
        now = self.clock()
        fields = {"SourceType": "Custom", **body}
        labels = fields.pop("Labels", None) or []
        fields.pop("VersionName", None)
        model.versions.append(EmulatedModelVersion(name, now, now, list(labels), fields))
        return {"VersionName": name}

    def _list_model_versions(self, request: ApiRequest) -> dict[str, Any]:
        model, query = self._model(request), request.query
        _check_query(
            query, ws_models.ListModelVersionsRequest, LIST_MODEL_VERSIONS_FILTERS, "ListModelVersions"
        )
        page = _page(_sorted(model.versions, query, lambda v: v.created_at), query, required=False)
        return {"Versions": [_model_version_view(v, model) for v in page], "TotalCount": len(model.versions)}

    def _update_model_version(self, request: ApiRequest) -> dict[str, Any]:
        version = self._model_version(request)
        body = _checked_body(request, ws_models.UpdateModelVersionRequest)
        _check_model_version_fields(body)
        version.fields.update(body)
        version.modified_at = self.clock()
        return {}

    def _create_model_version_labels(self, request: ApiRequest) -> dict[str, Any]:
        version = self._model_version(request)
        body = _checked_body(request, ws_models.CreateModelVersionLabelsRequest)
        if not body.get("Labels"):
            raise ApiError(400, "MissingParameter", "The parameter Labels is required.")
        _check_labels(body["Labels"], "Labels")
        added = {label["Key"]: dict(label) for label in body["Labels"]}
        version.labels = [lb for lb in version.labels if lb.get("Key") not in added] + list(added.values())
        return {}

    def _delete_model_version_labels(self, request: ApiRequest) -> dict[str, Any]:
        version = self._model_version(request)
        _check_query(
            request.query,
            ws_models.DeleteModelVersionLabelsRequest,
            frozenset({"LabelKeys"}),
            "DeleteModelVersionLabels",
        )
        keys = _listed(request.query, "LabelKeys")
        if not keys:
            raise ApiError(400, "MissingParameter", "The parameter LabelKeys is required.")
        version.labels = [lb for lb in version.labels if lb.get("Key") not in keys]
        return {}

    # ----------------------------------------------------------------------------- helpers

    def _workspace(self, workspace_id: str | None) -> str:
        workspace = workspace_id or self.default_workspace_id
        if not workspace:
            raise _invalid("WorkspaceId", "not given and the default workspace does not exist")
        return workspace

    def _dataset(self, request: ApiRequest) -> EmulatedDataset:
        dataset_id = request.path_params["DatasetId"]
        dataset = self.datasets.get(dataset_id)
        if dataset is None:
            raise ApiError(404, "DatasetNotFound", f"Dataset {dataset_id} is not found.")
        return dataset

    def _model(self, request: ApiRequest) -> EmulatedModel:
        model_id = request.path_params["ModelId"]
        model = self.models.get(model_id)
        if model is None:
            raise ApiError(404, "ModelNotFound", f"Model {model_id} is not found.")
        return model

    def _model_version(self, request: ApiRequest) -> EmulatedModelVersion:
        model, wanted = self._model(request), request.path_params["VersionName"]
        version = next((v for v in model.versions if v.version_name == wanted), None)
        if version is None:
            raise ApiError(
                404, "ModelVersionNotFound", f"Version {wanted} of model {model.model_id} is not found."
            )
        return version

    def _new_id(self, prefix: str, workspace: str, name: str) -> str:
        """``prefix`` and 18 lower-case letters and digits, like the service's ids; stable per run order."""
        digest = hashlib.sha256(f"{next(self._numbers)}/{workspace}/{name}".encode()).hexdigest()
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        value = int(digest, 16)
        chars = []
        for _ in range(18):
            value, index = divmod(value, len(alphabet))
            chars.append(alphabet[index])
        return prefix + "".join(chars)

    def _dataset_view(self, dataset: EmulatedDataset) -> dict[str, Any]:
        """A Dataset / GetDatasetResponseBody: Uri, Property, Options, Source* are v1's."""
        first = dataset.first
        view: dict[str, Any] = {
            "DatasetId": dataset.dataset_id,
            "Name": dataset.name,
            "WorkspaceId": dataset.workspace_id,
            "DataSourceType": dataset.data_source_type,
            "DataType": dataset.data_type,
            "Edition": dataset.edition,
            "Accessibility": dataset.accessibility,
            "ProviderType": dataset.provider_type,
            "Property": first.property,
            "Uri": first.uri,
            "SourceType": first.source_type,
            "OwnerId": dataset.owner_id,
            "UserId": dataset.owner_id,
            "IsShared": False,
            "MountAccess": "RW",
            "GmtCreateTime": iso_millis(dataset.created_at),
            "GmtModifiedTime": iso_millis(dataset.modified_at),
            "Labels": [dict(label) for label in dataset.labels],
            "LatestVersion": _version_view(dataset.versions[-1]),
        }
        optional = {"Description": dataset.description, "Options": first.options, "SourceId": first.source_id}
        view.update({k: v for k, v in optional.items() if v is not None})
        if first.import_info is not None:
            view["ImportInfo"] = first.import_info
        return view

    def _model_view(self, model: EmulatedModel) -> dict[str, Any]:
        """A ``Model``: its latest version's view included, as ListModels answers it."""
        view: dict[str, Any] = {
            "ModelId": model.model_id,
            "ModelName": model.name,
            "WorkspaceId": model.workspace_id,
            "Accessibility": model.accessibility,
            "OwnerId": model.owner_id,
            "UserId": model.owner_id,
            "GmtCreateTime": iso_utc(model.created_at),
            "GmtModifiedTime": iso_utc(model.created_at),
            "Labels": [dict(label) for label in model.labels],
        }
        if model.description is not None:
            view["ModelDescription"] = model.description
        if model.versions:
            view["LatestVersion"] = _model_version_view(model.versions[-1], model)
        return view


def _version_from(
    name: str, body: dict[str, Any], now: float, description: str | None, labels: list[Any] | None
) -> EmulatedVersion:
    return EmulatedVersion(
        version_name=name,
        data_source_type=body["DataSourceType"],
        property=body["Property"],
        uri=body["Uri"],
        created_at=now,
        options=body.get("Options"),
        description=description,
        labels=list(labels or []),
        source_type=body.get("SourceType", "USER"),
        source_id=body.get("SourceId"),
        data_count=body.get("DataCount"),
        data_size=body.get("DataSize"),
        import_info=body.get("ImportInfo"),
    )


def _version_view(version: EmulatedVersion) -> dict[str, Any]:
    view: dict[str, Any] = {
        "VersionName": version.version_name,
        "DataSourceType": version.data_source_type,
        "Property": version.property,
        "Uri": version.uri,
        "SourceType": version.source_type,
        "MountAccess": "RW",
        "GmtCreateTime": iso_millis(version.created_at),
        "GmtModifiedTime": iso_millis(version.created_at),
        "Labels": [dict(label) for label in version.labels],
    }
    optional = {
        "Options": version.options,
        "Description": version.description,
        "SourceId": version.source_id,
        "DataCount": version.data_count,
        "DataSize": version.data_size,
        "ImportInfo": version.import_info,
    }
    view.update({k: v for k, v in optional.items() if v is not None})
    return view


def _model_version_view(version: EmulatedModelVersion, model: EmulatedModel) -> dict[str, Any]:
    """A ``ModelVersion``: what its requests set, its name, labels and times."""
    return {
        **version.fields,
        "VersionName": version.version_name,
        "Labels": [dict(label) for label in version.labels],
        "OwnerId": model.owner_id,
        "UserId": model.owner_id,
        "GmtCreateTime": iso_utc(version.created_at),
        "GmtModifiedTime": iso_utc(version.modified_at),
    }


def _next_version_name(model: EmulatedModel) -> str:
    """0.1.0 first, then one more minor than the highest major's highest minor, patch 0."""
    numbers = [
        (int(match[1]), int(match[2]))
        for v in model.versions
        if (match := VERSION_NAME.fullmatch(v.version_name))
    ]
    major, minor = max(numbers, default=(0, 0))
    return f"{major}.{minor + 1}.0"


def _check_model_version_fields(body: dict[str, Any]) -> None:
    """ApprovalStatus, FormatType, FrameworkType, SourceType and its SourceId, the JSON objects, the
    size of Metrics and the Labels of a version (the two types only reach a create: the update's
    request model has no such fields, so :func:`_checked_body` refuses them there)."""
    for name, allowed in (
        ("ApprovalStatus", APPROVAL_STATUSES),
        ("FormatType", MODEL_FORMAT_TYPES),
        ("FrameworkType", MODEL_FRAMEWORK_TYPES),
    ):
        if name in body:
            _one_of(body, name, allowed)
    for name in MODEL_VERSION_OBJECTS:
        if name in body and not isinstance(body[name], dict):
            raise _invalid(name, "must be a JSON object")
    custom = "SourceType" not in body or _one_of(body, "SourceType", MODEL_SOURCE_TYPES) == "Custom"
    if not custom and not MODEL_SOURCE_ID.fullmatch(str(body.get("SourceId", ""))):
        raise _invalid("SourceId", "must be region=<id>,workspaceId=<id>,kind=<kind>,id=<id>")
    metrics = body.get("Metrics")
    if metrics is not None and len(json.dumps(metrics, separators=(",", ":")).encode()) > METRICS_MAX_BYTES:
        raise _invalid("Metrics", f"serialized, it exceeds {METRICS_MAX_BYTES} bytes")
    _check_labels(body.get("Labels") or [], "Labels")


def _named(items: Iterable[Any], name: str, workspace: str | None) -> Any | None:
    """The dataset or model of ``items`` called ``name`` in ``workspace``, if any."""
    return next((i for i in items if i.name == name and i.workspace_id == workspace), None)


def _checked_body(request: ApiRequest, model: type) -> dict[str, Any]:
    """The JSON body, refused when it has a field the SDK's request model could not have sent."""
    body = request.body if request.body is not None else {}
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidParameter", f"The {request.action} body must be a JSON object.")
    problems = model_mismatches(model, body)
    if problems:
        raise ApiError(400, "InvalidParameter", f"{request.action} body: {'; '.join(problems)}")
    return body


def _check_query(query: dict[str, str], model: type, supported: frozenset[str], action: str) -> None:
    unknown = [p for p in model_mismatches(model, dict(query)) if "is not a known field" in p]
    if unknown:
        raise ApiError(400, "InvalidParameter", f"{action} query: {'; '.join(unknown)}")
    unsupported = sorted(query.keys() - supported)
    if unsupported:
        raise ApiError(400, "InvalidParameter", f"{action} parameters {unsupported} are not emulated.")


def _require(body: dict[str, Any], name: str) -> None:
    if body.get(name) in (None, ""):
        raise ApiError(400, "MissingParameter", f"The parameter {name} is required.")


def _invalid(name: str, problem: str) -> ApiError:
    return ApiError(400, "InvalidParameter", f"The parameter {name} is invalid: {problem}.")


def _one_of(body: Mapping[str, Any], name: str, allowed: frozenset[str]) -> str:
    value = body[name]
    if value not in allowed:
        raise _invalid(name, f"{value!r} is not one of {sorted(allowed)}")
    return value


def _check_version_fields(body: dict[str, Any], source_type: str) -> None:
    """Property, the Uri's scheme for the DataSourceType, and Options as a JSON object."""
    _one_of(body, "Property", PROPERTIES)
    schemes = URI_SCHEMES.get(source_type)
    if schemes and not body["Uri"].startswith(schemes):
        raise _invalid("Uri", f"{body['Uri']!r} must start with {' or '.join(schemes)} for {source_type}")
    shape = URI_SHAPES.get(source_type)
    if shape and not shape[0].fullmatch(body["Uri"]):
        raise _invalid("Uri", f"{body['Uri']!r} is not of the form {shape[1]} for {source_type}")
    if body.get("Options"):
        try:
            options = json.loads(body["Options"])
        except (TypeError, json.JSONDecodeError) as exc:
            raise _invalid("Options", f"not valid JSON ({exc})") from exc
        if not isinstance(options, dict):
            raise _invalid("Options", "must be a JSON object")


def _check_labels(labels: list[Any], where: str) -> None:
    for label in labels:
        for part in ("Key", "Value"):
            text = str((label or {}).get(part, ""))
            if len(text.encode()) > 128 or "=" in text or "," in text:
                raise _invalid(where, f"{part} {text!r} must be at most 128 bytes without '=' or ','")


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _listed(query: Mapping[str, str], name: str) -> set[str] | None:
    """A comma-separated filter as a set (None when absent or empty)."""
    value = query.get(name)
    return {v.strip() for v in value.split(",") if v.strip()} if value else None


def _dataset_matches(dataset: EmulatedDataset, query: Mapping[str, str]) -> bool:
    if query.get("Name") and query["Name"] not in dataset.name:
        return False
    listed = (
        ("DataSourceTypes", dataset.data_source_type),
        ("Properties", dataset.first.property),
        ("DataTypes", dataset.data_type),
        ("DatasetIds", dataset.dataset_id),
        ("SourceTypes", dataset.first.source_type),
    )
    for name, value in listed:
        wanted = _listed(query, name)
        if wanted is not None and value not in wanted:
            return False
    for name, value in (("Edition", dataset.edition), ("Accessibility", dataset.accessibility)):
        if query.get(name) and query[name] != value:
            return False
    label = query.get("Label")
    return not label or any(
        label in lb.get("Key", "") or label in lb.get("Value", "") for lb in dataset.labels
    )


def _version_matches(version: EmulatedVersion, query: Mapping[str, str]) -> bool:
    for name, value in (("Properties", version.property), ("SourceTypes", version.source_type)):
        wanted = _listed(query, name)
        if wanted is not None and value not in wanted:
            return False
    if query.get("SourceId") and query["SourceId"] != version.source_id:
        return False
    keys, values = query.get("LabelKeys"), query.get("LabelValues")
    if keys and not any(keys in lb.get("Key", "") for lb in version.labels):
        return False
    return not values or any(values in lb.get("Value", "") for lb in version.labels)


def _sorted(items: list[Any], query: Mapping[str, str], created: Any, modified: Any = None) -> list[Any]:
    """``items`` in the query's Order by its SortBy: GmtCreateTime, or GmtModifiedTime where ``modified``
    reads it (the model lists document GmtCreateTime only)."""
    sort_by = query.get("SortBy") or "GmtCreateTime"
    keys = {"GmtCreateTime": created} | ({"GmtModifiedTime": modified} if modified else {})
    if sort_by not in keys:
        raise _invalid("SortBy", f"{sort_by!r} is not emulated (use {' or '.join(keys)})")
    order = (query.get("Order") or "ASC").upper()
    if order not in ("ASC", "DESC"):
        raise _invalid("Order", f"{order!r} is not ASC or DESC")
    key = keys[sort_by]
    ranked = sorted(enumerate(items), key=lambda pair: (key(pair[1]), pair[0]), reverse=order == "DESC")
    return [item for _, item in ranked]  # equal times keep creation order (reversed for DESC)


def _page(items: list[Any], query: Mapping[str, str], required: bool) -> list[Any]:
    if required:
        for name in ("PageNumber", "PageSize"):
            if not query.get(name):
                raise ApiError(400, "MissingParameter", f"The parameter {name} is required.")
    number = _int_param(query, "PageNumber", 1, 10**6)
    size = _int_param(query, "PageSize", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    return items[(number - 1) * size : number * size]


def _int_param(query: Mapping[str, str], name: str, default: int, high: int) -> int:
    try:
        value = int(query.get(name) or default)
    except ValueError as exc:
        raise _invalid(name, "must be an integer") from exc
    if not 1 <= value <= high:
        raise _invalid(name, f"must be in [1, {high}]")
    return value
