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

The triggers of a triggerer that watch jobs of the same settings share one backend and one poller
(``StatusListing``): each poll lists the CRs and the pods of all their jobs by arena's ``release``
label, a hundred names a request, rather than reading each job on its own.
"""

from __future__ import annotations

import json
import logging
import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aliyun_training.backends.ack.failures import (
    classify_ack,
    created_pods,
    describe_failure,
    first_event,
    of_job,
    since,
)
from aliyun_training.backends.ack.logs import merged_chunk, read_limit
from aliyun_training.backends.ack.request import (
    GROUP,
    OUTPUT_DIR_ANNOTATION,
    AckSettings,
    JobKind,
    ack_settings,
    build_configmap,
    build_job,
    check,
    configmap_name,
    job_kind,
)
from aliyun_training.backends.ack.status import (
    as_dicts,
    candidate_kinds,
    handle_kind,
    handle_uid,
    job_id,
    job_owner,
    job_pods,
    job_status,
    launched_job,
    node_pod,
    parse_time,
    started_pods,
)
from aliyun_training.backends.base import (
    FoundJob,
    JobHandle,
    JobStatus,
    LaunchedJob,
    LogChunk,
    PlannedSubmission,
    same_owner,
)
from aliyun_training.gpu_use import GpuReading, GpuSample
from aliyun_training.hooks.kubernetes import KubernetesHooks, alist_all, list_all
from aliyun_training.hooks.prometheus import PrometheusError, Series, aquery_range, range_step
from aliyun_training.kubernetes.names import INSTALLATION_LABEL, OWNED, OWNED_LABEL
from aliyun_training.kubernetes.pods import aread_log, read_log, read_or_none
from aliyun_training.spec import TrainingJobSpec, describe_owner
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aliyun_training.failures import Failure

log = logging.getLogger(__name__)

#: How long the pods a status call listed serve the log read after it; later, logs list them again.
POD_LIST_MAX_AGE_SECONDS = 5.0
#: Release names in one label selector of a batched listing. A name is a DNS label of at most 63
#: characters, so a hundred of them, comma-separated (``%2C`` in the query), make a request line of
#: about 7 KB with the path and a page's ``continue`` token: inside the 8 KiB line that proxies in
#: front of an API server commonly accept (nginx's ``large_client_header_buffers``), and far inside
#: the API server's own 1 MiB of headers.
RELEASES_PER_SELECTOR = 100
#: The finest step of a GPU range query: a minute, CloudMonitor's period for DLC, so both backends'
#: samples stand for as long; the DCGM exporter collects every 30 s by default (``--collect-interval``).
GPU_STEP_SECONDS = 60.0
NO_GPU_METRICS_URL = (
    "the environment names no gpu_metrics_url (a Prometheus with the DCGM exporter's metrics)"
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
        return job_pods(hook.api_client, listed, handle)

    async def _alist_pods(self, api: Any, handle: JobHandle) -> list[dict[str, Any]]:
        from kubernetes_asyncio import client

        listed = await alist_all(client.CoreV1Api(api).list_namespaced_pod, **self._pod_query(handle))
        return job_pods(api, listed, handle)

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
        """What the cluster would refuse only after pods sat Pending (``request.check``)."""
        check(spec, name, self.settings)

    def submit(self, spec: TrainingJobSpec, name: str) -> JobHandle:
        """Create the CR, then the ConfigMap that makes it arena's (owned by the CR)."""
        self.check(spec, name)
        kind = job_kind(spec, self.settings)
        hook = self._hook()
        namespace = self.settings.namespace
        existing = self._get_job(hook, kind, name)
        if existing is not None:
            found = job_owner(existing)
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
        return JobHandle(backend=self.name, job_id=job_id(kind, uid), name=name)

    def find(self, name: str, since: datetime | None = None) -> FoundJob | None:
        hook = self._hook()
        for kind in candidate_kinds(self.settings):
            job = self._get_job(hook, kind, name)
            if job is not None:
                handle = JobHandle(backend=self.name, job_id=job_id(kind, job["metadata"]["uid"]), name=name)
                return FoundJob(handle=handle, owner=job_owner(job))
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
        for kind in candidate_kinds(self.settings):
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
            jobs = (launched_job(self.name, kind, item) for item in listed)
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
        job = self._get_job(hook, handle_kind(handle), handle.name)
        return job_status(handle, job, self._listed_by_status(handle, self._list_pods(hook, handle)))

    async def astatus(self, handle: JobHandle) -> JobStatus:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        kind = handle_kind(handle)
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
        return job_status(handle, job, pods)

    # -- batched status (StatusListing) -----------------------------------------------------------

    @property
    def batch_key(self) -> str:
        """``arena:`` and every setting as JSON with sorted keys: one instance reads for all the jobs of
        a key, so jobs share it only when every setting a read depends on (the connection, the
        namespace, the MPIJob version...) is the same."""
        return "arena:" + json.dumps(self.settings.model_dump(mode="json"), sort_keys=True)

    async def alisted_statuses(self, handles: Sequence[JobHandle]) -> dict[str, JobStatus]:
        """Each job's status from one listing of its kind's CRs and one of the pods, by a set-based
        selector on arena's ``release`` label, which the CR and its pods both carry
        (``release in (a,b,...)``, ``RELEASES_PER_SELECTOR`` names a selector).

        Requests per poll, for N jobs of one kind in the namespace: ceil(N/100) CR lists and
        ceil(N/100) pod lists over one connection (each one more per further page of
        ``LIST_PAGE_SIZE`` items); a kind's jobs are listed apart from another kind's.

        Left out, for ``astatus`` to say what became of them: a job whose CR is gone or was
        replaced by a newer attempt under its name (another uid), and every job of a kind whose
        CRs the cluster no longer serves (404). The pods of each job answered are kept for the
        log read that follows (``_listed_by_status``).
        """
        by_kind: dict[JobKind, list[JobHandle]] = {}
        for handle in handles:
            by_kind.setdefault(handle_kind(handle), []).append(handle)
        statuses: dict[str, JobStatus] = {}
        async with self._async_hook().get_conn() as api:
            for kind, of_kind in by_kind.items():
                jobs, pods = await self._alist_releases(api, kind, [handle.name for handle in of_kind])
                for handle in of_kind:
                    job = jobs.get(handle.name)
                    if job is None or job["metadata"]["uid"] != handle_uid(handle):
                        continue
                    listed = self._listed_by_status(handle, job_pods(api, pods.get(handle.name, []), handle))
                    statuses[handle.job_id] = job_status(handle, job, listed)
        return statuses

    async def _alist_releases(
        self, api: Any, kind: JobKind, names: list[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
        """The CRs of ``kind`` named ``names`` by name, and the pods of those releases by release,
        ``RELEASES_PER_SELECTOR`` names a selector; no CRs where the cluster serves no ``kind``."""
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        namespace = self.settings.namespace
        list_jobs = client.CustomObjectsApi(api).list_namespaced_custom_object
        list_pods = client.CoreV1Api(api).list_namespaced_pod
        jobs: dict[str, dict[str, Any]] = {}
        pods: dict[str, list[Any]] = {}
        unique = list(dict.fromkeys(names))
        for start in range(0, len(unique), RELEASES_PER_SELECTOR):
            selector = f"release in ({','.join(unique[start : start + RELEASES_PER_SELECTOR])})"
            try:
                listed = await alist_all(
                    list_jobs, GROUP, kind.version, namespace, kind.plural, label_selector=selector
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                return {}, {}
            jobs.update((job["metadata"]["name"], job) for job in listed)
            for pod in await alist_all(list_pods, namespace=namespace, label_selector=selector):
                pods.setdefault(pod.metadata.labels["release"], []).append(pod)
        return jobs, pods

    def forget(self, handle: JobHandle) -> None:
        """Drop the pods kept for a job no longer watched."""
        self._listed.pop(handle.job_id, None)

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
            for node, pod in started_pods(self._list_pods(hook, handle) if pods is None else pods)
        ]
        return merged_chunk(reads, seen, asked_at)

    async def alogs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        from kubernetes_asyncio import client

        seen = (cursor or {}).get("pods", {})
        async with self._async_hook().get_conn() as api:
            pods = self._recent_pods(handle)
            core = client.CoreV1Api(api)
            asked_at = time.time()
            reads = []
            for node, pod in started_pods(await self._alist_pods(api, handle) if pods is None else pods):
                args = self._log_args(pod, seen.get(pod["metadata"]["name"]))
                reads.append((node, pod, await aread_log(core, **args)))
        return merged_chunk(reads, seen, asked_at)

    def _log_args(self, pod: dict[str, Any], cursor: dict[str, Any] | None) -> dict[str, Any]:
        args: dict[str, Any] = {
            "name": pod["metadata"]["name"],
            "namespace": self.settings.namespace,
            "container": pod["spec"]["containers"][0]["name"],
            "timestamps": True,
            "limit_bytes": read_limit(cursor),
        }
        last = (cursor or {}).get("last")
        if last:
            # The API takes seconds, not a time: ask a little further back, then drop what was seen.
            args["since_seconds"] = max(1, math.ceil(time.time() - parse_time(last).timestamp()) + 1)
        return args

    def tail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        hook = self._hook()
        pod = node_pod(self._list_pods(hook, handle), node)
        text = None if pod is None else read_log(hook.core_v1_client, **self._tail_args(pod, lines))
        return (text or "").splitlines()

    async def atail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        from kubernetes_asyncio import client

        async with self._async_hook().get_conn() as api:
            pod = node_pod(await self._alist_pods(api, handle), node)
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

    # -- GPU use ---------------------------------------------------------------------------------

    async def agpu_reading(self, handle: JobHandle, since: datetime) -> GpuReading:
        """Each started pod's GPUs since ``since`` from the DCGM exporter's metrics in the Prometheus
        the environment names (``gpu_metrics_url``): ``DCGM_FI_DEV_GPU_UTIL`` and
        ``DCGM_FI_DEV_FB_USED`` of the job's pods (the exporter's ``namespace`` and ``pod`` labels,
        which it sets when it maps GPUs to pods), one series per GPU (its ``gpu`` label)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        url = self.settings.gpu_metrics_url
        if not url:
            return GpuReading(source=self.name, unavailable=NO_GPU_METRICS_URL)
        try:
            async with self._async_hook().get_conn() as api:
                pods = started_pods(await self._alist_pods(api, handle))
            end = datetime.now(UTC)
            if not pods or since >= end:
                return GpuReading(source=self.name)
            nodes = {pod["metadata"]["name"]: f"node-{node}" for node, pod in pods}
            selector = dcgm_selector(self.settings.namespace, list(nodes))
            step = range_step(since, end, GPU_STEP_SECONDS)
            utilization = await aquery_range(url, f"DCGM_FI_DEV_GPU_UTIL{selector}", since, end, step)
            memory = await aquery_range(url, f"DCGM_FI_DEV_FB_USED{selector}", since, end, step)
        except PrometheusError as exc:
            return GpuReading(source=self.name, unavailable=f"Prometheus (DCGM exporter): {exc}")
        except (ApiException, OSError) as exc:
            reason = exc.reason if isinstance(exc, ApiException) else exc
            return GpuReading(source=self.name, unavailable=f"the job's pods could not be listed: {reason}")
        samples = dcgm_samples(nodes, utilization, memory)
        # A range query evaluates at its start too: that moment was read before, so (since, end], as
        # CloudMonitor answers.
        return GpuReading(source=self.name, samples=[sample for sample in samples if sample.at > since])

    # -- failure evidence ------------------------------------------------------------------------

    def failure_details(self, handle: JobHandle) -> list[str]:
        """The pods' problems and telling events, then the job's own events: the training-operator
        records each failed pod's exit on the job ("ExitedWithCode") and may delete the pods
        (cleanPodPolicy) before the job is marked Failed, so the job's events outlive them, and so
        do the deleted pods' own events (an hour, the API server's event TTL): a deleted pod is read
        by the name the job's "SuccessfulCreatePod" events give it (``_pod_names``)."""
        hook = self._hook()
        list_events = hook.core_v1_client.list_namespaced_event

        def read(name: str) -> list[dict[str, Any]]:
            return as_dicts(hook.api_client, list_all(list_events, **self._event_query(name)))

        pods = self._list_pods(hook, handle)
        job_events = of_job(read(handle.name), handle_uid(handle))
        start = first_event(job_events)
        events = {handle.name: job_events}
        for name in _pod_names(pods, job_events):
            events[name] = since(read(name), start)
        return describe_failure(pods, events, handle.name)

    async def afailure_details(self, handle: JobHandle) -> list[str]:
        from kubernetes_asyncio import client

        async with self._async_hook().get_conn() as api:
            list_events = client.CoreV1Api(api).list_namespaced_event

            async def read(name: str) -> list[dict[str, Any]]:
                return as_dicts(api, await alist_all(list_events, **self._event_query(name)))

            pods = await self._alist_pods(api, handle)
            job_events = of_job(await read(handle.name), handle_uid(handle))
            start = first_event(job_events)
            events = {handle.name: job_events}
            for name in _pod_names(pods, job_events):
                events[name] = since(await read(name), start)
        return describe_failure(pods, events, handle.name)

    def _event_query(self, name: str) -> dict[str, Any]:
        return {"namespace": self.settings.namespace, "field_selector": f"involvedObject.name={name}"}

    def classify(self, status: JobStatus, details: list[str], tail: list[str]) -> Failure:
        """The pods' reasons and events, the log tail, the exit code, in the order ``ACK_RULES`` and
        :func:`classify_ack` give."""
        return classify_ack(status, details, tail)

    # -- stop and links --------------------------------------------------------------------------

    def stop(self, handle: JobHandle) -> None:
        """Delete the CR and its ConfigMap, as ``arena delete`` does (pods go with the CR)."""
        self._delete(self._hook(), handle_kind(handle), handle.name)

    async def astop(self, handle: JobHandle) -> None:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        kind = handle_kind(handle)
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
        job = self._get_job(self._hook(), handle_kind(handle), handle.name) or {}
        return (job.get("metadata", {}).get("annotations") or {}).get(OUTPUT_DIR_ANNOTATION)

    def console_url(self, handle: JobHandle) -> str | None:
        return None


def _pod_names(pods: list[dict[str, Any]], job_events: list[dict[str, Any]]) -> list[str]:
    """The pods whose events tell of the failure: each listed pod, then each the job's own events
    say the operator created and that is gone, so only pods this job created are read, never
    another job's."""
    return list(dict.fromkeys([*(pod["metadata"]["name"] for pod in pods), *created_pods(job_events)]))


def dcgm_selector(namespace: str, pods: list[str]) -> str:
    """The PromQL label matchers of the DCGM exporter's series of ``pods``: their namespace, and
    the pod names as a regex alternation (a name's dots escaped: it is matched whole)."""
    names = "|".join(name.replace(".", "\\\\.") for name in pods)
    return f'{{namespace="{namespace}",pod=~"{names}"}}'


def dcgm_samples(nodes: dict[str, str], utilization: list[Series], memory: list[Series]) -> list[GpuSample]:
    """One sample per GPU series and time: its node by pod (``nodes``), its ``gpu`` label, and the
    memory the same GPU held at that time."""
    held = {
        (labels.get("pod"), labels.get("gpu"), at): value for labels, points in memory for at, value in points
    }
    return [
        GpuSample(
            at=datetime.fromtimestamp(at, UTC),
            node=nodes[labels["pod"]],
            gpu=labels.get("gpu", "all"),
            utilization=value,
            memory_used_mib=held.get((labels["pod"], labels.get("gpu"), at)),
        )
        for labels, points in utilization
        if labels.get("pod") in nodes
        for at, value in points
    ]
