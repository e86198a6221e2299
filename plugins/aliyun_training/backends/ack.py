"""Run a ``TrainingJobSpec`` on ACK as a Kubeflow training job, created the way ``arena submit`` does.

The worker talks to the cluster through the cncf.kubernetes provider's ``KubernetesHook``; the
trigger through ``AsyncKubernetesHook`` (kubernetes_asyncio). Everything read from the cluster is
turned into plain dicts first, so one set of functions interprets what either client returned.

A job's handle carries the CR's kind and uid: a CR recreated under the same name (a later attempt)
is a different job. Stopping deletes the CR and the ConfigMap, as ``arena delete`` does: the job is
``stopping`` while the CR waits on finalizers (a foreground deletion) and while its pods, which the
garbage collector deletes after the CR, are still terminating; ``stopped`` once both are gone.

A job launched for a task instance carries it in annotations and is labelled for ``launched``; a
failed one is classified (``classify``) from the pods' own reasons, the kubelet's and scheduler's
events and the failing node's log tail.

Every call stands alone, so a backend built in another process (a retried worker, the triggerer)
answers ``logs`` and ``tail`` without a ``status`` call first. The only thing one call leaves for
the next is the pod list a status call just read: a monitor's poll reads the logs right after the
status, and reuses it for ``POD_LIST_MAX_AGE_SECONDS`` instead of listing the pods twice.
"""

from __future__ import annotations

import heapq
import logging
import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aliyun_training.backends.arena_manifests import (
    GROUP,
    KINDS,
    MPI_JOB_V1ALPHA1,
    MPI_JOB_V2,
    OUTPUT_DIR_ANNOTATION,
    PYTORCH_JOB,
    TF_JOB,
    AckSettings,
    JobKind,
    ack_settings,
    build_configmap,
    build_job,
    check,
    configmap_name,
    job_kind,
)
from aliyun_training.backends.base import (
    FoundJob,
    JobHandle,
    JobState,
    JobStatus,
    LaunchedJob,
    LogChunk,
    PlannedSubmission,
    node_line,
    same_owner,
)
from aliyun_training.failures import COMMAND_NOT_RUN, Failure, FailureClass, class_from_text
from aliyun_training.failures.torchrun import read_node_output
from aliyun_training.hooks.kubernetes import KubernetesHooks, alist_all, list_all
from aliyun_training.kubernetes.names import INSTALLATION_LABEL, OWNED, OWNED_LABEL, owner_tags
from aliyun_training.kubernetes.pod_status import PodProblem, pod_problems
from aliyun_training.kubernetes.pods import aread_log, read_log, read_or_none
from aliyun_training.spec import JobOwner, TrainingJobSpec, describe_owner
from aliyun_training.validation import SpecError

log = logging.getLogger(__name__)

#: Newest true condition -> state, as ``arena list`` reports jobs (anything else is pending).
CONDITION_STATES = {
    "Succeeded": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RUNNING,
}
#: Replica whose pod's log is the job's log, in order of preference.
LOG_REPLICAS = ("master", "launcher", "chief", "worker")
#: Bytes of new log read per poll at most; the rest comes with the next poll.
LOG_BYTES_PER_POLL = 256 * 1024
#: The log API counts ``sinceSeconds`` in whole seconds and ``limitBytes`` from the start of that
#: window, so a read cut short asks again from a second before its last line and gets the lines it
#: has seen first: each read that stops at its bound doubles the next one's, up to this many bytes.
LOG_BYTES_MAX = 16 * 1024 * 1024
#: How far ahead of the worker's clock a log line's timestamp may be before the clocks are taken to
#: disagree (see ``_merged_chunk``).
LOG_CLOCK_SKEW_SECONDS = 60.0
#: How long the pods a status call listed serve the log read after it; later, logs list them again.
POD_LIST_MAX_AGE_SECONDS = 5.0
#: Replica-type labels of today's training-operator and of arena's old mpi-operator (v1alpha1).
_REPLICA_LABELS = (
    ("training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index"),
    ("mpi_role_type", ""),
)
#: Which pod problem is the job's ``reason_code``, first to last: what ended a pod (its status
#: reason, its DisruptionTarget condition) explains the exits and waits that follow it.
_PROBLEM_RANK = {"ended": 0, "disrupted": 1, "exited": 2, "waiting": 3, "unschedulable": 4}

