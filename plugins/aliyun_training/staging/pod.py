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
- Pending with an image pull error or Unschedulable stays "running" with the reason as progress
  (the trigger's timeout ends it); errors no waiting fixes (``CreateContainerConfigError``: a
  missing Secret or key; ``InvalidImageName``) fail at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import re
import time
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aliyun_training.remote import RemoteStatus
from aliyun_training.spec import DATASET_VERSION_PATTERN, SpecError, StagedDataset, validate_record

log = logging.getLogger(__name__)

CONTAINER = "staging"
VOLUME = "staging"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "aliyun-training"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "dataset-staging"
DATASET_LABEL = "aliyun-training/dataset"
VERSION_LABEL = "aliyun-training/dataset-version"
SOURCE_ANNOTATION = "aliyun-training/source-uri"
TARGET_ANNOTATION = "aliyun-training/target"
#: Log lines a failure message carries.
FAILURE_TAIL_LINES = 20
#: Log lines searched for the StagedDataset JSON line (progress lines come before it).
RESULT_TAIL_LINES = 50
#: How long ``submit`` waits for a replaced pod to be gone.
DELETE_WAIT_SECONDS = 60.0
#: Waiting reasons that no amount of waiting fixes.
FATAL_WAITING_REASONS = frozenset({"CreateContainerConfigError", "InvalidImageName"})
#: Waiting reasons that mean "still starting", not a problem.
STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
EXIT_CODE_MEANINGS = {
    1: "staging failed",
    2: "the staging CLI rejected its input",
    137: "killed, usually for memory (fix: raise memory from {memory} or lower workers)",
}

_DNS_LABEL_MAX = 63


class StagingPodError(RuntimeError):
    """The staging pod could not be started, finished without a result, or is not ours."""


class PodStagerSettings(BaseModel):
    """Everything a PodStager needs; JSON-serializable, so the trigger rebuilds the stager from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubernetes_conn_id: str = "kubernetes_default"
    namespace: str = "default"
    image: Annotated[
        str, Field(min_length=1, json_schema_extra={"fix": "give an image that contains aliyun_training"})
    ]
    source_uri: Annotated[
        str, Field(pattern=r"^[a-z0-9]+://", json_schema_extra={"fix": "use oss://bucket/prefix/"})
    ]
    target_root: Annotated[
        str,
        Field(pattern=r"^/", json_schema_extra={"fix": "use an absolute path under mount_path"}),
    ]
    version: Annotated[
        str,
        Field(
            pattern=DATASET_VERSION_PATTERN,
            json_schema_extra={"fix": "use letters, digits, '.', '_' or '-' (e.g. 2026-11-22)"},
        ),
    ]
    staging_pvc: Annotated[
        str, Field(min_length=1, json_schema_extra={"fix": "name the claim of the CPFS root volume"})
    ]
    #: Where the staging claim is mounted (read-write) in the pod; target_root lies under it.
    mount_path: Annotated[str, Field(pattern=r"^/", json_schema_extra={"fix": "use an absolute path"})] = (
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
    cpu: str = "2"
    memory: str = "4Gi"
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    service_account: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=list)
    workers: Annotated[int, Field(ge=1, le=256, json_schema_extra={"fix": "use 1 to 256 workers"})] = 16

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
    identity = "\n".join((settings.source_uri, settings.target_root, settings.version))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    readable = re.sub(r"[^a-z0-9]+", "-", f"stage-{settings.dataset_name}-{settings.version}".lower())
    return f"{readable.strip('-')[: _DNS_LABEL_MAX - len(digest) - 1].rstrip('-')}-{digest}"


def _label_value(text: str) -> str:
    """A label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:_DNS_LABEL_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def pod_labels(settings: PodStagerSettings) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: COMPONENT,
        DATASET_LABEL: _label_value(settings.dataset_name),
        VERSION_LABEL: _label_value(settings.version),
    }


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
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": settings.staging_pvc}}],
        "automountServiceAccountToken": settings.service_account is not None,
    }
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": staging_pod_name(settings),
            "namespace": settings.namespace,
            "labels": pod_labels(settings),
            "annotations": {
                SOURCE_ANNOTATION: settings.source_uri,
                TARGET_ANNOTATION: posixpath.join(settings.target_root, settings.version),
            },
        },
        "spec": spec,
    }


