"""Build and push the training image from a kaniko pod on ACK (RemoteRun, mode "kaniko").

The build context is small (the Dockerfile and the check script), so it travels in a ConfigMap
``<pod>-context`` next to the pod; kaniko pushes with the credentials of a
``kubernetes.io/dockerconfigjson`` Secret that the pod mounts and this code never reads. The pod runs::

    /kaniko/executor --context=dir:///kaniko/buildcontext --dockerfile=Dockerfile \\
        --destination=<registry/namespace/repo:tag> --cache=true --cache-repo=<repo>/cache \\
        --build-arg=K=V ... --digest-file=/dev/termination-log [extra_args]

and the pushed digest comes back as the container's termination message.

Decisions:

- Builder image: ``ghcr.io/osscontainertools/kaniko:v1.28.3``, a release of the maintained kaniko
  fork osscontainertools/kaniko. Upstream GoogleContainerTools/kaniko was archived in June 2025 and
  its ``gcr.io/kaniko-project/executor`` images are no longer updated; Chainguard's fork publishes
  no public images. The fork keeps upstream's ``/kaniko/executor`` entrypoint, ``/kaniko/.docker``
  Docker config and every flag used here (``--context=dir://``, ``--dockerfile``,
  ``--destination``, ``--cache``, ``--cache-repo``, ``--build-arg``, ``--digest-file``), so another
  executor image (a mirror, another fork, upstream's last ``v1.24.0``) is a ``builder_image``
  setting, not a code change. ACK nodes in mainland China regions usually cannot pull from ghcr.io:
  mirror the image into ACR and set ``builder_image`` to the mirror.
- The context files are mounted one by one (``subPath``) over an ``emptyDir`` at
  /kaniko/buildcontext (kaniko's own context directory), not
  as a ConfigMap directory: the kubelet writes a ConfigMap directory as symlinks into ``..data/``,
  and kaniko's COPY copies such symlinks as symlinks, leaving the image with dangling links
  (GoogleContainerTools/kaniko#2762). A subPath mount is the file itself. Not /workspace: kaniko
  leaves every mount point out of the image, and the Dockerfile copies the training code there.
- Names come from (repository, tag): a retried task reattaches to its Pending, Running or
  Succeeded pod and replaces a Failed one (or one built from other inputs, which only happens when
  the tag is not content-addressed); pods and ConfigMaps without our labels are never touched. An
  existing ConfigMap with the same data is reused, one with other data is replaced. The ConfigMap
  is owned by nothing (it must exist before the pod); ``result`` and ``stop`` delete it.
- ``restartPolicy: Never``; ``terminationMessagePolicy: FallbackToLogsOnError`` (a failed build
  writes no digest, so the kubelet keeps its log tail instead); no Kubernetes API token is mounted
  unless a service account is configured.
- No registry credential passes through the worker: the Secret is referenced by name only, and
  ``submit`` does not read it. A missing Secret (or one without ``.dockerconfigjson``) shows as the
  kubelet's FailedMount; that, like a missing Secret for an env var in the staging pod, fails the
  run at once: no waiting creates it. Other FailedMount events are progress.
- Build arguments are visible in the pod spec and in the image's history: never pass credentials
  through them.
- Reattaching, deleting, polling and reading the log are aliyun_training.kubernetes.pods's, shared with
  the staging pod; this module holds what is the build's: the pod, the context ConfigMap, the
  digest, and reading kaniko's log for the failing step.
- kaniko runs as root in its container: a namespace enforcing the ``restricted`` Pod Security
  Standard refuses the pod.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import re
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from aliyun_training.hooks.kubernetes import alist_all
from aliyun_training.kubernetes.names import managed_labels, stable_name
from aliyun_training.kubernetes.pod_status import pending_problem, terminated_state
from aliyun_training.kubernetes.pods import (
    PodRun,
    PodSettings,
    bare_pod,
    delete_object,
    read_or_none,
    tail_text,
    text_lines,
    where,
)
from aliyun_training.validation import SpecError, field_fix, validate_record

log = logging.getLogger(__name__)

#: A pinned release of the maintained fork osscontainertools/kaniko (its executor image); see the
#: module docs.
DEFAULT_BUILDER_IMAGE = "ghcr.io/osscontainertools/kaniko:v1.28.3"
CONTAINER = "kaniko"
CONTEXT_DIR = "/kaniko/buildcontext"
CONTEXT_DIR_VOLUME = "workspace"
CONTEXT_VOLUME = "context"
REGISTRY_VOLUME = "registry-auth"
DOCKER_CONFIG_DIR = "/kaniko/.docker"
DOCKER_CONFIG_KEY = ".dockerconfigjson"
TERMINATION_LOG = "/dev/termination-log"
COMPONENT = "image-build"
REPOSITORY_LABEL = "aliyun-training/image-repository"
TAG_LABEL = "aliyun-training/image-tag"
IMAGE_ANNOTATION = "aliyun-training/image"
BUILD_ANNOTATION = "aliyun-training/build-sha256"
#: Log lines searched for the failing step (a failure message shows the last 20).
STEP_SEARCH_LINES = 500
#: Log lines a result carries.
RESULT_TAIL_LINES = 20
#: A ConfigMap holds at most 1 MiB; leave room for its metadata.
MAX_CONTEXT_BYTES = 1_000_000
#: Flags this module sets itself (or that would break what ``result`` relies on).
RESERVED_FLAGS = frozenset(
    {"--context", "--dockerfile", "--destination", "--digest-file", "--cache", "--cache-repo", "--no-push"}
)
EXIT_CODE_MEANINGS = {137: "killed, usually for memory (fix: raise memory from {memory})"}

_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_REPOSITORY = r"[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9][a-z0-9._-]*)+"
_DESTINATION = re.compile(rf"^(?P<repository>{_REPOSITORY}):(?P<tag>{_TAG})$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Dockerfile instructions, which kaniko logs as it runs each step.
_INSTRUCTIONS = (
    "FROM",
    "RUN",
    "COPY",
    "ADD",
    "ARG",
    "ENV",
    "WORKDIR",
    "USER",
    "LABEL",
    "EXPOSE",
    "ENTRYPOINT",
    "CMD",
    "SHELL",
    "VOLUME",
    "ONBUILD",
    "HEALTHCHECK",
    "STOPSIGNAL",
    "MAINTAINER",
)
#: kaniko logs each Dockerfile instruction as written, e.g. ``INFO[0005] RUN apt-get install -y ...``.
_STEP = re.compile(
    r"^(?:INFO|DEBU|WARN)\[[0-9]+\]\s+(?P<step>(?:"
    + "|".join(f"{word}|{word.lower()}" for word in _INSTRUCTIONS)
    + r")\s.*)$"
)
#: kaniko's last word: ``error building image: ...`` (bare, or as a logrus ERRO/FATA line).
_ERROR = re.compile(r"^(?:(?:ERRO|FATA)\[[0-9]+\]\s+)?(?:Error: )?(?P<error>error\b.*)$")


class KanikoBuildError(RuntimeError):
    """The build pod could not be started, finished without a digest, or is not ours."""


class KanikoSettings(PodSettings):
    """Everything a KanikoBuilder needs; JSON-serializable, so the trigger rebuilds the builder from it."""

    builder_image: Annotated[
        str,
        Field(
            min_length=1, json_schema_extra=field_fix("give a kaniko executor image, e.g. a mirror in ACR")
        ),
    ] = DEFAULT_BUILDER_IMAGE
    destination: Annotated[
        str,
        Field(
            pattern=_DESTINATION.pattern,
            json_schema_extra=field_fix("give registry/namespace/repo:tag, without a digest"),
        ),
    ]
    tag: Annotated[
        str, Field(pattern=f"^{_TAG}$", json_schema_extra=field_fix("use the content-addressed tag"))
    ]
    #: File path in the context -> text; empty is accepted here (settings checks), refused by submit.
    context_files: dict[str, str] = Field(default_factory=dict)
    dockerfile: str = "Dockerfile"
    build_args: dict[str, str] = Field(default_factory=dict)
    #: A kubernetes.io/dockerconfigjson Secret with push access to destination (and cache_repo).
    registry_secret: Annotated[
        str,
        Field(
            pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
            json_schema_extra=field_fix("name a kubernetes.io/dockerconfigjson Secret in the namespace"),
        ),
    ]
    #: Repository of kaniko's layer cache; None: ``<destination repository>/cache``.
    cache_repo: Annotated[
        str | None,
        Field(
            pattern=f"^{_REPOSITORY}$", json_schema_extra=field_fix("give registry/namespace/repo, no tag")
        ),
    ] = None
    cache: bool = True
    memory: str = "8Gi"
    #: Node disk the build may use (kaniko unpacks the base image there); None: no request.
    ephemeral_storage: str | None = None
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("context_files")
    @classmethod
    def _context_paths(cls, files: dict[str, str]) -> dict[str, str]:
        for path in files:
            _check_context_path(path)
        size = sum(len(path.encode()) + len(text.encode()) for path, text in files.items())
        if size > MAX_CONTEXT_BYTES:
            raise ValueError(
                f"the build context is {size} bytes, more than a ConfigMap holds ({MAX_CONTEXT_BYTES}) "
                "(fix: keep the context to the Dockerfile and small scripts; download big files in a "
                "RUN step)"
            )
        return files

    @field_validator("dockerfile")
    @classmethod
    def _dockerfile_path(cls, path: str) -> str:
        _check_context_path(path)
        return path

    @field_validator("build_args")
    @classmethod
    def _build_arg_names(cls, args: dict[str, str]) -> dict[str, str]:
        for name in args:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not a build argument name (fix: use letters, digits and _)")
        return args

    @field_validator("extra_args")
    @classmethod
    def _extra_flags(cls, args: list[str]) -> list[str]:
        for arg in args:
            flag = arg.split("=", 1)[0]
            if not arg.startswith("--"):
                raise ValueError(f"{arg!r} is not a flag (fix: give kaniko flags as --name=value)")
            if flag in RESERVED_FLAGS:
                raise ValueError(f"{flag} is set by the builder (fix: use its setting instead)")
        return args

    @model_validator(mode="after")
    def _consistent(self) -> KanikoSettings:
        match = _DESTINATION.fullmatch(self.destination)
        if match and match["tag"] != self.tag:
            raise ValueError(
                f"destination: {self.destination} is not tagged {self.tag} (fix: push the content-addressed "
                "tag, registry/namespace/repo:<tag>)"
            )
        if self.context_files and self.dockerfile not in self.context_files:
            raise ValueError(
                f"dockerfile: {self.dockerfile} is not among the context files "
                f"{sorted(self.context_files)} (fix: add it, or name the one that is the Dockerfile)"
            )
        return self

    @property
    def repository(self) -> str:
        return self.destination.rsplit(":", 1)[0]

    @property
    def cache_repository(self) -> str:
        return self.cache_repo or f"{self.repository}/cache"


def _check_context_path(path: str) -> None:
    parts = path.split("/")
    if posixpath.normpath(path) != path or any(
        part in (".", "..") or not _CONFIG_KEY.fullmatch(part) for part in parts
    ):
        raise ValueError(
            f"{path!r} is not a relative path of the build context (fix: use names of letters, digits, "
            "'-', '_' and '.', separated by '/')"
        )


# -- what is sent ---------------------------------------------------------------------------------


def build_hash(settings: KanikoSettings) -> str:
    """sha256 of everything that decides the pushed image: a pod of another hash is not reattached."""
    inputs = {
        "destination": settings.destination,
        "dockerfile": settings.dockerfile,
        "context_files": settings.context_files,
        "build_args": settings.build_args,
        "extra_args": settings.extra_args,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def build_pod_name(settings: KanikoSettings) -> str:
    """``kaniko-<repo>-<tag>-<hash>``: a DNS-1123 label, the same for every try of one build."""
    repo = settings.repository.rsplit("/", 1)[-1]
    return stable_name(
        f"kaniko-{repo}-{settings.tag}", f"{settings.installation or ''}\n{settings.destination}"
    )


def context_map_name(pod_name: str) -> str:
    return f"{pod_name}-context"


def context_key(path: str) -> str:
    """The ConfigMap key of a context file: its name, or (in a subdirectory) a name made unique."""
    if _CONFIG_KEY.fullmatch(path):
        return path
    return f"{hashlib.sha256(path.encode()).hexdigest()[:12]}-{path.rsplit('/', 1)[-1]}"


def build_labels(settings: KanikoSettings) -> dict[str, str]:
    repository = settings.repository.rsplit("/", 1)[-1]
    return managed_labels(
        COMPONENT, settings.installation, **{REPOSITORY_LABEL: repository, TAG_LABEL: settings.tag}
    )


def _metadata(settings: KanikoSettings, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": build_labels(settings),
        "annotations": {IMAGE_ANNOTATION: settings.destination, BUILD_ANNOTATION: build_hash(settings)},
    }


def build_context_map(settings: KanikoSettings | dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap holding the build context, as sent to the API server."""
    settings = validate_record(KanikoSettings, settings)
    name = context_map_name(build_pod_name(settings))
    data = {context_key(path): text for path, text in sorted(settings.context_files.items())}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(settings, name), "data": data}


