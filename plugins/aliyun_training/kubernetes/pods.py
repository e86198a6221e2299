"""Pods on ACK: reading a pod's log, and a RemoteRun that is one bare pod (how a pod's status reads
is ``kubernetes.pod_status``'s).

What the ACK backend's training pods and the bare pods (the staging pod, the kaniko build pod)
share lives here once:

- One raw log read (``read_log``/``aread_log``): as raw bytes (``_preload_content=False``), because
  the sync client mangles log text when it decodes it (a line that parses as JSON comes back as a
  Python repr). With kubernetes_asyncio an unloaded response raises nothing for a 4xx answer, so
  its status is checked here: otherwise the JSON error body of a pod deleted between two polls
  would come back as "log lines" and be reported as progress or as the failure's log. A log that
  is not there (the container has not started, the pod is gone: 400, 404) is None.

``PodRun``: both bare-pod runs start one pod named after their inputs, poll it from the triggerer,
read its result from the worker and delete it. What makes that safe is the same for both:

- Reattaching: a retried task finds the pod its earlier try started (same name) and reattaches to
  a Pending, Running or Succeeded one; a Failed one, or one started from other inputs, is deleted
  (only that uid) and awaited before a new one is created. A pod of that name without this
  pipeline's labels is never touched.
- Deleting with a uid precondition: a handle deletes only its own pod, never a newer attempt's pod
  that took the name since (409); a pod already gone (404) is fine.
- Telling a Pending pod that waiting fixes (image pulls, scheduling) from one it does not, and
  saying why a Failed pod failed: exit code and its meaning, reason, and the log tail (the
  kubelet's termination message when the log is gone).

A subclass names its pod and says what it is (``noun``, ``component``, ``container``, ``error``);
it builds the pod, parses the result and adds what is its own (e.g. a ConfigMap next to the pod).
Names and labels are ``kubernetes.names``'s.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast, get_args

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.connections import KUBERNETES_DEFAULT_CONN_ID
from aliyun_training.hooks.kubernetes import KubernetesHooks
from aliyun_training.kubernetes.names import managed_labels
from aliyun_training.remote import RemoteStatus
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
from aliyun_training.kubernetes.pod_status import (
    pending_problem,
    pod_phase,
    terminated_state,
)

log = logging.getLogger(__name__)


#: Log lines a failure message carries.
FAILURE_TAIL_LINES = 20


#: Log lines read for a Running pod's progress (its last line).
PROGRESS_TAIL_LINES = 5


#: How long ``submit`` waits for a replaced pod to be gone.
DELETE_WAIT_SECONDS = 60.0


#: What the log endpoint answers before the container started (400) or once the pod is gone (404).
LOG_UNAVAILABLE = frozenset({400, 404})


T = TypeVar("T")


class PodSettings(BaseModel):
    """What every bare-pod run is configured with: where the pod runs and what it may use.

    JSON-serializable, so the trigger rebuilds the run from it; subclasses add their own fields.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubernetes_conn_id: str = KUBERNETES_DEFAULT_CONN_ID
    namespace: str = "default"
    cpu: str = "2"
    memory: str = "4Gi"
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    service_account: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=list)
    #: The deployment that creates the pod (``INSTALLATION_LABEL``; part of its name's identity, so
    #: two deployments doing the same work never share, adopt or delete each other's pod).
    installation: str | None = None