class PodStager:
    """RemoteRun that runs the staging CLI in a pod on ACK mounting the CPFS root claim."""

    mode = "pod"

    def __init__(self, **config: Any) -> None:
        self.settings = validate_record(PodStagerSettings, config)
        self._sync_hook: Any = None
        self._async_hook_instance: Any = None

    @property
    def config(self) -> dict[str, Any]:
        return self.settings.model_dump(mode="json")

    @property
    def pod_name(self) -> str:
        return staging_pod_name(self.settings)

    def relative_path(self, uri: str) -> str:
        """Where ``uri`` (a path in the pod) lies relative to the staging claim's root, e.g. for a PV path."""
        relative = posixpath.relpath(posixpath.normpath(uri), self.settings.mount_path)
        if relative == ".." or relative.startswith("../"):
            raise SpecError(f"uri: {uri} is not under the staging mount path {self.settings.mount_path}")
        return relative

    # -- clients ---------------------------------------------------------------------------------

    def _hook(self) -> Any:
        if self._sync_hook is None:
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

            self._sync_hook = KubernetesHook(conn_id=self.settings.kubernetes_conn_id)
        return self._sync_hook

    def _async_hook(self) -> Any:
        if self._async_hook_instance is None:
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

            self._async_hook_instance = AsyncKubernetesHook(conn_id=self.settings.kubernetes_conn_id)
        return self._async_hook_instance

    # -- RemoteRun ----------------------------------------------------------------------------

    def submit(self) -> dict[str, Any]:
        """Reattach to this version's pod, or create it (replacing a Failed one)."""
        from kubernetes.client.exceptions import ApiException

        hook, name, namespace = self._hook(), self.pod_name, self.settings.namespace
        existing = self._read_pod(hook, name)
        if existing is not None:
            self._check_ours(existing)
            phase = existing.status.phase if existing.status else None
            if existing.metadata.deletion_timestamp is None and phase != "Failed":
                log.info("Reattaching to staging pod %s/%s (%s)", namespace, name, phase)
                return self._handle(existing)
            log.info("Replacing staging pod %s/%s of an earlier attempt (%s)", namespace, name, phase)
            self._delete(hook, name, existing.metadata.uid)
            self._wait_gone(hook, name)
        self._check_claim(hook)
        try:
            created = hook.core_v1_client.create_namespaced_pod(namespace, build_pod(self.settings))
        except ApiException as exc:
            if exc.status != 409:
                raise
            created = self._read_pod(hook, name)  # another worker created it just now
            if created is None:
                raise
            self._check_ours(created)
        log.info(
            "Started staging pod %s/%s: %s -> %s/%s",
            namespace,
            name,
            self.settings.source_uri,
            self.settings.target_root,
            self.settings.version,
        )
        return self._handle(created)

    async def apoll(self, handle: dict[str, Any]) -> RemoteStatus:
        from kubernetes_asyncio.client.exceptions import ApiException

        hook = self._async_hook()
        try:
            pod = await hook.get_pod(handle["pod"], handle["namespace"])
        except ApiException as exc:
            if exc.status == 404:
                return RemoteStatus("failed", f"staging pod {_where(handle)} was deleted before it finished")
            raise
        if handle.get("uid") and pod.metadata.uid != handle["uid"]:
            return RemoteStatus("failed", f"staging pod {_where(handle)} was replaced by another attempt")
        phase = pod.status.phase if pod.status else None
        if phase == "Succeeded":
            return RemoteStatus("succeeded")
        if phase == "Failed":
            lines = await self._atail(handle, FAILURE_TAIL_LINES)
            return RemoteStatus("failed", failure_message(pod, lines, self.settings))
        if phase == "Running":
            lines = await self._atail(handle, 5)
            return RemoteStatus("running", progress=lines[-1] if lines else f"pod {_where(handle)} Running")
        if phase == "Unknown":
            return RemoteStatus(
                "running", progress=f"pod {_where(handle)} Unknown: its node stopped reporting"
            )
        problem, fatal = pending_problem(pod)
        if fatal:
            return RemoteStatus("failed", f"staging pod {_where(handle)} cannot start: {problem}")
        return RemoteStatus("running", progress=f"pod {_where(handle)} {phase or 'Pending'}: {problem}")

    def result(self, handle: dict[str, Any]) -> StagedDataset:
        """Parse the StagedDataset from the pod's last JSON log line, then delete the pod."""
        hook = self._hook()
        pod = self._read_pod(hook, handle["pod"], handle["namespace"])
        if pod is None:
            raise StagingPodError(f"staging pod {_where(handle)} is gone: its result cannot be read")
        phase = pod.status.phase if pod.status else None
        if phase != "Succeeded":
            raise StagingPodError(f"staging pod {_where(handle)} is {phase}, not Succeeded")
        lines = self._tail(hook, handle, RESULT_TAIL_LINES)
        try:
            staged = self._parse(lines, handle)
        finally:
            # Gone either way: a retry then runs the staging again (verified files are skipped).
            self._delete(hook, handle["pod"], None, handle["namespace"])
        log.info("Staging pod %s staged %s (%d files)", _where(handle), staged.uri, staged.files)
        return staged

    def stop(self, handle: dict[str, Any]) -> None:
        """Delete the pod of this handle (not a newer attempt's pod of the same name); gone is fine."""
        self._delete(self._hook(), handle["pod"], handle.get("uid"), handle["namespace"])

    # -- helpers ---------------------------------------------------------------------------------

    def _handle(self, pod: Any) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "namespace": self.settings.namespace,
            "pod": pod.metadata.name,
            "uid": pod.metadata.uid,
        }

    def _read_pod(self, hook: Any, name: str, namespace: str | None = None) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return hook.get_pod(name, namespace or self.settings.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _check_ours(self, pod: Any) -> None:
        labels = pod.metadata.labels or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY or labels.get(COMPONENT_LABEL) != COMPONENT:
            raise StagingPodError(
                f"pod {self.settings.namespace}/{pod.metadata.name} exists but is not a staging pod of "
                f"this pipeline (labels {MANAGED_BY_LABEL}={MANAGED_BY}, {COMPONENT_LABEL}={COMPONENT} "
                "missing) (fix: delete or rename that pod; it is never touched here)"
            )

    def _check_claim(self, hook: Any) -> None:
        """A missing claim would leave the pod Pending until the trigger's timeout: fail now."""
        from kubernetes.client.exceptions import ApiException

        namespace, claim = self.settings.namespace, self.settings.staging_pvc
        try:
            pvc = hook.core_v1_client.read_namespaced_persistent_volume_claim(claim, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise SpecError(
                    f"staging_pvc: claim {claim} does not exist in namespace {namespace} (fix: create the "
                    "CPFS root volume's PV and claim, or name an existing claim)"
                ) from None
            raise
        phase = pvc.status.phase if pvc.status else None
        if phase != "Bound":
            log.warning("Staging claim %s/%s is %s, not Bound: the pod waits for it", namespace, claim, phase)

    def _delete(self, hook: Any, name: str, uid: str | None, namespace: str | None = None) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            hook.core_v1_client.delete_namespaced_pod(
                name, namespace or self.settings.namespace, body=options
            )
            log.info("Deleted staging pod %s/%s", namespace or self.settings.namespace, name)
        except ApiException as exc:
            # 404: already gone; 409: the uid precondition failed, the pod is a newer attempt's.
            if exc.status not in (404, 409):
                raise

    def _wait_gone(self, hook: Any, name: str) -> None:
        deadline = time.monotonic() + DELETE_WAIT_SECONDS
        while self._read_pod(hook, name) is not None:
            if time.monotonic() >= deadline:
                raise StagingPodError(
                    f"staging pod {self.settings.namespace}/{name} of an earlier attempt is still being "
                    f"deleted after {DELETE_WAIT_SECONDS:.0f} s (fix: check its finalizers and node)"
                )
            time.sleep(0.2)

    def _tail(self, hook: Any, handle: dict[str, Any], lines: int) -> list[str]:
        """The sync client mangles log text when it decodes it: read the raw bytes."""
        from kubernetes.client.exceptions import ApiException

        try:
            response = hook.core_v1_client.read_namespaced_pod_log(
                **_log_args(handle, lines), _preload_content=False
            )
        except ApiException as exc:
            if exc.status in (400, 404):
                return []
            raise
        return _lines(response.data)

    async def _atail(self, handle: dict[str, Any], lines: int) -> list[str]:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        async with self._async_hook().get_conn() as api:
            try:
                response = await client.CoreV1Api(api).read_namespaced_pod_log(
                    **_log_args(handle, lines), _preload_content=False
                )
                return _lines(await response.read())
            except ApiException as exc:
                if exc.status in (400, 404):
                    return []
                raise

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
                f"staging pod {_where(handle)} succeeded but printed no StagedDataset JSON line (fix: use an "
                "image whose aliyun_training.staging prints it); last log lines:\n" + _tail_text(lines)
            )
        # The engine reports itself as "direct"; the claim is filled in once the version's volume exists.
        source = record.get("source_uri") or self.settings.source_uri
        record = {**record, "mode": "pod", "pvc": None, "source_uri": source}
        try:
            staged = validate_record(StagedDataset, record)
        except SpecError as exc:
            raise StagingPodError(
                f"staging pod {_where(handle)} printed an invalid StagedDataset: {exc}"
            ) from None
        if staged.version != self.settings.version:
            raise StagingPodError(
                f"staging pod {_where(handle)} staged version {staged.version}, not {self.settings.version}"
            )
        return staged


# -- interpreting pods (models of either client: the attribute names are the same) ---------------


def pending_problem(pod: Any) -> tuple[str, bool]:
    """Why a Pending pod is not running yet, and whether waiting can fix it."""
    status = pod.status
    for condition in (status.conditions if status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f"{condition.reason}: {condition.message or ''}".strip(": "), False
    for container in (status.container_statuses if status else None) or []:
        waiting = container.state.waiting if container.state else None
        if waiting and waiting.reason and waiting.reason not in STARTING_REASONS:
            text = f"{waiting.reason}: {waiting.message or ''}".strip(": ")
            return text, waiting.reason in FATAL_WAITING_REASONS
    return "waiting for the container to start", False


def failure_message(pod: Any, lines: list[str], settings: PodStagerSettings) -> str:
    """Exit code, reason and log tail of a Failed staging pod."""
    where = f"{pod.metadata.namespace}/{pod.metadata.name}"
    terminated = None
    for container in (pod.status.container_statuses if pod.status else None) or []:
        if container.state and container.state.terminated:
            terminated = container.state.terminated
    parts = [f"staging pod {where} failed"]
    if terminated is not None:
        code = terminated.exit_code
        meaning = EXIT_CODE_MEANINGS.get(code, "").format(memory=settings.memory)
        parts.append(
            f": container {CONTAINER} exited with code {code} ({terminated.reason or 'Error'})"
            + (f", {meaning}" if meaning else "")
        )
        if not lines and terminated.message:
            lines = terminated.message.splitlines()[-FAILURE_TAIL_LINES:]
    if pod.status and pod.status.reason:
        parts.append(f"; pod {pod.status.reason}: {pod.status.message or ''}".rstrip(": "))
    text = "".join(parts)
    return text + ("; last log lines:\n" + _tail_text(lines) if lines else "; no log")


def _where(handle: dict[str, Any]) -> str:
    return f"{handle['namespace']}/{handle['pod']}"


def _log_args(handle: dict[str, Any], lines: int) -> dict[str, Any]:
    return {
        "name": handle["pod"],
        "namespace": handle["namespace"],
        "container": CONTAINER,
        "tail_lines": lines,
    }


def _lines(data: bytes | str) -> list[str]:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def _tail_text(lines: list[str]) -> str:
    return "\n".join(f"  {line}" for line in lines[-FAILURE_TAIL_LINES:])
