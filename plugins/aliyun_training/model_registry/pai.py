"""PAI's model registry (AIWorkspace models): one model per pipeline, a version per candidate, labels.

The registered model is the workspace's model named ``settings.model`` (created on first use). Each
candidate is a model version (``CreateModelVersion``) whose Uri is its published artifact set, whose
Metrics are its metrics and whose labels are its lineage; the service names it (0.1.0, 0.2.0, ...).
A retried task finds its run's version by its ``installation``, ``dag_id`` and ``run_id`` labels
instead of registering again. The
champion is the version carrying the label ``champion=true`` among the installation's own versions
(their ``installation`` label); a promotion moves that label among them and approves the version
(ApprovalStatus ``Approved``). Another installation's versions, labels included, are never read as
ours nor changed.

A version is described as PAI's console shows versions, with PAI's own enumerations (the SDK's
``CreateModelVersionRequest``):

- ApprovalStatus: ``Pending`` for a candidate, ``Rejected`` for one the gate held and for one whose
  promotion a person rejected (:meth:`PaiRegistry.reject`), ``Approved`` once promoted; the reason
  of a rejection is ExtraInfo's ``rejection``.
- FrameworkType: the framework of the MLflow model the job saved (``Pytorch`` for its ``pytorch``
  flavour, :data:`FRAMEWORK_TYPES`); none for plain files, whose framework is not recorded.
- FormatType: never set. The Uri is the whole published set, and none of PAI's formats (OfflineModel,
  SavedModel, Keras H5, Frozen Pb, Caffe Prototxt, TorchScript, XGBoost, PMML, AlinkModel, ONNX)
  is an MLflow model folder (its network a ``torch.export`` program) or a torch state dict.
- InferenceSpec: never set. It names an EAS processor or container: EAS's built-in processors load
  the formats above, not an MLflow model, and a container needs a serving image this pipeline does
  not build (its runtime image trains).
- SourceType ``Custom``; SourceId the DLC job that trained the model (:func:`source_id`), else the
  DAG run. PAI documents sources of two other kinds only (PAIFlow, TrainingService).

Label keys and values are at most 128 bytes and hold no ``=`` or ``,`` (the SDK's ``Label``
model): a lineage value that does not fit is shortened by :func:`label_value`, and ExtraInfo keeps
the lineage whole. A version's address (:attr:`RegisteredVersion.uri`) is
``pai://<region>/<workspace id>/models/<model id>/versions/<version>``: the ids GetModelVersion
takes, with the region and workspace that locate them.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from aliyun_training.backend_catalog import BACKENDS, backend_record
from aliyun_training.hooks.aiworkspace import AIWorkspaceHook, label_pairs
from aliyun_training.hooks.alibaba_cloud import AlibabaCloudConnectionError
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.model_registry.base import (
    LINEAGE,
    Candidate,
    PlannedRegistryCall,
    PlannedRegistryCalls,
    PublishedFiles,
    RegisteredVersion,
    RegistryError,
    RegistryInputs,
    RegistrySettings,
)
from aliyun_training.oss_location import oss_endpoint, parse_oss_uri
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

CHAMPION_KEY, CHAMPION_VALUE = "champion", "true"
CHAMPION_LABEL = (CHAMPION_KEY, CHAMPION_VALUE)
RUN_ID_KEY = "run_id"
INSTALLATION_KEY = "installation"
APPROVED, PENDING, REJECTED = "Approved", "Pending", "Rejected"
#: The ExtraInfo key of why a version is Rejected.
REJECTION_KEY = "rejection"
#: The rejection of a candidate the gate held.
HELD_REASON = "held by the promotion gate, which compared it with the champion"
#: PAI's FrameworkType of an MLflow model with one of these flavours, spelled as PAI's enumeration
#: spells it (``Pytorch``, not PyTorch).
FRAMEWORK_TYPES = {"pytorch": "Pytorch", "tensorflow": "TensorFlow", "keras": "Keras", "xgboost": "XGBoost"}
#: The most bytes a label key or value may have (``Label``: "up to 128 bytes").
LABEL_MAX_BYTES = 128
_DIGEST_CHARS = 16
_NOT_IN_LABELS = re.compile("[=,]")
#: The RAM actions every call here needs, as PAI's roles-and-permissions appendix spells them.
RAM_ACTIONS = tuple(
    f"paiworkspace:{action}"
    for action in (
        "ListModels",
        "CreateModel",
        "ListModelVersions",
        "CreateModelVersion",
        "CreateModelVersionLabels",
        "DeleteModelVersionLabels",
        "UpdateModelVersion",
    )
)


def label_value(text: str) -> str:
    """``text`` as a label value PAI accepts: unchanged when it fits; otherwise its first bytes (``=``
    and ``,`` made ``_``), ``~`` and 16 hex digits of its SHA-256, 128 bytes in all.

    The digest keeps two long values apart, so a shortened ``run_id`` label still names one run.
    """
    if len(text.encode()) <= LABEL_MAX_BYTES and not _NOT_IN_LABELS.search(text):
        return text
    room = LABEL_MAX_BYTES - _DIGEST_CHARS - 1
    prefix = _NOT_IN_LABELS.sub("_", text).encode()[:room].decode(errors="ignore")
    return f"{prefix}~{hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_CHARS]}"


def model_version_uri(artifacts_uri: str, region: str) -> str:
    """The CreateModelVersion Uri of an artifact set: ``oss://<bucket>.<endpoint>/<prefix>/``, the
    form the SDK documents; a URI naming no endpoint gets the region's public one."""
    try:
        location = parse_oss_uri(artifacts_uri, "artifacts_uri")
    except SpecError as exc:
        raise RegistryError(
            f"registry: the PAI model registry stores OSS locations only, and {exc} (fix: publish the "
            "artifact sets to an oss:// artifact root, or use registry kind mlflow)"
        ) from None
    endpoint = location.endpoint or oss_endpoint(region)
    return f"oss://{location.bucket_name}.{endpoint}/{location.prefix}"


