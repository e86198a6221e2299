"""Run a ``TrainingJobSpec`` as a PAI-DLC job (Lingjun or ECS resources) through the real SDK.

The spec's command is the torchrun line the local backend runs: DLC injects MASTER_ADDR,
MASTER_PORT, WORLD_SIZE (nodes) and RANK (node index), and on Lingjun the NCCL_IB_* variables.
The deterministic job name is the DisplayName (and a tag), so ``find`` reattaches through ListJobs;
the task instance that launched the job is tagged too, so ``launched`` tells whose each job is;
CreateJob has no idempotency token, so a CreateJob retried after a lost response first looks the
job up by name instead of creating a second one. Every call goes through ``hooks.dlc.DlcHook``
(DescribeVpcs through ``VpcHook``, the jobs' GPU use through CloudMonitor's ``CloudMonitorHook``);
:func:`create_job_request` builds the CreateJob body with no call and no connection, so a dry run
can show it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

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
from aliyun_training.backends.dlc.failures import classify_dlc, describe_failure
from aliyun_training.backends.dlc.logs import (
    LOG_MEMORY_LINES,
    LOG_OVERLAP_SECONDS,
    LOG_VIEW_MAX_AGE_SECONDS,
    POD_LOGS_MAX_LINES,
    LogView,
    TailSearch,
    log_since,
    unseen,
)
from aliyun_training.backends.dlc.request import (
    INSTALLATION_TAG,
    NAME_TAG,
    DlcJobSettings,
    check_spec,
    create_job_request,
)
from aliyun_training.backends.dlc.status import (
    DLC_STATES,
    QUEUE_STATUSES,
    UNENDED_STATUSES,
    blocking_reason,
    dlc_time,
    ended_badly,
    ended_nodes,
    in_quota_queue,
    iso,
    last_pull_event,
    pending_pod,
    phase,
    pods_to_explain,
    status_reason,
    why_waiting,
)
from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.gpu_use import GpuReading, GpuSample
from aliyun_training.hooks.alibaba_cloud import AlibabaCloudConnectionError, shared_hook
from aliyun_training.hooks.cms import CloudMonitorHook
from aliyun_training.hooks.dlc import LIST_JOBS_PAGE_SIZE, DlcHook
from aliyun_training.hooks.paistudio import PaiStudioHook
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.spec import JobOwner, TrainingJobSpec
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from aliyun_training.failures import Failure

log = logging.getLogger(__name__)

T = TypeVar("T")


#: The best-effort reads a poll makes beside GetJob; after one failure a backend stops asking.
QUEUE_INFO, POD_EVENTS = "PAI Studio QueueInfo", "GetPodEvents"

#: Where PAI-DLC reports its jobs' GPU use in CloudMonitor, and the metrics read there, one series
#: per pod (dimensions ``jobId`` and ``pod``). docs/fidelity.md ("CloudMonitor (GPU use of DLC
#: jobs)") names the sources of these names and what stays unverified.
GPU_NAMESPACE = "acs_pai_dlc"
GPU_UTILIZATION_METRIC = "JOB_GPU_ACCELERATOR_DUTTY_UTIL"
GPU_MEMORY_METRIC = "JOB_GPU_MEMORY_USED"
#: The metrics' reporting period; CloudMonitor keeps 60-second data for 31 days, which is also the
#: longest range one DescribeMetricList may ask for.
GPU_PERIOD_SECONDS = 60
GPU_LOOKBACK = timedelta(days=31)
#: The best-effort read beside the utilization: without it, samples carry no memory.
GPU_MEMORY = f"CloudMonitor {GPU_MEMORY_METRIC}"


#: How far back ``find`` searches when the caller knows no earlier bound. ListJobs filters on the
#: creation time and, without StartTime, only looks 7 days back; a job runs at most
#: ``timeout_minutes`` (capped at 30 days by the spec) after it was created and queued, so a day
#: more covers the whole life of any job a retry could still be waiting for.
FIND_HORIZON = timedelta(days=31)


class DlcBackend:
    """Jobs on PAI-DLC. Sync calls serve the worker; ``a*`` calls use the SDK's ``*_async`` methods.

    Every call stands alone: ``logs`` and ``tail`` read the job's pods and times themselves on a
    backend that never read the status. What a ``status`` just read is reused for
    ``LOG_VIEW_MAX_AGE_SECONDS``, so a monitor's poll (status, then logs) asks GetJob once.
    """

    name = "dlc"

    def __init__(
        self,
        alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID,
        workspace_id: str | None = None,
        vpc: dict[str, Any] | None = None,
        image_registry_conn_id: str | None = None,
        region: str | None = None,
        log_lines_per_poll: int = 500,
        job_settings: DlcJobSettings | dict[str, Any] | None = None,
    ) -> None:
        #: DLC's own part of the jobs this backend sends (the quota or ECS spec, GPU model, priority).
        self.job_settings = validate_record(DlcJobSettings, job_settings or {})
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self.workspace_id = workspace_id
        self.vpc = vpc
        self.image_registry_conn_id = image_registry_conn_id
        self.region = region
        self.log_lines_per_poll = log_lines_per_poll
        self.hook = shared_hook(DlcHook, alibaba_cloud_conn_id, region)
        #: Per job: the last GetJob's LogView (an optimisation: see LOG_VIEW_MAX_AGE_SECONDS).
        self._views: dict[str, LogView] = {}
        #: The VPC's CIDR blocks as DescribeVpcs reported them, read once per backend.
        self._vpc_cidrs: list[str] | None = None
        #: Best-effort reads (``QUEUE_INFO``, ``POD_EVENTS``) that failed once: not asked again.
        self._unavailable: set[str] = set()

    @property
    def config(self) -> dict[str, Any]:
        return {
            "alibaba_cloud_conn_id": self.alibaba_cloud_conn_id,
            "workspace_id": self.workspace_id,
            "vpc": self.vpc,
            "image_registry_conn_id": self.image_registry_conn_id,
            "region": self.region,
            "log_lines_per_poll": self.log_lines_per_poll,
            "job_settings": self.job_settings.model_dump(mode="json"),
        }

    # -- request ---------------------------------------------------------------------------------

    def create_request(self, spec: TrainingJobSpec, name: str) -> Any:
        """The CreateJob request ``submit`` sends: :func:`create_job_request` with the VPC's CIDR
        blocks and the private registry's login read from their sources."""
        return create_job_request(
            spec,
            name,
            job_settings=self.job_settings,
            workspace_id=self.workspace_id,
            region=self.hook.region,
            vpc=self.vpc,
            extended_cidrs=self._extended_cidrs(),
            image_config=self._image_config(),
        )

    def planned_requests(self, spec: TrainingJobSpec, name: str) -> list[PlannedSubmission]:
        """The CreateJob body; the registry login and the VPC's CIDR blocks are read at submit."""
        from alibabacloud_pai_dlc20201203 import models

        registry = self.image_registry_conn_id
        image_config = (
            models.ImageConfig(
                docker_registry=f"<host of connection {registry}>",
                username=f"<login of connection {registry}>",
                password=f"<password of connection {registry}>",
            )
            if registry
            else None
        )
        vpc = self.vpc or {}
        cidrs = list(vpc.get("extended_cidrs") or []) or [
            f"<every CIDR block of {vpc.get('vpc_id')}, read from DescribeVpcs at submit>"
        ]
        request = create_job_request(
            spec,
            name,
            job_settings=self.job_settings,
            workspace_id=self.workspace_id,
            region=self.region or "<region of the connection>",
            vpc=self.vpc,
            extended_cidrs=cidrs,
            image_config=image_config,
        )
        return [PlannedSubmission("dlc", "CreateJob", request.to_map())]

    def _extended_cidrs(self) -> list[str]:
        """The environment's ``vpc.extended_cidrs``, else the VPC's blocks from DescribeVpcs."""
        if not self.vpc:
            return []
        return list(self.vpc.get("extended_cidrs") or []) or self._described_cidrs()

    def _described_cidrs(self) -> list[str]:
        assert self.vpc is not None
        if self._vpc_cidrs is None:
            from aliyun_training.hooks.vpc import VpcHook

            self._vpc_cidrs = shared_hook(VpcHook, self.alibaba_cloud_conn_id, self.region).cidr_blocks(
                self.vpc["vpc_id"]
            )
        if not self._vpc_cidrs:
            raise SpecError(
                f"vpc.extended_cidrs: DescribeVpcs reports no CIDR block for VPC {self.vpc['vpc_id']} in "
                f"{self.hook.region}, and DLC needs every CIDR block of the VPC when a vSwitch is given "
                '(fix: list them in the environment file\'s vpc.extended_cidrs, e.g. ["192.168.0.0/16"], '
                "or check vpc.vpc_id and the region)"
            )
        return self._vpc_cidrs

    def _image_config(self) -> Any:
        """Private-registry credentials from an Airflow connection (host, login, password)."""
        if not self.image_registry_conn_id:
            return None
        from alibabacloud_pai_dlc20201203 import models

        from aliyun_training.hooks.container_registry import ContainerRegistryHook

        login = ContainerRegistryHook(self.image_registry_conn_id).login()
        if login is None or not (login.host and login.login and login.password):
            raise SpecError(
                f"image_registry_conn_id: connection {self.image_registry_conn_id} needs host "
                "(the registry), login and password"
            )
        return models.ImageConfig(docker_registry=login.host, username=login.login, password=login.password)

    # -- submit and find -------------------------------------------------------------------------

    def check(self, spec: TrainingJobSpec, name: str) -> None:
        """DLC's rules on a spec with this backend's ``job_settings`` (``request.check_spec``); they do
        not depend on the job's name."""
        check_spec(spec, self.job_settings)

    def submit(self, spec: TrainingJobSpec, name: str) -> JobHandle:
        """CreateJob once: a retry after a lost response first looks for the job it may have made."""
        self.check(spec, name)
        request = self.create_request(spec, name)

        def existing() -> str | None:
            made = self._find_made(name, spec.owner)
            if made is None:
                return None
            log.warning("CreateJob's earlier response was lost; job %s exists, not creating again", made)
            return made.job_id

        return JobHandle(backend=self.name, job_id=self.hook.create_job(request, existing), name=name)

    def find(self, name: str, since: datetime | None = None) -> FoundJob | None:
        """The newest job whose DisplayName is exactly ``name``, created at or after ``since``, with
        the owner its tags name.

        ListJobs searches only the last 7 days without StartTime and matches DisplayName fuzzily
        (``name`` also finds ``name-2``), so this asks from ``since`` (else ``FIND_HORIZON`` ago),
        newest first, and pages until the first exact match or the end of the listing.
        """
        start_time = dlc_time((since or datetime.now(UTC) - FIND_HORIZON).timestamp())
        jobs = self.hook.jobs(display_name=name, workspace_id=self.workspace_id, start_time=start_time)
        newest = next((job for job in jobs if job.display_name == name), None)
        if newest is None:
            return None
        owner = JobOwner.from_tags((newest.settings.tags if newest.settings else None) or {})
        return FoundJob(handle=JobHandle(backend=self.name, job_id=newest.job_id, name=name), owner=owner)

    def _find_made(self, name: str, owner: JobOwner | None) -> JobHandle | None:
        """The job a CreateJob whose answer was lost made: the newest of ``name``, if its tags name
        ``owner``'s task (``base.same_owner``) and it is pending or running. Made by this submit, it
        would be the newest, and nobody would have stopped it: a newest job that is stopping is an
        earlier one, whose machines are not free yet, and the lost CreateJob made none. An ended
        one is taken as earlier too, which misses a made job that already failed within the
        retry's backoff.
        """
        found = self.find(name)
        if found is None or not same_owner(owner, found.owner):
            return None
        if self.status(found.handle).state not in (JobState.PENDING, JobState.RUNNING):
            return None
        return found.handle

    # -- status ----------------------------------------------------------------------------------

    def status(self, handle: JobHandle) -> JobStatus:
        """GetJob; while the job queues, PAI Studio's QueueInfo for its place; while its pods are
        prepared, the first pending pod's events (an image that cannot be pulled). Both best effort."""
        job = self.hook.get_job(handle.job_id)
        queued = events = None
        if in_quota_queue(job):
            ask = self._studio.queue_info
            queued = self._best_effort(QUEUE_INFO, job.job_id, lambda: ask(job.resource_id, job.job_id))
        if (pod := pending_pod(job)) is not None:
            events = self._best_effort(
                POD_EVENTS, job.job_id, lambda: self.hook.get_pod_events(job.job_id, pod)
            )
        return self._interpret(handle, job, queued, events)

    async def astatus(self, handle: JobHandle) -> JobStatus:
        job = await self.hook.aget_job(handle.job_id)
        queued = events = None
        if in_quota_queue(job):
            ask = self._studio.aqueue_info
            queued = await self._abest_effort(
                QUEUE_INFO, job.job_id, lambda: ask(job.resource_id, job.job_id)
            )
        if (pod := pending_pod(job)) is not None:
            events = await self._abest_effort(
                POD_EVENTS, job.job_id, lambda: self.hook.aget_pod_events(job.job_id, pod)
            )
        return self._interpret(handle, job, queued, events)

    def _best_effort(self, read: str, job_id: str, call: Callable[[], T]) -> T | None:
        """``call``'s answer, or None when this read failed before or fails now (see ``_unavailable``)."""
        if read in self._unavailable:
            return None
        try:
            return call()
        except AlibabaCloudApiError as exc:
            self._best_effort_failed(read, job_id, exc)
            return None

    async def _abest_effort(self, read: str, job_id: str, call: Callable[[], Awaitable[T]]) -> T | None:
        if read in self._unavailable:
            return None
        try:
            return await call()
        except AlibabaCloudApiError as exc:
            self._best_effort_failed(read, job_id, exc)
            return None

    @property
    def _studio(self) -> PaiStudioHook:
        return shared_hook(PaiStudioHook, self.alibaba_cloud_conn_id, self.region)

    def _best_effort_failed(self, read: str, job_id: str, exc: AlibabaCloudApiError) -> None:
        """Where a job waits (its place in the quota's queue, its pods' events) and the GPU memory it
        holds are information, not its state: without them monitoring goes on, and this backend does
        not ask again (no permission, no route, no such metric: the next poll would fail alike)."""
        self._unavailable.add(read)
        log.warning("Job %s: %s is unavailable (%s); monitoring goes on without it", job_id, read, exc)

    def _interpret(
        self,
        handle: JobHandle,
        job: Any,
        queued: Any = None,
        pod_events: list[str] | None = None,
        *,
        listed: bool = False,
    ) -> JobStatus:
        """``job`` (GetJob's answer, or with ``listed`` a ListJobs item) as a status; ``queued`` and
        ``pod_events`` are the details ``status`` read beside it."""
        state = DLC_STATES.get(job.status)
        if state is None:
            log.warning(
                "Job %s reports status %r, unknown to this backend: treating it as running",
                handle.job_id,
                job.status,
            )
            state = JobState.RUNNING
        self._views[handle.job_id] = LogView.of(job)
        ended = ended_badly(job)
        failed = ended[0][0] if ended else None
        reason, reason_code = "", job.reason_code or ""
        if state in (JobState.FAILED, JobState.STOPPED):
            reason = status_reason(job)
        elif job.status in QUEUE_STATUSES:
            reason = why_waiting(job, queued)
        elif state is JobState.PENDING:
            pulling = last_pull_event(pod_events or [])
            reason = "; ".join(part for part in (status_reason(job), pulling) if part)
            reason_code = blocking_reason([reason]) or reason_code
        return JobStatus(
            state=state,
            raw=job.status,
            reason=reason,
            reason_code=reason_code,
            started=iso(job.gmt_running_time or job.gmt_create_time),
            finished=iso(job.gmt_finish_time) if state.is_terminal else None,
            failed_node=failed,
            ended_nodes=ended_nodes(job) if state is JobState.FAILED else [],
            history=[phase(item) for item in job.status_history or []],
            needs_details=listed and pending_pod(job) is not None,
        )

    # -- many jobs at once -----------------------------------------------------------------------

    @property
    def batch_key(self) -> str:
        """The account (connection), region and workspace a listing covers, and the log setting the
        shared instance reads every job's logs with."""
        return json.dumps(
            ["dlc", self.alibaba_cloud_conn_id, self.region, self.workspace_id, self.log_lines_per_poll]
        )

    async def alisted_statuses(self, handles: Sequence[JobHandle]) -> dict[str, JobStatus]:
        """ListJobs filtered by JobIds, ``LIST_JOBS_PAGE_SIZE`` ids a call (one page each), the calls
        side by side: 1,000 jobs are 10 requests a poll instead of 1,000 GetJob.

        ListJobs filters on the creation time and looks back 7 days without StartTime, so this asks
        from ``FIND_HORIZON`` ago, as ``find`` does; a job created earlier is left out and its watcher
        asks GetJob. A JobItem carries what GetJob's status is read from (Status, ReasonCode and
        ReasonMessage, SubStatus, Pods, StatusHistory and the Gmt* times); the reads GetJob's status
        adds (the quota queue's QueueInfo, a pending pod's events) are not made here; a job with a
        pod being prepared is marked ``needs_details``, so its watcher reads them.
        """
        start_time = dlc_time((datetime.now(UTC) - FIND_HORIZON).timestamp())
        by_id = {handle.job_id: handle for handle in handles}
        ids = list(by_id)
        pages = await asyncio.gather(
            *(
                self.hook.ajobs_by_id(
                    ids[first : first + LIST_JOBS_PAGE_SIZE],
                    workspace_id=self.workspace_id,
                    start_time=start_time,
                )
                for first in range(0, len(ids), LIST_JOBS_PAGE_SIZE)
            )
        )
        return {
            job.job_id: self._interpret(by_id[job.job_id], job, listed=True)
            for page in pages
            for job in page
            if job.job_id in by_id
        }

    def forget(self, handle: JobHandle) -> None:
        self._views.pop(handle.job_id, None)

    # -- logs ------------------------------------------------------------------------------------

    def _recent_view(self, handle: JobHandle) -> LogView | None:
        view = self._views.get(handle.job_id)
        fresh = view is not None and time.monotonic() - view.read_at <= LOG_VIEW_MAX_AGE_SECONDS
        return view if fresh else None

    def _view(self, handle: JobHandle) -> LogView:
        """The job's pods and times: what a status just read, else GetJob now."""
        view = self._recent_view(handle)
        if view is None:
            view = self._views[handle.job_id] = LogView.of(self.hook.get_job(handle.job_id))
        return view

    async def _aview(self, handle: JobHandle) -> LogView:
        view = self._recent_view(handle)
        if view is None:
            view = self._views[handle.job_id] = LogView.of(await self.hook.aget_job(handle.job_id))
        return view

    def logs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        """New lines of every node since ``cursor``, each prefixed with its node: none twice, at most
        ``log_lines_per_poll`` per node.

        DLC returns log lines without times, filtered by StartTime. Each poll asks every pod from a
        little before its previous poll (``LOG_OVERLAP_SECONDS``) and drops the lines it has already
        seen; the first asks from the job's start. Without times, the nodes' lines of one poll
        cannot be interleaved: they follow each other node by node (the master first).
        """
        view = self._view(handle)
        seen = (cursor or {}).get("pods", {})
        reads = []
        for pod in view.pods:
            asked_at = time.time()
            start = log_since(view, seen.get(pod))
            fetched = self.hook.get_pod_logs(
                handle.job_id, pod, max_lines=self.log_lines_per_poll, start_time=start
            )
            reads.append((pod, fetched, asked_at))
        return self._log_chunk(handle, seen, reads)

    async def alogs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        view = await self._aview(handle)
        seen = (cursor or {}).get("pods", {})
        reads = []
        for pod in view.pods:
            asked_at = time.time()
            start = log_since(view, seen.get(pod))
            fetched = await self.hook.aget_pod_logs(
                handle.job_id, pod, max_lines=self.log_lines_per_poll, start_time=start
            )
            reads.append((pod, fetched, asked_at))
        return self._log_chunk(handle, seen, reads)

    def _log_chunk(
        self, handle: JobHandle, seen: dict[str, Any], reads: list[tuple[str, list[str], float]]
    ) -> LogChunk:
        """Each pod's unseen lines, node by node, and the cursor that remembers what each pod showed."""
        lines: list[str] = []
        pods: dict[str, Any] = dict(seen)
        for node, (pod, fetched, asked_at) in enumerate(reads):
            recent = list((seen.get(pod) or {}).get("recent", []))
            new = unseen(recent, fetched)
            if len(fetched) >= self.log_lines_per_poll:
                log.warning(
                    "Job %s: pod %s wrote more than %d log lines since the last poll; some may be missing "
                    "here (the console has the full log)",
                    handle.job_id,
                    pod,
                    self.log_lines_per_poll,
                )
            lines += [node_line(node, line) for line in new]
            since = dlc_time(asked_at - LOG_OVERLAP_SECONDS)
            pods[pod] = {"since": since, "recent": (recent + new)[-LOG_MEMORY_LINES:]}
        return LogChunk(lines=lines, cursor={"pods": pods} if pods else {})

    def tail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        """The last ``lines`` lines of node ``node`` (at most ``POD_LOGS_MAX_LINES`` - 1)."""
        view = self._view(handle)
        pod = view.pod(node)
        if pod is None:
            return []
        search = TailSearch(lines=lines, first=view.first, end=view.finished or time.time())
        while (start := search.next_start()) is not None:
            search.record(
                self.hook.get_pod_logs(handle.job_id, pod, max_lines=POD_LOGS_MAX_LINES, start_time=start)
            )
        return search.result(handle.job_id)

    async def atail(self, handle: JobHandle, node: int, lines: int = 50) -> list[str]:
        view = await self._aview(handle)
        pod = view.pod(node)
        if pod is None:
            return []
        search = TailSearch(lines=lines, first=view.first, end=view.finished or time.time())
        while (start := search.next_start()) is not None:
            search.record(
                await self.hook.aget_pod_logs(
                    handle.job_id, pod, max_lines=POD_LOGS_MAX_LINES, start_time=start
                )
            )
        return search.result(handle.job_id)

    # -- GPU use ---------------------------------------------------------------------------------

    @property
    def _monitor(self) -> CloudMonitorHook:
        return shared_hook(CloudMonitorHook, self.alibaba_cloud_conn_id, self.region)

    async def agpu_reading(self, handle: JobHandle, since: datetime) -> GpuReading:
        """Each pod's GPU utilization since ``since`` from CloudMonitor (DescribeMetricList of
        ``GPU_UTILIZATION_METRIC`` in ``GPU_NAMESPACE``), with the GPU memory it held where that
        metric answers (best effort). Each pod is its node, in the node order of the logs; one
        pod's GPUs come as one series (``gpu`` ``all``). Nothing to read before the pods run."""
        try:
            view = await self._aview(handle)
            end = datetime.now(UTC)
            start = max(since, end - GPU_LOOKBACK)
            if not view.pods or start >= end:
                return GpuReading(source=self.name)
            dimensions = [{"jobId": handle.job_id, "pod": pod} for pod in view.pods]

            async def read(metric: str) -> list[dict[str, Any]]:
                return await self._monitor.adescribe_metric_list(
                    GPU_NAMESPACE, metric, dimensions, start, end, GPU_PERIOD_SECONDS
                )

            utilization = await read(GPU_UTILIZATION_METRIC)
            memory = await self._abest_effort(GPU_MEMORY, handle.job_id, lambda: read(GPU_MEMORY_METRIC))
        except (AlibabaCloudApiError, AlibabaCloudConnectionError) as exc:
            return GpuReading(source=self.name, unavailable=f"CloudMonitor ({GPU_NAMESPACE}): {exc}")
        return GpuReading(source=self.name, samples=gpu_samples(view.pods, utilization, memory or []))

    # -- failure evidence ------------------------------------------------------------------------

    def failure_details(self, handle: JobHandle) -> list[str]:
        """What DLC recorded of the failure: its restart records (GetJob), the job's events, the
        events of the pods that ended badly (GetPodEvents, the first to end first), then the
        failed sanity checks."""
        job = self.hook.get_job(handle.job_id)
        pods = {pod: self.hook.get_pod_events(handle.job_id, pod) for pod in pods_to_explain(job)}
        events = self.hook.get_job_events(handle.job_id)
        return describe_failure(job, events, pods, self.hook.get_sanity_checks(handle.job_id))

    async def afailure_details(self, handle: JobHandle) -> list[str]:
        job = await self.hook.aget_job(handle.job_id)
        pods = {pod: await self.hook.aget_pod_events(handle.job_id, pod) for pod in pods_to_explain(job)}
        events = await self.hook.aget_job_events(handle.job_id)
        return describe_failure(job, events, pods, await self.hook.aget_sanity_checks(handle.job_id))

    def classify(self, status: JobStatus, details: list[str], tail: list[str]) -> Failure:
        """DLC's verdict, its sanity checks and events, then the script's last lines, in the order
        ``DLC_FAILURE_RULES`` gives."""
        return classify_dlc(status, details, tail)

    # -- what is still running -------------------------------------------------------------------

    def launched(self, installation: str) -> list[LaunchedJob]:
        """Every job of the workspace that has not ended and whose tags name a whole ``JobOwner`` of
        ``installation``.

        ListJobs filters on one Status (the SDK lists its values, one at a time), so each status
        of ``UNENDED_STATUSES`` is listed in turn, every page, from ``FIND_HORIZON`` ago (without
        StartTime ListJobs looks back 7 days only), and on the installation's tag (``Tags``, "The
        tags used for filtering"), so other deployments' jobs are not even listed. A job that moves
        on during the listing shows up again under its later status, and that sighting wins; one
        that moves back between two listings (Restarting to Running) can be missed until the next
        call. Each job's tags are checked again here: one without a whole owner, or another
        installation's, is left out whatever the listing returned.
        """
        start_time = dlc_time((datetime.now(UTC) - FIND_HORIZON).timestamp())
        selector = {INSTALLATION_TAG: installation}
        jobs: dict[str, LaunchedJob] = {}
        for raw in UNENDED_STATUSES:
            listed = self.hook.jobs(
                workspace_id=self.workspace_id, start_time=start_time, status=raw, tags=selector
            )
            for job in listed:
                found = self._launched_job(job, installation)
                if found is not None:
                    jobs[found.handle.job_id] = found
        return list(jobs.values())

    def _launched_job(self, job: Any, installation: str) -> LaunchedJob | None:
        tags = (job.settings.tags if job.settings else None) or {}
        owner = JobOwner.from_tags(tags)
        state = DLC_STATES.get(job.status)
        if owner is None or owner.installation != installation or state is None or state.is_terminal:
            return None
        name = tags.get(NAME_TAG) or job.display_name
        return LaunchedJob(
            handle=JobHandle(backend=self.name, job_id=job.job_id, name=name),
            owner=owner,
            state=state,
            created=iso(job.gmt_create_time),
        )

    # -- stop and links --------------------------------------------------------------------------

    def stop(self, handle: JobHandle) -> None:
        self.hook.stop_job(handle.job_id)

    async def astop(self, handle: JobHandle) -> None:
        await self.hook.astop_job(handle.job_id)

    def output_uri(self, handle: JobHandle) -> str | None:
        return (self.hook.get_job(handle.job_id).envs or {}).get("OUTPUT_DIR")

    def console_url(self, handle: JobHandle) -> str | None:
        return self.hook.console_url(handle.job_id, self.workspace_id)


def gpu_samples(
    pods: Sequence[str], utilization: list[dict[str, Any]], memory: list[dict[str, Any]]
) -> list[GpuSample]:
    """CloudMonitor's datapoints as samples: node ``node-<i>`` for the i-th pod, the ``Average`` of
    each period (``timestamp`` in milliseconds), and the memory datapoint of the same pod and time."""
    nodes = {pod: f"node-{index}" for index, pod in enumerate(pods)}
    held = {(point.get("pod"), point.get("timestamp")): point.get("Average") for point in memory}
    return [
        GpuSample(
            at=datetime.fromtimestamp(point["timestamp"] / 1000, UTC),
            node=nodes[point["pod"]],
            gpu="all",
            utilization=point["Average"],
            memory_used_mib=held.get((point["pod"], point["timestamp"])),
        )
        for point in utilization
        if point.get("pod") in nodes and point.get("Average") is not None
    ]
