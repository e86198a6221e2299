"""Stage a dataset version from a pod on ACK that mounts the CPFS root claim (RemoteRun, mode "pod").

The pod runs this project's staging CLI in an image that contains the ``aliyun_training`` package::

    python -m aliyun_training.staging --source oss://bucket/prefix/ --target /mnt/cpfs/datasets/cifar10 \
        --version 2026-11-22 [--endpoint ...] [--region ...] --workers 16

which logs progress lines ("Staged 120/5000 files, ...") and prints the StagedDataset as JSON on
its last stdout line; it exits 2 on bad input and 1 when staging fails, with the error on stderr.

Decisions:

- The pod's name comes from (dataset, version) plus a hash of (source, target, version), so a
  retried task finds the pod it started: ``submit`` reattaches to a Pending, Running or Succeeded
  pod of that name and replaces a Failed one. A pod of that name without our labels is never touched.
- ``restartPolicy: Never``: a failed copy is reported, with its exit code and log tail, rather than
  retried by the kubelet; the engine resumes verified files when the task retries.
- OSS credentials come from a Secret through ``valueFrom.secretKeyRef`` only (the security token
  key is ``optional``); no credential value ever passes through the worker, the pod spec, the
  handle, the result or an error. Without ``credentials_secret`` the pod uses the default chain
  (RRSA through ``service_account``, or the node's instance RAM role).
- ``terminationMessagePolicy: FallbackToLogsOnError``: the kubelet keeps the log tail of a failed
  container in its status, the evidence when the log itself can no longer be read.
- No Kubernetes API token is mounted unless a service account is configured (the copy needs none).
- Reattaching, deleting, polling and reading the log are aliyun_training.kubernetes.pods's, shared with
  the kaniko build pod; this module holds what is the staging's: the pod, the claim check, the result.
- Pending with an image pull error or Unschedulable stays "running" with the reason as progress
  (the trigger's timeout ends it); errors no waiting fixes (``CreateContainerConfigError``: a
  missing Secret or key; ``InvalidImageName``) fail at once.
"""

from __future__ import annotations

import json
import logging
import posixpath
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from aliyun_training.kubernetes.names import managed_labels, stable_name
from aliyun_training.kubernetes.pods import PodRun, PodSettings, bare_pod, read_or_none, tail_text, where
from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.stage_records import StagedDataset
from aliyun_training.validation import SpecError, field_fix, validate_record

log = logging.getLogger(__name__)

CONTAINER = "staging"
VOLUME = "staging"
COMPONENT = "dataset-staging"
DATASET_LABEL = "aliyun-training/dataset"
VERSION_LABEL = "aliyun-training/dataset-version"
SOURCE_ANNOTATION = "aliyun-training/source-uri"
TARGET_ANNOTATION = "aliyun-training/target"
#: Log lines searched for the StagedDataset JSON line (progress lines come before it).
RESULT_TAIL_LINES = 50
EXIT_CODE_MEANINGS = {
    1: "staging failed",
    2: "the staging CLI rejected its input",
    137: "killed, usually for memory (fix: raise memory from {memory} or lower workers)",
}


class StagingPodError(RuntimeError):
    """The staging pod could not be started, finished without a result, or is not ours."""