def framework_type(files: PublishedFiles) -> str | None:
    """PAI's FrameworkType of the MLflow model in ``files``: its first flavour PAI names a framework
    for; None for plain files (a ``model.pt`` may hold anything) or a flavour PAI has no name for."""
    return next((FRAMEWORK_TYPES[f] for f in files.flavors() if f in FRAMEWORK_TYPES), None)


def source_id(candidate: Candidate, manifest: Mapping[str, Any], region: str, workspace_id: str) -> str:
    """The SourceId of ``candidate``'s version, whose SourceType is Custom: the DLC job that trained
    it (:func:`job_source_id`) when its manifest's job ran on a backend whose jobs PAI knows (DLC's,
    its record's ``pai_job_kind``); else (a local or ACK job) its DAG run, ``<dag_id>/<run_id>``.

    Custom, because PAI documents no SourceType for a DLC job: PAIFlow is a PAI pipeline run and
    TrainingService a job of PAI's training service (a PAI Studio TrainingJob, which has its own id
    and runs on DLC under another), so either would point the console at a source that does not
    exist. A Custom SourceId "has no format restrictions"; the DLC job runs in the same workspace and
    region as the registry (both are the DLC environment file's).
    """
    job = manifest.get("job") or {}
    try:
        kind = backend_record(str(job.get("backend"))).pai_job_kind
    except SpecError:  # a backend this installation does not offer: no job PAI knows
        kind = None
    if kind and job.get("job_id"):
        return job_source_id(region, workspace_id, kind, str(job["job_id"]))
    return f"{candidate.dag_id}/{candidate.run_id}"


def job_source_id(region: str, workspace_id: str, kind: str, job_id: str) -> str:
    """A PAI job as a SourceId, in the form PAI gives the sources it documents
    (``region=..,workspaceId=..,kind=..,id=..``); ``kind`` is the backend's ``pai_job_kind``."""
    return f"region={region},workspaceId={workspace_id},kind={kind},id={job_id}"