def kaniko_args(settings: KanikoSettings) -> list[str]:
    args = [
        f"--context=dir://{CONTEXT_DIR}",
        f"--dockerfile={settings.dockerfile}",
        f"--destination={settings.destination}",
    ]
    if settings.cache:
        args += ["--cache=true", f"--cache-repo={settings.cache_repository}"]
    args += [f"--build-arg={key}={settings.build_args[key]}" for key in sorted(settings.build_args)]
    return [*args, f"--digest-file={TERMINATION_LOG}", *settings.extra_args]


def build_pod(settings: KanikoSettings | dict[str, Any]) -> dict[str, Any]:
    """The kaniko pod, as sent to the API server."""
    settings = validate_record(KanikoSettings, settings)
    name = build_pod_name(settings)
    requests = {"cpu": settings.cpu, "memory": settings.memory}
    if settings.ephemeral_storage:
        requests["ephemeral-storage"] = settings.ephemeral_storage
    mounts: list[dict[str, Any]] = [{"name": CONTEXT_DIR_VOLUME, "mountPath": CONTEXT_DIR}]
    mounts += [
        {
            "name": CONTEXT_VOLUME,
            "mountPath": posixpath.join(CONTEXT_DIR, path),
            "subPath": context_key(path),
            "readOnly": True,
        }
        for path in sorted(settings.context_files)
    ]
    mounts.append({"name": REGISTRY_VOLUME, "mountPath": DOCKER_CONFIG_DIR, "readOnly": True})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.builder_image,
        "imagePullPolicy": "IfNotPresent",
        "args": kaniko_args(settings),
        "resources": {"requests": requests, "limits": {"memory": settings.memory}},
        "volumeMounts": mounts,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    volumes = [
        {"name": CONTEXT_DIR_VOLUME, "emptyDir": {}},
        {"name": CONTEXT_VOLUME, "configMap": {"name": context_map_name(name)}},
        {
            "name": REGISTRY_VOLUME,
            "secret": {
                "secretName": settings.registry_secret,
                "items": [{"key": DOCKER_CONFIG_KEY, "path": "config.json"}],
            },
        },
    ]
    return bare_pod(settings, _metadata(settings, name), container, volumes)