class PodStagerSettings(PodSettings):
    """Everything a PodStager needs; JSON-serializable, so the trigger rebuilds the stager from it."""

    image: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("give an image that contains aliyun_training"))
    ]
    source_uri: Annotated[
        str, Field(pattern=r"^[a-z0-9]+://", json_schema_extra=field_fix("use oss://bucket/prefix/"))
    ]
    target_root: Annotated[
        str,
        Field(pattern=r"^/", json_schema_extra=field_fix("use an absolute path under mount_path")),
    ]
    version: Annotated[
        str,
        Field(
            pattern=DATASET_VERSION_PATTERN,
            json_schema_extra=field_fix("use letters, digits, '.', '_' or '-' (e.g. 2026-11-22)"),
        ),
    ]
    staging_pvc: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("name the claim of the CPFS root volume"))
    ]
    #: Where the staging claim is mounted (read-write) in the pod; target_root lies under it.
    mount_path: Annotated[str, Field(pattern=r"^/", json_schema_extra=field_fix("use an absolute path"))] = (
        "/mnt/cpfs"
    )
    #: Name used in the pod's name and labels; defaults to target_root's last directory.
    dataset: str | None = None
    oss_endpoint: str | None = None
    region: str | None = None
    #: Secret holding the OSS AccessKey pair (and optionally an STS token); None: default chain.
    credentials_secret: str | None = None
    access_key_id_key: str = "akId"
    access_key_secret_key: str = "akSecret"
    #: Key of an STS token in the Secret, injected when present (optional); None: never injected.
    security_token_key: str | None = "securityToken"
    workers: Annotated[int, Field(ge=1, le=256, json_schema_extra=field_fix("use 1 to 256 workers"))] = 16

    @field_validator("target_root", "mount_path")
    @classmethod
    def _normalized(cls, path: str) -> str:
        return posixpath.normpath(path)

    @model_validator(mode="after")
    def _target_on_the_claim(self) -> PodStagerSettings:
        if not self.target_root.startswith(self.mount_path.rstrip("/") + "/"):
            raise ValueError(
                f"target_root: {self.target_root} is not under the staging claim's mount path "
                f"{self.mount_path} (fix: use {self.mount_path}/<dir>, or set mount_path)"
            )
        return self

    @property
    def dataset_name(self) -> str:
        return self.dataset or posixpath.basename(self.target_root)


def staging_pod_name(settings: PodStagerSettings) -> str:
    """``stage-<dataset>-<version>-<hash>``: a DNS-1123 label, the same for every try of one staging."""
    identity = "\n".join(
        (settings.installation or "", settings.source_uri, settings.target_root, settings.version)
    )
    return stable_name(f"stage-{settings.dataset_name}-{settings.version}", identity)


def pod_labels(settings: PodStagerSettings) -> dict[str, str]:
    return managed_labels(
        COMPONENT,
        settings.installation,
        **{DATASET_LABEL: settings.dataset_name, VERSION_LABEL: settings.version},
    )


def staging_args(settings: PodStagerSettings) -> list[str]:
    args = ["--source", settings.source_uri, "--target", settings.target_root, "--version", settings.version]
    if settings.oss_endpoint:
        args += ["--endpoint", settings.oss_endpoint]
    if settings.region:
        args += ["--region", settings.region]
    return [*args, "--workers", str(settings.workers)]


def _credential_env(settings: PodStagerSettings) -> list[dict[str, Any]]:
    if not settings.credentials_secret:
        return []
    keys = [
        ("ALIBABA_CLOUD_ACCESS_KEY_ID", settings.access_key_id_key, False),
        ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", settings.access_key_secret_key, False),
    ]
    if settings.security_token_key:
        keys.append(("ALIBABA_CLOUD_SECURITY_TOKEN", settings.security_token_key, True))
    env = []
    for name, key, optional in keys:
        ref: dict[str, Any] = {"name": settings.credentials_secret, "key": key}
        if optional:
            ref["optional"] = True
        env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return env