def pai_settings(inputs: RegistryInputs) -> RegistrySettings:
    """The cloud environment's workspace, region and connection; a backend without a workspace is
    refused naming the fix."""
    environment = inputs.environment
    workspace = getattr(environment, "workspace_id", None)
    if environment is None or not workspace:
        raise SpecError(
            "registry.kind: PAI's model registry lives in a PAI workspace, which "
            f"{inputs.backend} runs of {inputs.environment_file} do not name (fix: use kind: "
            "mlflow for this backend, or set workspace_id in the environment file)"
        )
    return RegistrySettings(
        kind="pai",
        model=inputs.model,
        workspace_id=workspace,
        region=getattr(environment, "region", None),
        alibaba_cloud_conn_id=environment.alibaba_cloud_conn_id,
    )


def planned_requests(settings: RegistrySettings, installation: str) -> PlannedRegistryCalls:
    """What :class:`PaiRegistry` sends: a Pending version of the candidate labelled with its
    lineage, its framework and its source; promoting, the champion label and the approval."""
    workspace = {"WorkspaceId": settings.workspace_id, "ModelName": settings.model}
    dlc_job = job_source_id(
        settings.region or "<the connection's region>",
        settings.workspace_id or "",
        "|".join(record.pai_job_kind for record in BACKENDS if record.pai_job_kind),
        "<the DLC job id>",
    )
    return PlannedRegistryCalls(
        register=(
            PlannedRegistryCall(
                "aiworkspace",
                "CreateModelVersion",
                {
                    **workspace,
                    "Uri": "<the published artifact set>",
                    "Labels": ", ".join(LINEAGE),
                    "ApprovalStatus": PENDING,
                    "FrameworkType": "<Pytorch for an MLflow pytorch model; none for plain files>",
                    "SourceType": "Custom",
                    "SourceId": f"{dlc_job} for a DLC job, else <dag id>/<run id>",
                },
                note=f"skipped when a version labelled with the run's id exists (a retry); {REJECTED} "
                "instead of Pending when the gate holds the candidate; no FormatType or InferenceSpec "
                "(none of PAI's fits an MLflow model)",
            ),
        ),
        promote=(
            PlannedRegistryCall(
                "aiworkspace",
                "CreateModelVersionLabels / UpdateModelVersion",
                {**workspace, "Labels": f"{CHAMPION_KEY}={CHAMPION_VALUE}", "ApprovalStatus": APPROVED},
                note=f"the label leaves the previous champion of installation {installation} (another "
                f"installation's versions keep theirs); a rejected promotion sets ApprovalStatus {REJECTED} "
                "instead, with the reason in ExtraInfo",
            ),
        ),
    )