#: A failed job's evidence -> class, checked in order (the first match wins) over its status reason
#: and ``failure_details`` lines, which name each pod and its reason; then the log tail's text rules
#: (``failures.class_from_text``), then the exit code. A data rule comes first because the scheduler
#: words an unbound claim as Unschedulable too; config and a pod's own limits before preemption: no
#: retry fixes them. Sources:
#: - the kubelet's reason strings: pkg/kubelet/images/types.go (ImagePullBackOff, ErrImagePull,
#:   InvalidImageName, ErrImageNeverPull), pkg/kubelet/container/sync_result.go
#:   (CreateContainerConfigError, CreateContainerError, RunContainerError), the container runtime's
#:   StartError (its exec found no such executable), pkg/kubelet/events/event.go (FailedMount,
#:   FailedAttachVolume, "MountVolume.SetUp failed"), pkg/kubelet/eviction (a pod's reason Evicted),
#:   pkg/kubelet/preemption (Preempting), pkg/kubelet/nodeshutdown (Terminated), the container
#:   runtime's OOMKilled; the node lifecycle controller's NodeLost reason and NodeNotReady event;
#: - "Pod disruption conditions" (Kubernetes docs, Disruptions): DisruptionTarget with reasons
#:   PreemptionByScheduler, DeletionByTaintManager (the node lifecycle controller's NoExecute
#:   eviction), EvictionByEvictionAPI, DeletionByPodGC, TerminationByKubelet;
#: - "Pod Lifecycle": PodScheduled False with reason Unschedulable; the scheduler's FailedScheduling
#:   event, its "Insufficient <resource>" and VolumeBinding's "pod has unbound immediate
#:   PersistentVolumeClaims" / 'persistentvolumeclaim "<name>" not found'; the kubelet's admission
#:   reasons OutOf<resource>;
#: - the API server's denials: 'admission webhook "<name>" denied the request', '<Kind> "<name>" is
#:   invalid: '; the shell's exit codes 126 (cannot execute) and 127 (command not found).
ACK_RULES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        FailureClass.DATA,
        re.compile(
            r"\b(?:FailedMount|FailedAttachVolume)\b|MountVolume\.\w+ failed|AttachVolume\.Attach failed"
            r"|unbound immediate PersistentVolumeClaims|persistentvolumeclaim \"[^\"]*\" not found"
        ),
    ),
    (
        FailureClass.CONFIG,
        re.compile(
            r"\b(?:ImagePullBackOff|ErrImagePull|InvalidImageName|ErrImageNeverPull|CreateContainerConfigError"
            r"|CreateContainerError|RunContainerError|StartError)\b|\(exit code 12[67]\)"
            r"|admission webhook \"[^\"]+\" denied the request"
            r"|\bis invalid: "
        ),
    ),
    (
        # An eviction for the pod's own storage limit, not the node's pressure: the kubelet's
        # eviction messages (pkg/kubelet/eviction/helpers.go: containerEphemeralStorageMessageFmt,
        # podEphemeralStorageMessageFmt, emptyDirMessageFmt). Like OOMKilled, the job outgrew
        # what it asked for, and a retry on another node outgrows it again.
        FailureClass.USER_CODE,
        re.compile(
            r"exceeded its local ephemeral storage limit"
            r"|Pod ephemeral local storage usage exceeds the total limit"
            r"|Usage of EmptyDir volume \"[^\"]*\" exceeds the limit"
        ),
    ),
    (
        FailureClass.PREEMPTION,
        re.compile(
            r"\b(?:Evicted|Preempted|Preempting|PreemptionBy\w+|DeletionByTaintManager|DeletionByPodGC"
            r"|EvictionByEvictionAPI|TerminationByKubelet|DisruptionTarget|NodeLost|NodeNotReady)\b"
            r"|^pod \S+: (?:Terminated|Shutdown)\b"
        ),
    ),
    (FailureClass.USER_CODE, re.compile(r"\bOOMKilled\b")),
    (
        # The kubelet's admission refusal (pkg/kubelet/lifecycle/predicate.go, "Node didn't have
        # enough resource: %s, requested: %d, used: %d, capacity: %d") on a node that reports none
        # of the resource at all: its device plugin lost the GPUs, not a full cluster.
        FailureClass.INFRASTRUCTURE,
        re.compile(r"Node didn't have enough resource: \S+, requested: \d+, used: \d+, capacity: 0\b"),
    ),
    (FailureClass.CAPACITY, re.compile(r"\b(?:Unschedulable|FailedScheduling|OutOf\w+)\b|Insufficient \S+")),
)