# -- the run --------------------------------------------------------------------------------------


class KanikoBuilder(PodRun[KanikoSettings]):
    """RemoteRun that builds and pushes an image from a kaniko pod on ACK."""

    mode = "kaniko"
    noun = "image build"
    component = COMPONENT
    container = CONTAINER
    error = KanikoBuildError
    exit_code_meanings = EXIT_CODE_MEANINGS
    name_pod = staticmethod(build_pod_name)
    failure_search_lines = STEP_SEARCH_LINES

    @property
    def config_map_name(self) -> str:
        return context_map_name(self.pod_name)

    # -- RemoteRun ----------------------------------------------------------------------------

    def submit(self) -> dict[str, Any]:
        """Reattach to this build's pod, or create its ConfigMap and pod (replacing a Failed pod)."""
        if not self.settings.context_files:
            raise SpecError(
                "context_files: the build context is empty (fix: pass the Dockerfile and its files)"
            )
        hook = self.hook()
        pod = self.reattach(hook)
        if pod is not None:
            return self._handle(pod, self._ensure_context(hook))
        config_map = self._ensure_context(hook)
        pod = self.create_pod(hook, build_pod(self.settings))
        log.info(
            "Started image build pod %s/%s: %s (%d context files)",
            self.settings.namespace,
            pod.metadata.name,
            self.settings.destination,
            len(self.settings.context_files),
        )
        return self._handle(pod, config_map)

    def result(self, handle: dict[str, Any]) -> dict[str, Any]:
        """The pushed image and its digest (the termination message); then delete pod and ConfigMap."""
        hook = self.hook()
        terminated = terminated_state(self.succeeded_pod(hook, handle, "digest"), CONTAINER)
        digest = ((terminated.message if terminated else None) or "").strip()
        lines = self.tail(hook, handle, RESULT_TAIL_LINES)
        try:
            if not _DIGEST.fullmatch(digest):
                raise KanikoBuildError(
                    f"image build pod {where(handle)} succeeded but left no sha256 digest in "
                    f"{TERMINATION_LOG} (fix: keep --digest-file={TERMINATION_LOG}; use a kaniko executor "
                    "image); last log lines:\n" + tail_text(lines)
                )
        finally:
            # Gone either way: a retry builds again, mostly from the layer cache.
            self.remove(hook, handle)
        log.info("Image build pod %s pushed %s@%s", where(handle), self.settings.destination, digest)
        return {"image": self.settings.destination, "digest": digest, "log_tail": lines}

    # -- what PodRun leaves to the build ---------------------------------------------------------

    def same_inputs(self, pod: Any) -> bool:
        """A pod built from other inputs (only when the tag is not content-addressed) is not reattached."""
        return (pod.metadata.annotations or {}).get(BUILD_ANNOTATION) == build_hash(self.settings)

    def remove(self, hook: Any, handle: dict[str, Any]) -> bool:
        """Delete the pod, then its ConfigMap; both stay when the name holds a newer attempt's pod."""
        if not super().remove(hook, handle):
            return False  # the newer pod mounts the ConfigMap
        config_map = handle.get("config_map") or context_map_name(handle["pod"])
        delete = hook.core_v1_client.delete_namespaced_config_map
        delete_object(
            delete, config_map, handle["namespace"], handle.get("config_map_uid"), "build context ConfigMap"
        )
        return True

    async def apending_problem(self, pod: Any) -> tuple[str, bool]:
        """The pod's own status, else the kubelet's FailedMount (a missing Secret shows only there)."""
        problem, fatal = pending_problem(pod)
        if not fatal:
            mount, mount_fatal = await self._amount_problem(pod)
            if mount:
                problem, fatal = f"FailedMount: {mount}", mount_fatal
        if fatal and problem.startswith("FailedMount"):
            problem += mount_fix(problem, self.settings)
        return problem, fatal

    def lines_of(self, data: bytes | str) -> list[str]:
        return log_lines(data)

    def failure_detail(self, lines: list[str]) -> str:
        """The failing step and kaniko's error, with a fix for a push the Secret may not make."""
        step, error = failing_step(lines)
        detail = f" at step {step!r}" if step else " before its first build step" if error else ""
        if error:
            detail += f": {error}"
            if re.search(r"UNAUTHORIZED|authentication required|push permission", error):
                detail += f" (fix: give Secret {self.settings.registry_secret} push access to " + (
                    f"{self.settings.repository})"
                )
        return detail

    # -- the context ConfigMap -------------------------------------------------------------------

    def _handle(self, pod: Any, config_map: Any) -> dict[str, Any]:
        return {
            **self.handle_for(pod),
            "config_map": config_map.metadata.name,
            "config_map_uid": config_map.metadata.uid,
        }

    def _ensure_context(self, hook: Any) -> Any:
        """Create the context ConfigMap, reuse it when its data is the same, replace it when not."""
        from kubernetes.client.exceptions import ApiException

        core, namespace, name = hook.core_v1_client, self.settings.namespace, self.config_map_name
        body = build_context_map(self.settings)
        current = self._read_config_map(core, name)
        if current is None:
            try:
                return core.create_namespaced_config_map(namespace, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                current = self._read_config_map(core, name)  # created by another worker just now
                if current is None:
                    raise
        self.check_ours(current, "configmap")
        if (current.data or {}) == body["data"] and not current.binary_data:
            return current
        log.info("Replacing build context ConfigMap %s/%s: its files differ", namespace, name)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        return core.replace_namespaced_config_map(name, namespace, body)

    def _read_config_map(self, core: Any, name: str) -> Any:
        return read_or_none(core.read_namespaced_config_map, name, self.settings.namespace)

    async def _amount_problem(self, pod: Any) -> tuple[str, bool]:
        """The kubelet's current FailedMount about the pod and whether it is fatal (see mount_problem)."""
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        async with self.async_hook().get_conn() as api:
            try:
                events = await alist_all(
                    client.CoreV1Api(api).list_namespaced_event,
                    pod.metadata.namespace,
                    field_selector=f"involvedObject.uid={pod.metadata.uid}",
                )
            except ApiException as exc:
                if exc.status in (403, 404):  # events not readable: the pod's own status must do
                    return "", False
                raise
        return mount_problem([e for e in events if e.involved_object.uid == pod.metadata.uid])


# -- interpreting the pod and kaniko's log --------------------------------------------------------


def log_lines(data: bytes | str) -> list[str]:
    """Non-empty log lines without kaniko's colour codes."""
    return [_ANSI.sub("", line) for line in text_lines(data)]


def failing_step(lines: list[str]) -> tuple[str, str]:
    """(the Dockerfile step kaniko ran last before its error, the error); "" for what is not there."""
    error_at, error = len(lines), ""
    for index in range(len(lines) - 1, -1, -1):
        match = _ERROR.match(lines[index])
        if match:
            error_at, error = index, match["error"]
            break
    for line in reversed(lines[:error_at]):
        match = _STEP.match(line)
        if match:
            return match["step"].strip(), error
    return "", error


def mount_problem(events: list[Any]) -> tuple[str, bool]:
    """The kubelet's FailedMount message that still holds the pod back, and whether it is fatal.

    Only FailedMount events after the kubelet's last other event count (Pulling, Started, ... mean
    the volumes were set up since, e.g. once a missing Secret was created; events outlive that).
    Of those, a fatal one wins over a transient one (the kubelet's "Unable to attach or mount
    volumes: ... timed out" follows the cause it summarises).
    """
    kubelet = [e for e in events if _component(e) == "kubelet"]
    kubelet.sort(key=_event_time)  # stable: the API server's order among equal times
    current: list[str] = []
    for event in kubelet:
        current = [*current, event.message or ""] if event.reason == "FailedMount" else []
    fatal = [message for message in current if mount_is_fatal(message)]
    if fatal:
        return fatal[-1], True
    return (current[-1], False) if current else ("", False)


def _component(event: Any) -> str:
    source = getattr(event, "source", None)
    return (source.component if source else None) or getattr(event, "reporting_component", None) or ""


def _event_time(event: Any) -> float:
    for value in (event.last_timestamp, getattr(event, "event_time", None), event.first_timestamp):
        if value is not None and hasattr(value, "timestamp"):
            return value.timestamp()
    return 0.0


def mount_is_fatal(message: str) -> bool:
    """A missing ConfigMap, Secret or key: no waiting mounts it (other mount errors may pass)."""
    return bool(re.search(r'(?:secret|configmap) "[^"]*" not found|references non-existent', message))


def mount_fix(problem: str, settings: KanikoSettings) -> str:
    if f'"{REGISTRY_VOLUME}"' in problem:
        return (
            f" (fix: create the kubernetes.io/dockerconfigjson Secret {settings.registry_secret} with a "
            f"{DOCKER_CONFIG_KEY} key in namespace {settings.namespace}, e.g. kubectl create secret "
            f"docker-registry {settings.registry_secret} --docker-server=<registry> ..., with push access "
            f"to {settings.repository})"
        )
    if f'"{CONTEXT_VOLUME}"' in problem:
        return " (fix: the build context ConfigMap was deleted; retry the task to create it again)"
    return ""