def bare_pod(
    settings: PodSettings, metadata: dict[str, Any], container: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    """A one-container pod as sent to the API server, with the scheduling choices of ``settings``.

    ``restartPolicy: Never``: a failure is reported with its exit code and log rather than retried
    by the kubelet (the task's retry decides). No Kubernetes API token is mounted unless a service
    account is configured: the runs need none.
    """
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
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
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def read_or_none(read: Callable[..., T], *args: Any) -> T | None:
    """``read(*args)`` with the sync client; None when the object does not exist (404)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def delete_object(delete: Callable[..., Any], name: str, namespace: str, uid: str | None, what: str) -> bool:
    """Delete ``name`` (only the object of ``uid`` when given); False when the name holds another.

    A uid precondition keeps an old handle from deleting a newer attempt's object of the same name
    (409); an object already gone (404) counts as deleted.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
    try:
        delete(name, namespace, body=options)
        log.info("Deleted %s %s/%s", what, namespace, name)
    except ApiException as exc:
        if exc.status == 409:
            return False
        if exc.status != 404:
            raise
    return True


def where(handle: dict[str, Any]) -> str:
    """``namespace/pod`` of a handle, as messages name a pod."""
    return f"{handle['namespace']}/{handle['pod']}"


def text_lines(data: bytes | str) -> list[str]:
    """The non-empty lines of a log, undecodable bytes replaced (a log is not guaranteed UTF-8)."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def tail_text(lines: list[str]) -> str:
    """The last lines of a log, indented, for the end of a message."""
    return "\n".join(f"  {line}" for line in lines[-FAILURE_TAIL_LINES:])


def read_log(core: Any, **args: Any) -> str | None:
    """The log ``args`` select (``read_namespaced_pod_log``'s arguments) through a sync ``CoreV1Api``,
    read raw and decoded with undecodable bytes replaced; None when there is none to read (400, 404)."""
    from kubernetes.client.exceptions import ApiException

    try:
        response = core.read_namespaced_pod_log(**args, _preload_content=False)
    except ApiException as exc:
        if exc.status in LOG_UNAVAILABLE:
            return None
        raise
    return response.data.decode(errors="replace")


async def aread_log(core: Any, **args: Any) -> str | None:
    """``read_log`` through a kubernetes_asyncio ``CoreV1Api``. An unloaded response raises nothing
    for an error status: it is checked here, or an error body would pass for log lines."""
    from kubernetes_asyncio.client.exceptions import ApiException

    response = await core.read_namespaced_pod_log(**args, _preload_content=False)
    try:
        if response.status in LOG_UNAVAILABLE:
            return None
        if not 200 <= response.status <= 299:
            raise ApiException(status=response.status, reason=response.reason)
        data: bytes = await response.read()
        return data.decode(errors="replace")
    finally:
        response.release()


S = TypeVar("S", bound=PodSettings)


class PodRun(Generic[S]):
    """The RemoteRun machinery of one bare pod; a subclass says which pod and what its result is.

    A subclass sets the class attributes below, ``name_pod`` and ``submit`` (``reattach``, then
    ``create_pod``), and ``result`` (``succeeded_pod``, then ``remove``). ``apoll`` and ``stop`` are
    complete here; ``apending_problem``, ``failure_detail``, ``lines_of`` and ``remove`` are the
    places to add what a kind of pod knows more.
    """

    #: The mode the run is chosen by, also written into its handle.
    mode: ClassVar[str]
    #: What the pod is, in messages and logs: "<noun> pod ns/name ...".
    noun: ClassVar[str]
    #: The ``app.kubernetes.io/component`` label value that marks a pod (or object) as this kind's.
    component: ClassVar[str]
    #: The container whose log and exit code tell the outcome.
    container: ClassVar[str]
    #: Raised when the pod cannot be started, finished without a result, or is not ours.
    error: ClassVar[type[Exception]]
    #: The settings model, taken from the subclass's base ``PodRun[Model]``.
    settings_model: ClassVar[type[PodSettings]]
    #: Exit code -> what it means; ``{memory}`` is replaced by the configured memory.
    exit_code_meanings: ClassVar[Mapping[int, str]] = {}
    #: Log lines read for a Failed pod's message (more than it shows when the detail searches them).
    failure_search_lines: ClassVar[int] = FAILURE_TAIL_LINES

    settings: S

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            model = next(iter(get_args(base)), None)
            if isinstance(model, type) and issubclass(model, PodSettings):
                cls.settings_model = model

    def __init__(self, **config: Any) -> None:
        # settings_model is the S of the subclass's base PodRun[S] (see __init_subclass__), which a
        # ClassVar cannot be typed with.
        self.settings = cast("S", validate_record(self.settings_model, config))
        self._hooks = KubernetesHooks(self.settings.kubernetes_conn_id)

    @property
    def config(self) -> dict[str, Any]:
        return self.settings.model_dump(mode="json")

    @property
    def pod_name(self) -> str:
        """The pod's name: the same for every try of one run (see ``kubernetes.names.stable_name``)."""
        return self.name_pod(self.settings)

    @staticmethod
    def name_pod(settings: Any) -> str:
        raise NotImplementedError

    def submit(self) -> dict[str, Any]:
        raise NotImplementedError

    def result(self, handle: dict[str, Any]) -> Any:
        raise NotImplementedError

    @property
    def log(self) -> logging.Logger:
        """The subclass module's logger: its messages stay under the module that configures the run."""
        return logging.getLogger(type(self).__module__)

    # -- clients (built on first use: a run is built in the scheduler, which needs none) ----------

    def hook(self) -> Any:
        return self._hooks.sync

    def async_hook(self) -> Any:
        return self._hooks.asynchronous

    # -- RemoteRun ------------------------------------------------------------------------------

    async def apoll(self, handle: dict[str, Any]) -> RemoteStatus:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            pod = await self.async_hook().get_pod(handle["pod"], handle["namespace"])
        except ApiException as exc:
            if exc.status == 404:
                return RemoteStatus(
                    "failed", f"{self.noun} pod {where(handle)} was deleted before it finished"
                )
            raise
        if handle.get("uid") and pod.metadata.uid != handle["uid"]:
            return RemoteStatus("failed", f"{self.noun} pod {where(handle)} was replaced by another attempt")
        phase = pod_phase(pod)
        if phase == "Succeeded":
            return RemoteStatus("succeeded")
        if phase == "Failed":
            lines = await self.atail(handle, self.failure_search_lines)
            return RemoteStatus("failed", self.failure_message(pod, lines))
        if phase == "Running":
            lines = await self.atail(handle, PROGRESS_TAIL_LINES)
            return RemoteStatus("running", progress=lines[-1] if lines else f"pod {where(handle)} Running")
        if phase == "Unknown":
            return RemoteStatus(
                "running", progress=f"pod {where(handle)} Unknown: its node stopped reporting"
            )
        problem, fatal = await self.apending_problem(pod)
        if fatal:
            return RemoteStatus("failed", f"{self.noun} pod {where(handle)} cannot start: {problem}")
        return RemoteStatus("running", progress=f"pod {where(handle)} {phase or 'Pending'}: {problem}")

    def stop(self, handle: dict[str, Any]) -> None:
        """Delete what this handle started (not a newer attempt's pod of the same name); gone is fine."""
        self.remove(self.hook(), handle)

    # -- steps of submit and result -------------------------------------------------------------

    def handle_for(self, pod: Any) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "namespace": self.settings.namespace,
            "pod": pod.metadata.name,
            "uid": pod.metadata.uid,
        }

    def same_inputs(self, pod: Any) -> bool:
        """Whether an existing pod of this name was started from this run's inputs (here: always)."""
        return True

    def reattach(self, hook: Any) -> Any:
        """This run's pod when a retry may reattach to it; else None, once a Failed or stale one is gone."""
        name, namespace = self.pod_name, self.settings.namespace
        existing = self.read_pod(hook, name)
        if existing is None:
            return None
        self.check_ours(existing)
        phase, same = pod_phase(existing), self.same_inputs(existing)
        if existing.metadata.deletion_timestamp is None and phase != "Failed" and same:
            self.log.info("Reattaching to %s pod %s/%s (%s)", self.noun, namespace, name, phase)
            return existing
        why = phase if same else f"{phase}, started from other inputs"
        self.log.info("Replacing %s pod %s/%s of an earlier attempt (%s)", self.noun, namespace, name, why)
        self.delete_pod(hook, name, existing.metadata.uid)
        self.wait_gone(hook, name)
        return None

    def create_pod(self, hook: Any, body: dict[str, Any]) -> Any:
        """Create the pod; when another worker created it just now, that pod (if it is ours)."""
        from kubernetes.client.exceptions import ApiException

        name, namespace = self.pod_name, self.settings.namespace
        try:
            return hook.core_v1_client.create_namespaced_pod(namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            created = self.read_pod(hook, name)
            if created is None:
                raise
        self.check_ours(created)
        if not self.same_inputs(created):
            raise self.error(
                f"{self.noun} pod {namespace}/{name} was just created by another attempt with other "
                "inputs (fix: retry once it finished)"
            )
        return created

    def succeeded_pod(self, hook: Any, handle: dict[str, Any], what: str) -> Any:
        """The handle's pod, Succeeded; ``error`` naming ``what`` cannot be read otherwise."""
        pod = self.read_pod(hook, handle["pod"], handle["namespace"])
        if pod is None:
            raise self.error(f"{self.noun} pod {where(handle)} is gone: its {what} cannot be read")
        if handle.get("uid") and pod.metadata.uid != handle["uid"]:
            raise self.error(f"{self.noun} pod {where(handle)} was replaced by another attempt")
        phase = pod_phase(pod)
        if phase != "Succeeded":
            raise self.error(f"{self.noun} pod {where(handle)} is {phase}, not Succeeded")
        return pod

    def remove(self, hook: Any, handle: dict[str, Any]) -> bool:
        """Delete the handle's pod; False when the name holds a newer attempt's pod (left alone)."""
        return self.delete_pod(hook, handle["pod"], handle.get("uid"), handle["namespace"])

    # -- the pod --------------------------------------------------------------------------------

    def read_pod(self, hook: Any, name: str, namespace: str | None = None) -> Any:
        return read_or_none(hook.get_pod, name, namespace or self.settings.namespace)

    def delete_pod(self, hook: Any, name: str, uid: str | None, namespace: str | None = None) -> bool:
        """Delete the pod (only this uid when given); False when the name holds another pod."""
        delete = hook.core_v1_client.delete_namespaced_pod
        return delete_object(delete, name, namespace or self.settings.namespace, uid, f"{self.noun} pod")

    def wait_gone(self, hook: Any, name: str) -> None:
        """Wait until a deleted pod is gone: its name is needed for the new one."""
        deadline = time.monotonic() + DELETE_WAIT_SECONDS
        while self.read_pod(hook, name) is not None:
            if time.monotonic() >= deadline:
                raise self.error(
                    f"{self.noun} pod {self.settings.namespace}/{name} of an earlier attempt is still being "
                    f"deleted after {DELETE_WAIT_SECONDS:.0f} s (fix: check its finalizers and node)"
                )
            time.sleep(0.2)

    def check_ours(self, obj: Any, kind: str = "pod") -> None:
        """Refuse an object of this name that this pipeline did not create: it is never touched."""
        labels = obj.metadata.labels or {}
        wanted = managed_labels(self.component, self.settings.installation)
        if all(labels.get(name) == value for name, value in wanted.items()):
            return
        article = "an" if self.noun[:1] in "aeiou" else "a"
        expected = ", ".join(f"{name}={value}" for name, value in wanted.items())
        raise self.error(
            f"{kind} {self.settings.namespace}/{obj.metadata.name} exists but is not {article} {self.noun} "
            f"{kind} of this pipeline and installation (labels {expected} expected) (fix: delete or rename "
            f"that {kind}; it is never touched here)"
        )

    async def apending_problem(self, pod: Any) -> tuple[str, bool]:
        """Why the Pending pod is not running yet, and whether that is fatal (see pending_problem)."""
        return pending_problem(pod)

    # -- the log --------------------------------------------------------------------------------

    def lines_of(self, data: bytes | str) -> list[str]:
        """The lines of the container's log (or termination message) as messages show them."""
        return text_lines(data)

    def _log_args(self, handle: dict[str, Any], lines: int) -> dict[str, Any]:
        return {
            "name": handle["pod"],
            "namespace": handle["namespace"],
            "container": self.container,
            "tail_lines": lines,
        }

    def tail(self, hook: Any, handle: dict[str, Any], lines: int) -> list[str]:
        """The log's last lines; [] before the container started or once the pod is gone."""
        text = read_log(hook.core_v1_client, **self._log_args(handle, lines))
        return [] if text is None else self.lines_of(text)

    async def atail(self, handle: dict[str, Any], lines: int) -> list[str]:
        """As ``tail``, from the triggerer."""
        from kubernetes_asyncio import client

        async with self.async_hook().get_conn() as api:
            text = await aread_log(client.CoreV1Api(api), **self._log_args(handle, lines))
        return [] if text is None else self.lines_of(text)

    # -- a failure ------------------------------------------------------------------------------

    def failure_detail(self, lines: list[str]) -> str:
        """What the log says about the failure, right after "failed" (e.g. " at step ..."); none here."""
        return ""

    def failure_message(self, pod: Any, lines: list[str]) -> str:
        """Detail, exit code and its meaning, reason and log tail of a Failed pod.

        Without a log (the node was drained, the pod deleted) the kubelet's termination message
        stands in for it: ``FallbackToLogsOnError`` keeps the log's tail there.
        """
        terminated = terminated_state(pod, self.container)
        if not lines and terminated is not None and terminated.message:
            lines = self.lines_of(terminated.message)
        detail = self.failure_detail(lines)
        text = f"{self.noun} pod {pod.metadata.namespace}/{pod.metadata.name} failed{detail}"
        if terminated is not None:
            code = terminated.exit_code
            meaning = self.exit_code_meanings.get(code, "").format(memory=self.settings.memory)
            text += f"{'; ' if detail else ': '}container {self.container} exited with code {code} "
            text += f"({terminated.reason or 'Error'})" + (f", {meaning}" if meaning else "")
        if pod.status and pod.status.reason:
            text += f"; pod {pod.status.reason}: {pod.status.message or ''}".rstrip(": ")
        return text + ("; last log lines:\n" + tail_text(lines) if lines else "; no log")