class AckBackend:
    """Kubeflow training jobs on ACK that ``arena list/logs/delete`` treat as their own."""

    name = "arena"

    def __init__(self, **settings: Any) -> None:
        self.settings: AckSettings = ack_settings(settings)
        #: Per job id: when the latest status call listed the job's pods (monotonic seconds), and them.
        self._listed: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._hooks = KubernetesHooks(self.settings.kubernetes_conn_id)

    @property
    def config(self) -> dict[str, Any]:
        return self.settings.model_dump()

    # -- clients ---------------------------------------------------------------------------------

    def _hook(self) -> Any:
        """One hook per backend: the connection is read and the kubeconfig loaded once, not per call."""
        return self._hooks.sync

    def _async_hook(self) -> Any:
        return self._hooks.asynchronous

    def _list_pods(self, hook: Any, handle: JobHandle) -> list[dict[str, Any]]:
        listed = list_all(hook.core_v1_client.list_namespaced_pod, **self._pod_query(handle))
        return _pods(hook.api_client, listed, handle)

    async def _alist_pods(self, api: Any, handle: JobHandle) -> list[dict[str, Any]]:
        from kubernetes_asyncio import client

        listed = await alist_all(client.CoreV1Api(api).list_namespaced_pod, **self._pod_query(handle))
        return _pods(api, listed, handle)

    def _listed_by_status(self, handle: JobHandle, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep the pods a status call listed for the log read that follows it."""
        self._listed[handle.job_id] = (time.monotonic(), pods)
        return pods

    def _recent_pods(self, handle: JobHandle) -> list[dict[str, Any]] | None:
        """The pods a status call listed moments ago, or None: the caller lists them itself."""
        listed = self._listed.get(handle.job_id)
        if listed is None or time.monotonic() - listed[0] >= POD_LIST_MAX_AGE_SECONDS:
            return None
        return listed[1]

    # -- submit and find -------------------------------------------------------------------------

    def planned_requests(self, spec: TrainingJobSpec, name: str) -> list[PlannedSubmission]:
        """The CR and the ConfigMap ``submit`` creates; the ConfigMap's owner is the CR's uid."""
        check(spec, name, self.settings)
        kind = job_kind(spec, self.settings)
        return [
            PlannedSubmission("kubernetes", f"create {kind.kind}", build_job(spec, name, self.settings)),
            PlannedSubmission(
                "kubernetes",
                "create ConfigMap",
                build_configmap(spec, name, self.settings, f"<uid of the {kind.kind}>"),
            ),
        ]

    def check(self, spec: TrainingJobSpec, name: str) -> None:
        """What the cluster would refuse only after pods sat Pending (``arena_manifests.check``)."""
        check(spec, name, self.settings)

    def submit(self, spec: TrainingJobSpec, name: str) -> JobHandle:
        """Create the CR, then the ConfigMap that makes it arena's (owned by the CR)."""
        self.check(spec, name)
        kind = job_kind(spec, self.settings)
        hook = self._hook()
        namespace = self.settings.namespace
        existing = self._get_job(hook, kind, name)
        if existing is not None:
            found = _owner(existing)
            if not same_owner(spec.owner, found):
                raise SpecError(
                    f"job name: {kind.kind} {namespace}/{name} exists and was not launched by this task "
                    f"(its annotations name {describe_owner(found)}); it is neither replaced nor deleted "
                    "(fix: delete it if it may go, or give each Airflow deployment its own "
                    "[aliyun_training] installation_id)"
                )
            # An earlier attempt's finished job (the operator reattaches to active ones before
            # calling submit): remove it as `arena delete` would, then create afresh.
            log.info("Deleting finished job %s/%s of an earlier attempt before resubmitting", namespace, name)
            self._delete(hook, kind, name)
        created = hook.custom_object_client.create_namespaced_custom_object(
            GROUP, kind.version, namespace, kind.plural, build_job(spec, name, self.settings)
        )
        uid = created["metadata"]["uid"]
        hook.core_v1_client.create_namespaced_config_map(
            namespace, build_configmap(spec, name, self.settings, uid)
        )
        return JobHandle(backend=self.name, job_id=_job_id(kind, uid), name=name)

    def find(self, name: str, since: datetime | None = None) -> FoundJob | None:
        hook = self._hook()
        for kind in _candidate_kinds(self.settings):
            job = self._get_job(hook, kind, name)
            if job is not None:
                handle = JobHandle(backend=self.name, job_id=_job_id(kind, job["metadata"]["uid"]), name=name)
                return FoundJob(handle=handle, owner=_owner(job))
        return None

    def launched(self, installation: str) -> list[LaunchedJob]:
        """The namespace's CRs launched for a task instance of ``installation`` (selected by the API
        server on ``OWNED_LABEL`` and ``INSTALLATION_LABEL``), of every kind the settings allow, that
        have not ended or are being deleted, with the owner their annotations name. A kind the
        cluster does not serve (no such CRD: 404) has none; a CR whose annotations name no whole
        owner of ``installation`` is not ours to report, whatever its labels say."""
        from kubernetes.client.exceptions import ApiException

        hook = self._hook()
        found = []
        for kind in _candidate_kinds(self.settings):
            try:
                listed = list_all(
                    hook.custom_object_client.list_namespaced_custom_object,
                    GROUP,
                    kind.version,
                    self.settings.namespace,
                    kind.plural,
                    label_selector=f"{OWNED_LABEL}={OWNED},{INSTALLATION_LABEL}={installation}",
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            jobs = (_launched(self.name, kind, item) for item in listed)
            found += [job for job in jobs if job is not None and job.owner.installation == installation]
        return found

    def _get_job(self, hook: Any, kind: JobKind, name: str) -> dict[str, Any] | None:
        get = hook.custom_object_client.get_namespaced_custom_object
        return read_or_none(get, GROUP, kind.version, self.settings.namespace, kind.plural, name)

    def _delete(self, hook: Any, kind: JobKind, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        namespace = self.settings.namespace
        for delete in (
            lambda: hook.custom_object_client.delete_namespaced_custom_object(
                GROUP, kind.version, namespace, kind.plural, name
            ),
            lambda: hook.core_v1_client.delete_namespaced_config_map(configmap_name(name, kind), namespace),
        ):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise
        deadline = time.monotonic() + 30
        while self._get_job(hook, kind, name) is not None and time.monotonic() < deadline:
            time.sleep(0.2)

    # -- status ----------------------------------------------------------------------------------

    def status(self, handle: JobHandle) -> JobStatus:
        hook = self._hook()
        job = self._get_job(hook, _kind(handle), handle.name)
        return _status(handle, job, self._listed_by_status(handle, self._list_pods(hook, handle)))

    async def astatus(self, handle: JobHandle) -> JobStatus:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        kind = _kind(handle)
        async with self._async_hook().get_conn() as api:
            try:
                job = await client.CustomObjectsApi(api).get_namespaced_custom_object(
                    GROUP, kind.version, self.settings.namespace, kind.plural, handle.name
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                job = None
            pods = self._listed_by_status(handle, await self._alist_pods(api, handle))
        return _status(handle, job, pods)

    def _pod_query(self, handle: JobHandle) -> dict[str, Any]:
        """Pods by arena's own selector (``release``), which every operator version keeps."""
        return {"namespace": self.settings.namespace, "label_selector": f"release={handle.name}"}

    # -- logs ------------------------------------------------------------------------------------

    def logs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        """New lines of every started pod, each prefixed with its node, merged by the kubelet's
        timestamps: read since the last one seen of each pod, none twice."""
        hook = self._hook()
        pods = self._recent_pods(handle)
        seen = (cursor or {}).get("pods", {})
        asked_at = time.time()
        reads = [
            (
                node,
                pod,
                read_log(hook.core_v1_client, **self._log_args(pod, seen.get(pod["metadata"]["name"]))),
            )
            for node, pod in _started(self._list_pods(hook, handle) if pods is None else pods)
        ]
        return _merged_chunk(reads, seen, asked_at)

    async def alogs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        from kubernetes_asyncio import client

        seen = (cursor or {}).get("pods", {})
        async with self._async_hook().get_conn() as api:
            pods = self._recent_pods(handle)
            core = client.CoreV1Api(api)
            asked_at = time.time()
            reads = []
            for node, pod in _started(await self._alist_pods(api, handle) if pods is None else pods):
                args = self._log_args(pod, seen.get(pod["metadata"]["name"]))
                reads.append((node, pod, await aread_log(core, **args)))
        return _merged_chunk(reads, seen, asked_at)

    def _log_args(self, pod: dict[str, Any], cursor: dict[str, Any] | None) -> dict[str, Any]:
        args: dict[str, Any] = {
            "name": pod["metadata"]["name"],
            "namespace": self.settings.namespace,
            "container": pod["spec"]["containers"][0]["name"],
            "timestamps": True,
            "limit_bytes": _limit(cursor),
        }
        last = (cursor or {}).get("last")
        if last:
            # The API takes seconds, not a time: ask a little further back, then drop what was seen.
            args["since_seconds"] = max(1, math.ceil(time.time() - _parse_time(last).timestamp()) + 1)
        return args

    def tail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        hook = self._hook()
        pod = _node_pod(self._list_pods(hook, handle), node)
        text = None if pod is None else read_log(hook.core_v1_client, **self._tail_args(pod, lines))
        return (text or "").splitlines()

    async def atail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        from kubernetes_asyncio import client

        async with self._async_hook().get_conn() as api:
            pod = _node_pod(await self._alist_pods(api, handle), node)
            core = client.CoreV1Api(api)
            text = None if pod is None else await aread_log(core, **self._tail_args(pod, lines))
        return (text or "").splitlines()

    def _tail_args(self, pod: dict[str, Any], lines: int) -> dict[str, Any]:
        return {
            "name": pod["metadata"]["name"],
            "namespace": self.settings.namespace,
            "container": pod["spec"]["containers"][0]["name"],
            "tail_lines": lines,
        }

    # -- failure evidence ------------------------------------------------------------------------

    def failure_details(self, handle: JobHandle) -> list[str]:
        """The pods' problems and Warning events, then the job's own events: the training-operator
        records each failed pod's exit on the job ("ExitedWithCode") and may delete the pods
        (cleanPodPolicy) before the job is marked Failed, so the job's events outlive them."""
        hook = self._hook()
        list_events = hook.core_v1_client.list_namespaced_event
        pods = self._list_pods(hook, handle)
        names = [handle.name, *(pod["metadata"]["name"] for pod in pods)]
        events = {
            name: _items(hook.api_client, list_all(list_events, **self._event_query(name))) for name in names
        }
        return _describe_pods(pods, events, handle.name)

    async def afailure_details(self, handle: JobHandle) -> list[str]:
        from kubernetes_asyncio import client

        async with self._async_hook().get_conn() as api:
            list_events = client.CoreV1Api(api).list_namespaced_event
            pods = await self._alist_pods(api, handle)
            events = {}
            for name in [handle.name, *(pod["metadata"]["name"] for pod in pods)]:
                events[name] = _items(api, await alist_all(list_events, **self._event_query(name)))
        return _describe_pods(pods, events, handle.name)

    def _event_query(self, name: str) -> dict[str, Any]:
        return {"namespace": self.settings.namespace, "field_selector": f"involvedObject.name={name}"}

    def classify(self, status: JobStatus, details: list[str], tail: list[str]) -> Failure:
        """The class of a failed (or given up) job: the first of ``ACK_RULES`` its status reason and
        ``details`` match, else what the log tail says (``class_from_text``), else its exit code
        (126/127: config; any other: user code), else capacity for a job that never left pending,
        else infrastructure. (A job deleted from outside ends ``stopped``, which is not a failure:
        the operator does not retry it.)"""
        lines = list(dict.fromkeys(line for line in (*status.reason.split("; "), *details) if line))
        if status.reason_code and not any(status.reason_code in line for line in lines):
            lines.insert(0, f"reason {status.reason_code}")
        for failure_class, pattern in ACK_RULES:
            matched = [line for line in lines if pattern.search(line)]
            if matched:
                return Failure(failure_class=failure_class, evidence=matched)
        text = class_from_text(lines)
        if text is not None:
            return Failure(failure_class=text[0], evidence=[text[1]])
        # The failing pod's output, read from the rank torchrun saw fail first (not the siblings it
        # terminated, not the traceback of a torchrun the kubelet stopped).
        verdict = read_node_output(tail, status.failed_node)
        if verdict.failure_class is not None:
            return Failure(failure_class=verdict.failure_class, evidence=verdict.evidence)
        exit_code = status.exit_code or _exit_code_in_events(lines)
        if exit_code:
            exited = [
                line
                for line in lines
                if f"(exit code {exit_code})" in line or f"with code {exit_code}" in line
            ]
            evidence = (exited or [f"exit code {exit_code}"]) + tail[-1:]
            code_class = FailureClass.CONFIG if exit_code in COMMAND_NOT_RUN else FailureClass.USER_CODE
            return Failure(failure_class=code_class, evidence=evidence)
        if status.state is JobState.PENDING:
            return Failure(
                failure_class=FailureClass.CAPACITY, evidence=[f"the job stayed pending: {status.reason}"]
            )
        return Failure(failure_class=FailureClass.INFRASTRUCTURE, evidence=lines[:3] or [status.raw])

    # -- stop and links --------------------------------------------------------------------------

    def stop(self, handle: JobHandle) -> None:
        """Delete the CR and its ConfigMap, as ``arena delete`` does (pods go with the CR)."""
        self._delete(self._hook(), _kind(handle), handle.name)

    async def astop(self, handle: JobHandle) -> None:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        kind = _kind(handle)
        namespace = self.settings.namespace
        async with self._async_hook().get_conn() as api:
            deletions = (
                client.CustomObjectsApi(api).delete_namespaced_custom_object(
                    GROUP, kind.version, namespace, kind.plural, handle.name
                ),
                client.CoreV1Api(api).delete_namespaced_config_map(
                    configmap_name(handle.name, kind), namespace
                ),
            )
            for deletion in deletions:
                try:
                    await deletion
                except ApiException as exc:
                    if exc.status != 404:
                        raise

    def output_uri(self, handle: JobHandle) -> str | None:
        job = self._get_job(self._hook(), _kind(handle), handle.name) or {}
        return (job.get("metadata", {}).get("annotations") or {}).get(OUTPUT_DIR_ANNOTATION)

    def console_url(self, handle: JobHandle) -> str | None:
        return None


# -- interpreting what the cluster returned -------------------------------------------------------


def _job_id(kind: JobKind, uid: str) -> str:
    """``<kind>/<version>/<uid>``: enough to address the CR again and to tell attempts apart."""
    return f"{kind.plural}/{kind.version}/{uid}"


def _kind(handle: JobHandle) -> JobKind:
    """The CR's kind, from the job id alone (``<plural>/<version>/<uid>``)."""
    plural, version, _uid = handle.job_id.split("/")
    for kind in KINDS:
        if (kind.plural, kind.version) == (plural, version):
            return kind
    raise LookupError(f"job id {handle.job_id!r} names no known training job kind")


def _candidate_kinds(settings: AckSettings) -> list[JobKind]:
    mpi = MPI_JOB_V1ALPHA1 if settings.mpi_api_version == "v1alpha1" else MPI_JOB_V2
    return [PYTORCH_JOB, TF_JOB, mpi]


def _items(api_client: Any, items: list[Any]) -> list[dict[str, Any]]:
    """Listed objects (models of either client) as plain dicts."""
    return api_client.sanitize_for_serialization(items)


def _uid(handle: JobHandle) -> str:
    return handle.job_id.rsplit("/", 1)[-1]


def _pods(api_client: Any, listed: Any, handle: JobHandle) -> list[dict[str, Any]]:
    """Pods of a job, master first, then by replica type and index (the node order of RANK).

    Pods of an earlier CR of the same name (still terminating after it was replaced) are left out:
    their ownerReference names that CR's uid. (arena's old mpi-operator's pods are owned by the
    launcher Job and the workers' StatefulSet, so they are all kept.)
    """
    order = {replica: rank for rank, replica in enumerate(LOG_REPLICAS)}
    kind, uid = _kind(handle).kind, _uid(handle)

    def ours(pod: dict[str, Any]) -> bool:
        refs = pod["metadata"].get("ownerReferences") or []
        return not any(ref.get("kind") == kind and ref.get("uid") != uid for ref in refs)

    def key(pod: dict[str, Any]) -> tuple[int, int, str]:
        labels = pod["metadata"].get("labels", {})
        for type_label, index_label in _REPLICA_LABELS:
            if type_label in labels:
                replica = labels[type_label].lower()
                return (
                    order.get(replica, len(order)),
                    int(labels.get(index_label, 0)),
                    pod["metadata"]["name"],
                )
        return len(order), 0, pod["metadata"]["name"]

    return sorted(filter(ours, _items(api_client, listed)), key=key)


def _job_state(job: dict[str, Any]) -> tuple[JobState, dict[str, Any]]:
    """The state a CR's conditions give, and its newest true condition.

    Conditions are appended as the job moves on, and timestamps have whole seconds: the newest true
    condition is the last true one in the list (arena reads them the same way).
    """
    status = job.get("status") or {}
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"] or _v1alpha1_conditions(
        status
    )
    newest = true[-1] if true else {"type": "Pending"}
    return CONDITION_STATES.get(newest["type"], JobState.PENDING), newest


def _owner(job: dict[str, Any]) -> JobOwner | None:
    """The owner a CR's annotations name, or None when they name no whole one."""
    return JobOwner.from_tags(owner_tags(job["metadata"].get("annotations")))


def _launched(backend: str, kind: JobKind, job: dict[str, Any]) -> LaunchedJob | None:
    """A listed CR as a launched job: None when it ended or names no whole owner."""
    meta = job["metadata"]
    owner = _owner(job)
    state = JobState.STOPPING if meta.get("deletionTimestamp") else _job_state(job)[0]
    if owner is None or state.is_terminal:
        return None
    return LaunchedJob(
        handle=JobHandle(backend=backend, job_id=_job_id(kind, meta["uid"]), name=meta["name"]),
        owner=owner,
        state=state,
        created=_iso(meta.get("creationTimestamp")),
    )


def _status(handle: JobHandle, job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> JobStatus:
    if job is not None and _uid(handle) != job["metadata"]["uid"]:
        raise LookupError(f"job {handle.name} was replaced by a newer attempt")
    if job is None or job["metadata"].get("deletionTimestamp"):
        return _deleted_status(job, pods)
    status = job.get("status") or {}
    state, newest = _job_state(job)
    replicas = ", ".join(
        f"{role}: " + " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        for role, counts in sorted((status.get("replicaStatuses") or {}).items())
    )
    read = _read_problems(pods) if state is not JobState.SUCCEEDED else []
    problems = _problem_lines(read) if state in (JobState.PENDING, JobState.FAILED) else []
    reason = "; ".join(
        part
        for part in (
            ": ".join(p for p in (newest.get("reason"), newest.get("message")) if p),
            *problems,
            replicas and f"replicas {replicas}",
        )
        if part
    )
    failed = _first_failed_node(pods)
    return JobStatus(
        state=state,
        raw=newest["type"],
        reason=reason,
        started=_iso(status.get("startTime")),
        finished=_iso(status.get("completionTime")) if state.is_terminal else None,
        failed_node=failed,
        exit_code=_exit_code(pods[failed]) if failed is not None else None,
        reason_code=_reason_code(read, failed)
        or (newest.get("reason", "") if state is JobState.FAILED else ""),
    )


def _first_failed_node(pods: list[dict[str, Any]]) -> int | None:
    """The node whose pod failed first, by when its container terminated (``finishedAt``; node order
    on a tie): the master's collateral error, ended later, must not hide the worker's own failure.
    A pod failed when its phase says so, or when a container of it ended with a non-zero code, now
    or before the kubelet restarted it in place (``restartPolicy: OnFailure``: only ``lastState``
    keeps that end)."""
    failed = [
        (_finished_at(pod), rank)
        for rank, pod in enumerate(pods)
        if pod.get("status", {}).get("phase") == "Failed" or _bad_ends(pod)
    ]
    return min(failed)[1] if failed else None


def _bad_ends(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The terminated states with a non-zero exit code among the pod's containers' states and last
    states."""
    return [
        terminated
        for container in (pod.get("status") or {}).get("containerStatuses") or []
        for state in (container.get("state"), container.get("lastState"))
        if (terminated := (state or {}).get("terminated")) and terminated.get("exitCode")
    ]


def _finished_at(pod: dict[str, Any]) -> str:
    """When the pod's first container that ended badly finished ("~", after every time, when none
    says)."""
    ends = _bad_ends(pod) or [
        (container.get("state") or {}).get("terminated") or {}
        for container in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    return min((str(end["finishedAt"]) for end in ends if end.get("finishedAt")), default="~")


def _deleted_status(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> JobStatus:
    """A job whose CR is being deleted or gone: stopping until the CR and its pods are gone.

    The CR waits while finalizers hold it (a foreground deletion holds it for its pods); after a
    background deletion (``arena delete``, ``stop``) it is gone at once and the garbage collector
    deletes the pods, each Terminating until its containers stopped (at most its grace period).
    """
    if job is None and not pods:
        return JobStatus(state=JobState.STOPPED, raw="Deleted", reason="the job was deleted (arena delete?)")
    parts = []
    if job is not None:
        held = ", ".join(job["metadata"].get("finalizers") or [])
        parts.append("the job is being deleted" + (f" (finalizers: {held})" if held else ""))
    else:
        parts.append("the job was deleted")
    if pods:
        parts.append("its pods are not gone yet: " + ", ".join(pod["metadata"]["name"] for pod in pods))
    return JobStatus(
        state=JobState.STOPPING, raw="Deleting" if job is not None else "Deleted", reason="; ".join(parts)
    )


def _v1alpha1_conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    """arena's old mpi-operator (v1alpha1) reports ``launcherStatus`` instead of conditions."""
    launcher = status.get("launcherStatus")
    return [{"type": launcher, "status": "True"}] if launcher else []


def _read_problems(pods: list[dict[str, Any]]) -> list[tuple[int, str, PodProblem]]:
    """Every pod's problems (``pod_problems``), read once: (node index, pod name, problem)."""
    return [
        (index, pod["metadata"]["name"], problem)
        for index, pod in enumerate(pods)
        for problem in pod_problems(pod)
    ]


def _problem_lines(read: list[tuple[int, str, PodProblem]]) -> list[str]:
    """Each problem as one line naming its pod and reason: what ended pods or keeps them from
    running (evictions, disruptions, unschedulable, image pulls) and what killed them (OOM, exits)."""
    lines = []
    for _index, name, problem in read:
        if problem.kind == "exited":
            what = f"container {problem.container} {problem.reason or 'Error'}"
            lines.append(f"pod {name}: {what} (exit code {problem.exit_code})")
        elif problem.kind == "disrupted":
            lines.append(f"pod {name}: DisruptionTarget {problem.reason} {problem.message}".strip())
        else:
            lines.append(f"pod {name}: {problem.reason} {problem.message}".strip())
    return lines


def _pod_problems(pods: list[dict[str, Any]]) -> list[str]:
    """What ended pods, keeps them from running or killed them, one line each."""
    return _problem_lines(_read_problems(pods))


def _reason_code(read: list[tuple[int, str, PodProblem]], failed: int | None) -> str:
    """The platform's code for the job's state: the failed node's most telling problem (by
    ``_PROBLEM_RANK``), else the most telling of any pod's (the first node's on a tie); "" when no
    pod has one."""
    ranked = sorted(
        (index != failed, _PROBLEM_RANK[problem.kind], index, problem.reason)
        for index, _name, problem in read
        if problem.reason
    )
    return ranked[0][3] if ranked else ""


def _describe_pods(
    pods: list[dict[str, Any]], events: dict[str, list[dict[str, Any]]], job: str
) -> list[str]:
    """The pods' problems, their Warning events, and every event of the job itself, oldest first
    (the training-operator's are few and Normal ones say which pod exited how)."""
    lines = _pod_problems(pods)
    for name, recorded in events.items():
        for event in recorded:
            if name == job or event.get("type") == "Warning":
                lines.append(f"event {name}: {event.get('reason')}: {event.get('message')}")
    return lines


#: The training-operator's event on the job for a pod that exited non-zero (pkg/controller.v1/common,
#: ``Eventf(job, Normal, "ExitedWithCode", "Pod: %v.%v exited with code %v")``): what remains of a
#: failed pod's exit once cleanPodPolicy deleted it.
_EXITED_EVENT = re.compile(r"ExitedWithCode: Pod: \S+ exited with code (\d+)")


def _exit_code_in_events(lines: list[str]) -> int | None:
    """The exit code of the first pod the job's events say exited non-zero, or None."""
    for line in lines:
        match = _EXITED_EVENT.search(line)
        if match:
            return int(match.group(1))
    return None


def _exit_code(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return terminated.get("exitCode")
    return None


def _started(pods: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(node, pod) of the pods whose containers have started, in node order: those with a log."""
    return [
        (node, pod)
        for node, pod in enumerate(pods)
        if (pod.get("status") or {}).get("phase") not in (None, "Pending")
    ]


def _node_pod(pods: list[dict[str, Any]], node: int) -> dict[str, Any] | None:
    """Node ``node``'s pod (the node order of ``status.failed_node``), once it has started."""
    return dict(_started(pods)).get(node)


@dataclass(frozen=True)
class _StampedLine:
    key: tuple[str, int]
    stamp: str
    node: int
    text: str


def _merged_chunk(
    reads: list[tuple[int, dict[str, Any], str | None]], seen: dict[str, Any], asked_at: float
) -> LogChunk:
    """The pods' new lines merged by timestamp, each prefixed with its node, and each pod's cursor.

    No line is logged after one written later: the pods are read one after another, so a line
    stamped after the first read began (``asked_at``) may still be written to a pod read before it,
    and waits for the next poll; so do the other pods' lines stamped after the last whole line of a
    read cut at its byte bound (``_limit``). The first rule compares the worker's clock with the
    kubelets': where a line read is more than ``LOG_CLOCK_SKEW_SECONDS`` in the worker's future the
    clocks disagree, and holding lines back by the worker's clock would hold them for good, so only
    the second applies. A pod with no log (deleted between listing and reading: cleanPodPolicy, a
    restart) keeps its cursor.
    """
    read: list[tuple[str, list[_StampedLine], bool]] = []
    truncated_at: list[tuple[str, int]] = []
    for node, pod, text in reads:
        if text is None:
            continue
        name = pod["metadata"]["name"]
        lines, reached, truncated = _new_lines(node, seen.get(name), text)
        read.append((name, lines, truncated))
        if truncated:
            truncated_at.append(reached)
    newest = max((line.key for _, lines, _ in read for line in lines), default=None)
    if newest is not None and newest <= _stamp_key(_rfc3339(asked_at + LOG_CLOCK_SKEW_SECONDS)):
        truncated_at.append(_stamp_key(_rfc3339(asked_at)))
    cut = min(truncated_at, default=None)
    shown = [[line for line in lines if cut is None or line.key <= cut] for _, lines, _ in read]
    pods = dict(seen)
    for (name, _, truncated), lines in zip(read, shown, strict=True):
        pods[name] = _advance(pods.get(name), lines, truncated)
    merged = heapq.merge(*shown, key=lambda line: line.key)
    return LogChunk(
        lines=[node_line(line.node, line.text) for line in merged],
        cursor={"pods": pods} if pods else {},
        more=any(truncated for _, _, truncated in read),
    )


def _new_lines(
    node: int, cursor: dict[str, Any] | None, text: str
) -> tuple[list[_StampedLine], tuple[str, int], bool]:
    """A pod's lines after the last one its cursor saw (lines sharing that timestamp are told
    apart by counting), the time of the last whole line read, seen or not, and whether the read
    stopped at its byte bound (it may end mid-line: only whole lines are kept, the rest comes next
    poll)."""
    last = (cursor or {}).get("last")
    seen_at_last = (cursor or {}).get("seen_at_last", 0)
    last_key = _stamp_key(last) if last else None
    truncated = len(text.encode()) >= _limit(cursor)
    complete = text[: text.rfind("\n") + 1] if truncated else text
    lines: list[_StampedLine] = []
    skipped = 0
    key = last_key or ("", 0)
    for raw in complete.splitlines():
        stamp, _, line = raw.partition(" ")
        key = _stamp_key(stamp)
        if last_key is not None and key < last_key:
            continue
        if last_key is not None and key == last_key and skipped < seen_at_last:
            skipped += 1
            continue
        lines.append(_StampedLine(key, stamp, node, line))
    return lines, key, truncated


def _advance(cursor: dict[str, Any] | None, shown: list[_StampedLine], truncated: bool) -> dict[str, Any]:
    """A pod's cursor after ``shown``: its last timestamp, how many lines of it were seen, and the
    next read's byte bound (doubled after a read cut short, see ``LOG_BYTES_MAX``)."""
    limit = min(2 * _limit(cursor), LOG_BYTES_MAX) if truncated else LOG_BYTES_PER_POLL
    if not shown:
        return {**(cursor or {}), "limit": limit}
    last = shown[-1]
    same = (cursor or {}).get("seen_at_last", 0) if (cursor or {}).get("last") == last.stamp else 0
    seen_at_last = same + sum(1 for line in shown if line.key == last.key)
    return {"last": last.stamp, "seen_at_last": seen_at_last, "limit": limit}


def _limit(cursor: dict[str, Any] | None) -> int:
    """The byte bound of a pod's next log read."""
    return int((cursor or {}).get("limit", LOG_BYTES_PER_POLL))


def _rfc3339(epoch: float) -> str:
    """``epoch`` as the kubelet writes a log line's timestamp (RFC 3339, UTC, nanoseconds)."""
    whole = datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{int((epoch % 1) * 1e9):09d}Z"


def _stamp_key(stamp: str) -> tuple[str, int]:
    """Order RFC 3339 UTC timestamps with up to nanoseconds (Python parses only microseconds)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return whole, int((fraction or "0").ljust(9, "0")[:9])


def _parse_time(value: str) -> datetime:
    whole, nanos = _stamp_key(value)
    return datetime.fromisoformat(whole).replace(tzinfo=UTC, microsecond=nanos // 1000)


def _iso(value: str | None) -> str | None:
    return _parse_time(value).astimezone(UTC).isoformat() if value else None