def build_pod(settings: PodStagerSettings | dict[str, Any]) -> dict[str, Any]:
    """The staging pod, as sent to the API server."""
    settings = validate_record(PodStagerSettings, settings)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "aliyun_training.staging"],
        "args": staging_args(settings),
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *_credential_env(settings)],
        "resources": {
            "requests": {"cpu": settings.cpu, "memory": settings.memory},
            "limits": {"memory": settings.memory},
        },
        "volumeMounts": [{"name": VOLUME, "mountPath": settings.mount_path}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    volumes = [{"name": VOLUME, "persistentVolumeClaim": {"claimName": settings.staging_pvc}}]
    metadata = {
        "name": staging_pod_name(settings),
        "namespace": settings.namespace,
        "labels": pod_labels(settings),
        "annotations": {
            SOURCE_ANNOTATION: settings.source_uri,
            TARGET_ANNOTATION: posixpath.join(settings.target_root, settings.version),
        },
    }
    return bare_pod(settings, metadata, container, volumes)


class PodStager(PodRun[PodStagerSettings]):
    """RemoteRun that runs the staging CLI in a pod on ACK mounting the CPFS root claim."""

    mode = "pod"
    noun = "staging"
    component = COMPONENT
    container = CONTAINER
    error = StagingPodError
    exit_code_meanings = EXIT_CODE_MEANINGS
    name_pod = staticmethod(staging_pod_name)

    def relative_path(self, uri: str) -> str:
        """Where ``uri`` (a path in the pod) lies relative to the staging claim's root, e.g. for a PV path."""
        relative = posixpath.relpath(posixpath.normpath(uri), self.settings.mount_path)
        if relative == ".." or relative.startswith("../"):
            raise SpecError(f"uri: {uri} is not under the staging mount path {self.settings.mount_path}")
        return relative

    # -- RemoteRun ----------------------------------------------------------------------------

    def submit(self) -> dict[str, Any]:
        """Reattach to this version's pod, or create it (replacing a Failed one)."""
        hook = self.hook()
        pod = self.reattach(hook)
        if pod is None:
            self._check_claim(hook)
            pod = self.create_pod(hook, build_pod(self.settings))
            log.info(
                "Started staging pod %s/%s: %s -> %s/%s",
                self.settings.namespace,
                pod.metadata.name,
                self.settings.source_uri,
                self.settings.target_root,
                self.settings.version,
            )
        return self.handle_for(pod)

    def result(self, handle: dict[str, Any]) -> StagedDataset:
        """Parse the StagedDataset from the pod's last JSON log line, then delete the pod."""
        hook = self.hook()
        self.succeeded_pod(hook, handle, "result")
        lines = self.tail(hook, handle, RESULT_TAIL_LINES)
        try:
            staged = self._parse(lines, handle)
        finally:
            # Gone either way: a retry then runs the staging again (verified files are skipped).
            self.remove(hook, handle)
        log.info("Staging pod %s staged %s (%d files)", where(handle), staged.uri, staged.files)
        return staged

    # -- helpers ---------------------------------------------------------------------------------

    def _check_claim(self, hook: Any) -> None:
        """A missing claim would leave the pod Pending until the trigger's timeout: fail now."""
        namespace, claim = self.settings.namespace, self.settings.staging_pvc
        pvc = read_or_none(hook.core_v1_client.read_namespaced_persistent_volume_claim, claim, namespace)
        if pvc is None:
            raise SpecError(
                f"staging_pvc: claim {claim} does not exist in namespace {namespace} (fix: create the "
                "CPFS root volume's PV and claim, or name an existing claim)"
            )
        phase = pvc.status.phase if pvc.status else None
        if phase != "Bound":
            log.warning("Staging claim %s/%s is %s, not Bound: the pod waits for it", namespace, claim, phase)

    def _parse(self, lines: list[str], handle: dict[str, Any]) -> StagedDataset:
        for line in reversed(lines):
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                break
        else:
            raise StagingPodError(
                f"staging pod {where(handle)} succeeded but printed no StagedDataset JSON line (fix: use an "
                "image whose aliyun_training.staging prints it); last log lines:\n" + tail_text(lines)
            )
        # The engine reports itself as "direct"; the claim is filled in once the version's volume exists.
        source = record.get("source_uri") or self.settings.source_uri
        record = {**record, "mode": "pod", "pvc": None, "source_uri": source}
        try:
            staged = validate_record(StagedDataset, record)
        except SpecError as exc:
            raise StagingPodError(
                f"staging pod {where(handle)} printed an invalid StagedDataset: {exc}"
            ) from None
        if staged.version != self.settings.version:
            raise StagingPodError(
                f"staging pod {where(handle)} staged version {staged.version}, not {self.settings.version}"
            )
        return staged