class PaiRegistry:
    """The ``ModelRegistry`` of a PAI workspace, through :class:`AIWorkspaceHook`."""

    def __init__(self, settings: RegistrySettings, installation: str) -> None:
        if not settings.workspace_id:
            raise RegistryError(
                f"registry: the PAI model registry of model {settings.model!r} names no workspace (fix: "
                "set workspace_id in the backend's environment file)"
            )
        self.settings = settings
        self.model = settings.model
        self.workspace_id = settings.workspace_id
        self.installation = installation
        self._hook = AIWorkspaceHook(
            alibaba_cloud_conn_id=settings.alibaba_cloud_conn_id, region=settings.region
        )
        self._model_id: str | None = None

    def register(self, candidate: Candidate, files: PublishedFiles) -> RegisteredVersion:
        """A version of ``candidate`` (Pending; Rejected when the gate held it), described by its
        published ``files``; the version its run registered already, when there is one."""

        def register() -> RegisteredVersion:
            request = self._version_request(candidate, files)  # first: a Uri PAI cannot take costs no call
            model_id = self._model()
            identity = {key: label_value(value) for key, value in candidate.identity().items()}
            found = self._hook.find_model_version(model_id, identity)
            if found is not None:
                return self._registered(model_id, found)
            version = self._hook.create_model_version(model_id, request)
            return RegisteredVersion(
                registry="pai",
                model=self.model,
                version=version,
                uri=self._address(model_id, version),
                run_id=candidate.run_id,
                metrics=candidate.metrics,
            )

        return self._call("register a candidate", register)

    def champion(self) -> RegisteredVersion | None:
        """The version labelled ``champion=true``; the newest, when an interrupted promotion (see
        :meth:`promote`) left two: the next promotion leaves one again."""

        def champion() -> RegisteredVersion | None:
            model_id = self._existing_model()
            if model_id is None:
                return None
            carriers = [v for v in self._own_versions(model_id) if CHAMPION_LABEL in label_pairs(v)]
            return self._registered(model_id, carriers[-1]) if carriers else None

        return self._call("read the champion", champion)

    def promote(self, version: RegisteredVersion) -> None:
        """Label ``version`` champion, unlabel every other version, then approve ``version`` (a
        rejection it carried, held by the gate, is dropped from its ExtraInfo).

        Each step is made only when the versions as read need it, so a version that already is the
        one approved champion costs one listing and no write. The order keeps a champion at every
        moment, and approves a version only once it is the champion alone: an interruption leaves
        either two versions labelled (after the first step) or the champion not yet approved (after
        the second), and a retry of this promotion completes it from there.
        """

        def promote() -> None:
            model_id, versions, target = self._own_version(version, "promote")
            others = [v for v in versions if v is not target and CHAMPION_LABEL in label_pairs(v)]
            if CHAMPION_LABEL not in label_pairs(target):
                self._hook.add_model_version_labels(
                    model_id, target.version_name, {CHAMPION_KEY: CHAMPION_VALUE}
                )
            for other in others:
                self._hook.delete_model_version_labels(model_id, other.version_name, [CHAMPION_KEY])
            self._set_approval(model_id, target, APPROVED)

        self._call("move the champion label", promote)

    def reject(self, version: RegisteredVersion, reason: str) -> None:
        """Mark ``version`` Rejected, ``reason`` its ExtraInfo's ``rejection``: PAI's console then
        shows it not approved for deployment. Nothing is written when it is so already; its labels
        are left as they are. Only a version of this installation's is changed."""

        def reject() -> None:
            model_id, _, target = self._own_version(version, "reject")
            self._set_approval(model_id, target, REJECTED, reason)

        self._call("mark a version rejected", reject)

    def _own_version(self, version: RegisteredVersion, what: str) -> tuple[str, list[Any], Any]:
        """The model's id, this installation's versions and the one ``version`` names; refused
        naming the fix (``what`` a version this installation registered) when it is none of them."""
        model_id = self._existing_model()
        versions = self._own_versions(model_id) if model_id else []
        target = next((v for v in versions if v.version_name == version.version), None)
        if model_id is None or target is None:
            raise RegistryError(
                f"registry: version {version.version} of model {self.model!r} is not one installation "
                f"{self.installation} registered in PAI workspace {self.workspace_id} (fix: {what} a "
                "version this installation registered)"
            )
        return model_id, versions, target

    def _set_approval(self, model_id: str, target: Any, status: str, rejection: str | None = None) -> None:
        """Give the listed version ``target`` ApprovalStatus ``status`` and, in its ExtraInfo, the
        ``rejection`` reason (none: the key removed, so an approved version carries no stale one);
        no write when it has both already. ExtraInfo is sent only when it changes, and then whole,
        the lineage with it: whether the service merges a partial one is not documented."""
        current = dict(target.extra_info or {})
        extra = {key: value for key, value in current.items() if key != REJECTION_KEY}
        if rejection is not None:
            extra[REJECTION_KEY] = rejection
        if target.approval_status != status or extra != current:
            changed = extra if extra != current else None
            self._hook.set_model_version_approval(model_id, target.version_name, status, changed)

    def _own_versions(self, model_id: str) -> list[Any]:
        """The model's versions this installation registered (its ``installation`` label)."""
        mine = (INSTALLATION_KEY, label_value(self.installation))
        return [v for v in self._hook.model_versions(model_id) if mine in label_pairs(v)]

    def _existing_model(self) -> str | None:
        """The registered model's id, or None before its first candidate."""
        if self._model_id is None:
            self._model_id = self._hook.find_model(self.workspace_id, self.model)
        return self._model_id

    def _model(self) -> str:
        """The registered model's id, the model created when missing."""
        from alibabacloud_aiworkspace20210204 import models

        if self._existing_model() is None:
            self._model_id = self._hook.create_model(
                models.CreateModelRequest(
                    workspace_id=self.workspace_id,
                    model_name=self.model,
                    model_description="Candidates registered by an aliyun_training pipeline",
                )
            )
        assert self._model_id is not None, "found or created"
        return self._model_id

    def _version_request(self, candidate: Candidate, files: PublishedFiles) -> Any:
        """The CreateModelVersionRequest of ``candidate``: Pending (Rejected, held by the gate), its
        lineage as labels and whole, its framework and its source."""
        from alibabacloud_aiworkspace20210204 import models

        lineage = candidate.lineage()
        held = {REJECTION_KEY: HELD_REASON} if candidate.held else {}
        return models.CreateModelVersionRequest(
            uri=model_version_uri(candidate.artifacts_uri, self._hook.region),
            approval_status=REJECTED if candidate.held else PENDING,
            framework_type=framework_type(files),
            metrics=dict(candidate.metrics),
            labels=[models.Label(key=key, value=label_value(value)) for key, value in lineage.items()],
            extra_info={"lineage": lineage, **held},
            source_type="Custom",
            source_id=source_id(candidate, files.manifest, self._hook.region, self.workspace_id),
            version_description=(
                f"Trained on {candidate.dataset_version} by {candidate.dag_id} {candidate.run_id}"
            ),
        )

    def _registered(self, model_id: str, version: Any) -> RegisteredVersion:
        """A listed ``ModelVersion`` as the registry answers it; the run id from ExtraInfo's whole
        lineage, else from the label (shortened only past 128 bytes)."""
        lineage = (version.extra_info or {}).get("lineage") or {}
        labels = dict(label_pairs(version))
        metrics = version.metrics or {}
        return RegisteredVersion(
            registry="pai",
            model=self.model,
            version=version.version_name,
            uri=self._address(model_id, version.version_name),
            run_id=lineage.get(RUN_ID_KEY) or labels.get(RUN_ID_KEY, ""),
            metrics={k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        )

    def _address(self, model_id: str, version: str) -> str:
        return f"pai://{self._hook.region}/{self.workspace_id}/models/{model_id}/versions/{version}"

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        """``call``; the hook's errors name the workspace, the model and the fix."""
        try:
            return call()
        except AlibabaCloudConnectionError as exc:
            raise RegistryError(f"registry: could not {what} for PAI model {self.model!r}: {exc}") from None
        except AlibabaCloudApiError as exc:
            raise RegistryError(
                f"registry: could not {what} for PAI model {self.model!r} in workspace {self.workspace_id}: "
                f"{exc} (fix: {self._fix(exc)})"
            ) from None

    def _fix(self, error: AlibabaCloudApiError) -> str:
        conn = self.settings.alibaba_cloud_conn_id
        if error.code.startswith(("Forbidden", "NoPermission")):
            return (
                f"grant the RAM identity of connection {conn} paiworkspace:{error.action} in workspace "
                f"{self.workspace_id} (all the registry needs: {', '.join(RAM_ACTIONS)}; or "
                "AliyunPAIFullAccess), and make it a workspace member allowed to manage models"
            )
        return (
            f"check that workspace {self.workspace_id} exists in the connection's region and that "
            f"connection {conn} reaches AIWorkspace"
        )
