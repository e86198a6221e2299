"""Run a ``TrainingJobSpec`` as a PAI-DLC job (Lingjun or ECS resources) through the real SDK.

The spec's command is the torchrun line the local backend runs: DLC injects MASTER_ADDR,
MASTER_PORT, WORLD_SIZE (nodes) and RANK (node index), and on Lingjun the NCCL_IB_* variables.
The deterministic job name is the DisplayName (and a tag), so ``find`` reattaches through ListJobs;
CreateJob has no idempotency token, so a CreateJob retried after a lost response first looks the
job up by name instead of creating a second one. Every call goes through ``hooks.dlc.DlcHook``
(DescribeVpcs through ``VpcHook``); :func:`create_job_request` builds the CreateJob body with no
call and no connection, so a dry run can show it.
"""

from __future__ import annotations

import logging
import math
import shlex
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aliyun_training.backends.base import JobHandle, JobState, JobStatus, LogChunk
from aliyun_training.hooks.alibaba_cloud import shared_hook
from aliyun_training.hooks.dlc import DlcHook
from aliyun_training.oss_location import oss_endpoint, parse_oss_uri
from aliyun_training.spec import Framework, TrainingJobSpec
from aliyun_training.validation import SpecError

log = logging.getLogger(__name__)

#: Every job status DLC documents, mapped onto the backend-independent states. ``*Reserving`` jobs
#: have finished; DLC only keeps their nodes for debugging, so the task need not wait for that.
DLC_STATES: dict[str, JobState] = {
    "Creating": JobState.PENDING,
    "Queuing": JobState.PENDING,
    "Bidding": JobState.PENDING,
    "EnvPreparing": JobState.PENDING,
    "SanityChecking": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RUNNING,
    "Stopping": JobState.RUNNING,
    "SucceededReserving": JobState.SUCCEEDED,
    "Succeeded": JobState.SUCCEEDED,
    "FailedReserving": JobState.FAILED,
    "Failed": JobState.FAILED,
    "Stopped": JobState.STOPPED,
}
#: Elastic PyTorch training is a PyTorchJob with an ElasticSpec; ``elastic_batch`` is DLC's own
#: ElasticBatchJob type (CreateJobRequest.JobType lists both).
JOB_TYPES = {
    Framework.PYTORCH: "PyTorchJob",
    Framework.TENSORFLOW: "TFJob",
    Framework.MPI: "MPIJob",
    Framework.ELASTIC: "PyTorchJob",
    Framework.ELASTIC_BATCH: "ElasticBatchJob",
}
NAME_TAG = "airflow-job-name"
#: How DLC statuses add up to the phases a run report shows.
PHASES = {
    "Creating": "queuing",
    "Queuing": "queuing",
    "Bidding": "queuing",
    "EnvPreparing": "preparing",
    "SanityChecking": "preparing",
    "Running": "running",
    "Restarting": "running",
}
#: How many recent platform events a failure message shows.
FAILURE_EVENTS = 20
#: Statuses in which the job's pods exist and have written logs.
LOGGING_STATUSES = frozenset(
    {
        "Running",
        "Restarting",
        "Stopping",
        "SucceededReserving",
        "FailedReserving",
        "Succeeded",
        "Failed",
        "Stopped",
    }
)
#: Each log poll re-reads this many seconds before the previous one (clock skew between us and DLC);
#: the re-read lines are recognised against the last lines seen and dropped.
LOG_OVERLAP_SECONDS = 2.0
#: Lines kept in the cursor to recognise re-read lines.
LOG_MEMORY_LINES = 100
#: How long the pods and times a GetJob answered serve the log reads after it: a monitor reads the
#: logs right after the status; a later read, or one on a backend that never read it, asks GetJob.
LOG_VIEW_MAX_AGE_SECONDS = 5.0
#: GetPodLogs answers at most MaxLines lines, "Default value: 2000" (GetPodLogsRequest docstring).
POD_LOGS_MAX_LINES = 2000
#: A tail read's first window before the job's end, how much each step widens or narrows it, and
#: how many GetPodLogs requests one tail may take (a bounded search, see :class:`TailSearch`).
TAIL_FIRST_WINDOW_SECONDS = 60.0
TAIL_WINDOW_FACTOR = 8.0
TAIL_MAX_REQUESTS = 8
#: How far back ``find`` searches when the caller knows no earlier bound. ListJobs filters on the
#: creation time and, without StartTime, only looks 7 days back; a job runs at most
#: ``timeout_minutes`` (capped at 30 days by the spec) after it was created and queued, so a day
#: more covers the whole life of any job a retry could still be waiting for.
FIND_HORIZON = timedelta(days=31)
#: The time format DLC's StartTime/EndTime parameters use (the references' example 2020-11-08T16:00:00Z).
DLC_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


#: What an MPI launcher gets: it only runs mpirun, so a node's worth of CPU and memory on top of
#: the workers' would make the job need one node more than the quota was checked for.
LAUNCHER_CPU = "2"
LAUNCHER_MEMORY = "4Gi"


def roles(spec: TrainingJobSpec) -> list[tuple[str, int, bool]]:
    """(JobSpecs Type, PodCount, gets GPUs) per role: how ``nodes`` become DLC replicas."""
    if spec.framework in (Framework.PYTORCH, Framework.ELASTIC):
        workers = [("Worker", spec.nodes - 1, True)] if spec.nodes > 1 else []
        return [("Master", 1, True), *workers]
    if spec.framework is Framework.MPI:
        return [("Launcher", 1, False), ("Worker", spec.nodes, True)]
    return [("Worker", spec.nodes, True)]


def create_job_request(
    spec: TrainingJobSpec,
    name: str,
    *,
    workspace_id: str | None,
    region: str,
    vpc: dict[str, Any] | None,
    extended_cidrs: list[str],
    image_config: Any | None,
) -> Any:
    """The CreateJob request that runs ``spec`` under the job name ``name``, in the SDK's own models.

    Pure: no call, no connection, no secret beyond what ``image_config`` carries. ``region`` is the
    job's (the endpoint of bare OSS mounts); ``vpc`` is the environment's ``{vpc_id, switch_id,
    security_group_id}`` and ``extended_cidrs`` every CIDR block of that VPC, which DLC requires
    once a vSwitch is named; ``image_config`` is an ``ImageConfig`` with the private registry's
    login, or None. :meth:`DlcBackend.create_request` reads the last two from DescribeVpcs and the
    registry connection; a dry run passes what it knows.
    """
    from alibabacloud_pai_dlc20201203 import models

    job_specs = []
    for role, pods, gpus in roles(spec):
        resources = (
            models.ResourceConfig(
                cpu=str(spec.cpu) if gpus else LAUNCHER_CPU,
                gpu=str(spec.gpus_per_node if gpus else 0),
                gputype=spec.gpu_type if gpus and spec.gpus_per_node else None,
                memory=f"{spec.memory_gib}Gi" if gpus else LAUNCHER_MEMORY,
                shared_memory=f"{spec.shared_memory_gib}Gi" if spec.shared_memory_gib and gpus else None,
            )
            if spec.quota_id
            else None
        )
        job_specs.append(
            models.JobSpec(
                type=role,
                image=spec.image,
                pod_count=pods,
                resource_config=resources,
                ecs_spec=None if spec.quota_id else spec.ecs_spec,
                image_config=image_config,
            )
        )
    envs = {**spec.env, **({"OUTPUT_DIR": spec.output_dir} if spec.output_dir else {})}
    return models.CreateJobRequest(
        display_name=name,
        job_type=JOB_TYPES[spec.framework],
        job_specs=job_specs,
        elastic_spec=_elastic_spec(spec),
        user_command=_user_command(spec),
        resource_id=spec.quota_id,
        workspace_id=workspace_id,
        envs=envs or None,
        data_sources=[
            models.CreateJobRequestDataSources(
                data_source_id=mount.dataset_id,
                data_source_version=mount.dataset_version,
                uri=None if mount.dataset_id else dlc_mount_uri(mount.uri, region),
                mount_path=mount.mount_path,
                mount_access="RO" if mount.read_only else "RW",
            )
            for mount in spec.datasets
        ]
        or None,
        user_vpc=_user_vpc(vpc, extended_cidrs),
        settings=models.JobSettings(enable_rdma=spec.rdma or None, tags={NAME_TAG: name}),
        job_max_running_time_minutes=spec.timeout_minutes,
        priority=spec.priority,
    )


def _user_vpc(vpc: dict[str, Any] | None, extended_cidrs: list[str]) -> Any:
    """UserVpc with every CIDR block of the VPC: DLC requires them once a vSwitch is named.

    The SDK's CreateJobRequestUserVpc says of ExtendedCIDRs: "If the vSwitch ID is specified,
    this parameter is required. Specify all CIDR blocks in the VPC."
    """
    if not vpc:
        return None
    from alibabacloud_pai_dlc20201203 import models

    return models.CreateJobRequestUserVpc(
        vpc_id=vpc["vpc_id"],
        switch_id=vpc["switch_id"],
        security_group_id=vpc["security_group_id"],
        extended_cidrs=list(extended_cidrs) or None,
    )


@dataclass(frozen=True)
class LogView:
    """What reading a job's logs takes from one GetJob answer."""

    #: The job's pods in node order (master first); none before the job has run.
    pods: tuple[str, ...]
    #: GmtRunningTime as DLC writes it: where the first log poll starts.
    since: str | None
    #: When the job can first have logged, and when it finished (None while it runs), epoch seconds.
    first: float
    finished: float | None
    #: When this backend read it (monotonic seconds).
    read_at: float

    @classmethod
    def of(cls, job: Any) -> LogView:
        terminal = DLC_STATES.get(job.status, JobState.RUNNING).is_terminal
        return cls(
            pods=tuple(pod.pod_id for pod in _node_order(job)) if job.status in LOGGING_STATUSES else (),
            since=job.gmt_running_time,
            first=_epoch(job.gmt_running_time or job.gmt_create_time),
            finished=_epoch(job.gmt_finish_time) if terminal and job.gmt_finish_time else None,
            read_at=time.monotonic(),
        )

    def pod(self, node: int) -> str | None:
        return self.pods[node] if node < len(self.pods) else None


class DlcBackend:
    """Jobs on PAI-DLC. Sync calls serve the worker; ``a*`` calls use the SDK's ``*_async`` methods.

    Every call stands alone: ``logs`` and ``tail`` read the job's pods and times themselves on a
    backend that never read the status. What a ``status`` just read is reused for
    ``LOG_VIEW_MAX_AGE_SECONDS``, so a monitor's poll (status, then logs) asks GetJob once.
    """

    name = "dlc"

    def __init__(
        self,
        conn_id: str = "alibaba_cloud_default",
        workspace_id: str | None = None,
        vpc: dict[str, Any] | None = None,
        image_registry_conn_id: str | None = None,
        region: str | None = None,
        log_lines_per_poll: int = 500,
    ) -> None:
        self.conn_id = conn_id
        self.workspace_id = workspace_id
        self.vpc = vpc
        self.image_registry_conn_id = image_registry_conn_id
        self.region = region
        self.log_lines_per_poll = log_lines_per_poll
        self.hook = shared_hook(DlcHook, conn_id, region)
        #: Per job: the last GetJob's LogView (an optimisation: see LOG_VIEW_MAX_AGE_SECONDS).
        self._views: dict[str, LogView] = {}
        #: The VPC's CIDR blocks as DescribeVpcs reported them, read once per backend.
        self._vpc_cidrs: list[str] | None = None

    @property
    def config(self) -> dict[str, Any]:
        return {
            "conn_id": self.conn_id,
            "workspace_id": self.workspace_id,
            "vpc": self.vpc,
            "image_registry_conn_id": self.image_registry_conn_id,
            "region": self.region,
            "log_lines_per_poll": self.log_lines_per_poll,
        }

    # -- request ---------------------------------------------------------------------------------

    def create_request(self, spec: TrainingJobSpec, name: str) -> Any:
        """The CreateJob request ``submit`` sends: :func:`create_job_request` with the VPC's CIDR
        blocks and the private registry's login read from their sources."""
        return create_job_request(
            spec,
            name,
            workspace_id=self.workspace_id,
            region=self.hook.region,
            vpc=self.vpc,
            extended_cidrs=self._extended_cidrs(),
            image_config=self._image_config(),
        )

    def _extended_cidrs(self) -> list[str]:
        """The environment's ``vpc.extended_cidrs``, else the VPC's blocks from DescribeVpcs."""
        if not self.vpc:
            return []
        return list(self.vpc.get("extended_cidrs") or []) or self._described_cidrs()

    def _described_cidrs(self) -> list[str]:
        assert self.vpc is not None
        if self._vpc_cidrs is None:
            from aliyun_training.hooks.vpc import VpcHook

            self._vpc_cidrs = shared_hook(VpcHook, self.conn_id, self.region).cidr_blocks(self.vpc["vpc_id"])
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

        from aliyun_training.hooks.registry import ContainerRegistryHook

        login = ContainerRegistryHook(self.image_registry_conn_id).login()
        if login is None or not (login.host and login.login and login.password):
            raise SpecError(
                f"image_registry_conn_id: connection {self.image_registry_conn_id} needs host "
                "(the registry), login and password"
            )
        return models.ImageConfig(docker_registry=login.host, username=login.login, password=login.password)

    # -- submit and find -------------------------------------------------------------------------

    def submit(self, spec: TrainingJobSpec, name: str) -> JobHandle:
        """CreateJob once: a retry after a lost response first looks for the job it may have made."""
        request = self.create_request(spec, name)

        def existing() -> str | None:
            made = self._find_active(name)
            if made is None:
                return None
            log.warning("CreateJob's earlier response was lost; job %s exists, not creating again", made)
            return made.job_id

        return JobHandle(backend=self.name, job_id=self.hook.create_job(request, existing), name=name)

    def find(self, name: str, since: datetime | None = None) -> JobHandle | None:
        """The newest job whose DisplayName is exactly ``name``, created at or after ``since``.

        ListJobs searches only the last 7 days without StartTime and matches DisplayName fuzzily
        (``name`` also finds ``name-2``), so this asks from ``since`` (else ``FIND_HORIZON`` ago),
        newest first, and pages until the first exact match or the end of the listing.
        """
        start_time = _dlc_time((since or datetime.now(UTC) - FIND_HORIZON).timestamp())
        jobs = self.hook.jobs(display_name=name, workspace_id=self.workspace_id, start_time=start_time)
        newest = next((job for job in jobs if job.display_name == name), None)
        return JobHandle(backend=self.name, job_id=newest.job_id, name=name) if newest else None

    def _find_active(self, name: str) -> JobHandle | None:
        found = self.find(name)
        if found is None or self.status(found).state.is_terminal:
            return None
        return found

    # -- status ----------------------------------------------------------------------------------

    def status(self, handle: JobHandle) -> JobStatus:
        return self._interpret(handle, self.hook.get_job(handle.job_id))

    async def astatus(self, handle: JobHandle) -> JobStatus:
        return self._interpret(handle, await self.hook.aget_job(handle.job_id))

    def _interpret(self, handle: JobHandle, job: Any) -> JobStatus:
        state = DLC_STATES.get(job.status)
        if state is None:
            log.warning(
                "Job %s reports status %r, unknown to this backend: treating it as running",
                handle.job_id,
                job.status,
            )
            state = JobState.RUNNING
        self._views[handle.job_id] = LogView.of(job)
        failed = next((rank for rank, pod in enumerate(_node_order(job)) if pod.status == "Failed"), None)
        reason = ": ".join(part for part in (job.reason_code, job.reason_message) if part)
        return JobStatus(
            state=state,
            raw=job.status,
            reason=reason if state in (JobState.FAILED, JobState.STOPPED) else "",
            started=_iso(job.gmt_running_time or job.gmt_create_time),
            finished=_iso(job.gmt_finish_time) if state.is_terminal else None,
            failed_node=failed,
            history=[_phase(item) for item in job.status_history or []],
        )

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
        """New lines of the master pod since ``cursor``: none twice, at most ``log_lines_per_poll``.

        DLC returns log lines without times, filtered by StartTime. Each poll asks from a little
        before the previous poll (``LOG_OVERLAP_SECONDS``) and drops the lines it has already seen;
        the first asks from the job's start.
        """
        view = self._view(handle)
        if not view.pods:
            return LogChunk(cursor=cursor or {})
        asked_at = time.time()
        fetched = self.hook.get_pod_logs(
            handle.job_id, view.pods[0], max_lines=self.log_lines_per_poll, start_time=_since(view, cursor)
        )
        return self._log_chunk(handle, cursor, fetched, asked_at)

    async def alogs(self, handle: JobHandle, cursor: dict[str, Any] | None = None) -> LogChunk:
        view = await self._aview(handle)
        if not view.pods:
            return LogChunk(cursor=cursor or {})
        asked_at = time.time()
        fetched = await self.hook.aget_pod_logs(
            handle.job_id, view.pods[0], max_lines=self.log_lines_per_poll, start_time=_since(view, cursor)
        )
        return self._log_chunk(handle, cursor, fetched, asked_at)

    def _log_chunk(
        self, handle: JobHandle, cursor: dict[str, Any] | None, fetched: list[str], asked_at: float
    ) -> LogChunk:
        seen = list((cursor or {}).get("recent", []))
        new = _unseen(seen, fetched)
        if len(fetched) >= self.log_lines_per_poll:
            log.warning(
                "Job %s wrote more than %d log lines since the last poll; some may be missing here "
                "(the console has the full log)",
                handle.job_id,
                self.log_lines_per_poll,
            )
        since = _dlc_time(asked_at - LOG_OVERLAP_SECONDS)
        return LogChunk(lines=new, cursor={"since": since, "recent": (seen + new)[-LOG_MEMORY_LINES:]})

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

    # -- failure evidence ------------------------------------------------------------------------

    def failure_details(self, handle: JobHandle) -> list[str]:
        return _describe_failure(
            self.hook.get_job_events(handle.job_id), self.hook.get_sanity_checks(handle.job_id)
        )

    async def afailure_details(self, handle: JobHandle) -> list[str]:
        events = await self.hook.aget_job_events(handle.job_id)
        return _describe_failure(events, await self.hook.aget_sanity_checks(handle.job_id))

    # -- stop and links --------------------------------------------------------------------------

    def stop(self, handle: JobHandle) -> None:
        self.hook.stop_job(handle.job_id)

    async def astop(self, handle: JobHandle) -> None:
        await self.hook.astop_job(handle.job_id)

    def output_uri(self, handle: JobHandle) -> str | None:
        return (self.hook.get_job(handle.job_id).envs or {}).get("OUTPUT_DIR")

    def console_url(self, handle: JobHandle) -> str | None:
        return self.hook.console_url(handle.job_id, self.workspace_id)


def _node_order(job: Any) -> list[Any]:
    """The job's pods by node: the master (rank 0), then the workers, then any other role."""
    return sorted(job.pods or [], key=lambda pod: (pod.type != "Master", pod.type == "Worker", pod.pod_id))


def _since(view: LogView, cursor: dict[str, Any] | None) -> str | None:
    """Where a log poll starts: after the previous poll, or (the first poll) at the job's start."""
    return (cursor or {}).get("since") or view.since


def _user_command(spec: TrainingJobSpec) -> str:
    """The spec's command, run from its working directory: the path is quoted for the shell."""
    if not spec.working_dir:
        return spec.command
    return f"cd {shlex.quote(spec.working_dir)} && {spec.command}"


def _elastic_spec(spec: TrainingJobSpec) -> Any:
    """ElasticSpec of elastic PyTorch training: between ``min_nodes`` and ``max_nodes`` replicas."""
    if spec.framework is not Framework.ELASTIC:
        return None
    from alibabacloud_pai_dlc20201203 import models

    return models.JobElasticSpec(
        enable_elastic_training=True,
        min_parallelism=spec.elastic_min_nodes,
        max_parallelism=spec.elastic_max_nodes,
    )


def dlc_mount_uri(uri: str | None, region: str) -> str | None:
    """A mount's URI as DLC's DataSources take it: OSS with the bucket's internal endpoint.

    Every DataSources example in the CreateJob reference names the endpoint
    (``oss://bucket.oss-cn-hangzhou-internal.aliyuncs.com/path/``), while the environment writes a
    bare ``oss://bucket/path/``. A bare bucket gets the internal endpoint of ``region`` (the job's;
    a bucket elsewhere must be written with its endpoint). A host with a dot already is an endpoint:
    OSS bucket names are lower-case letters, digits and hyphens only. Other schemes pass unchanged.
    """
    if not uri or not uri.startswith("oss://"):
        return uri
    location = parse_oss_uri(uri, field="datasets.uri")
    if location.endpoint:
        return uri
    return f"oss://{location.bucket}.{oss_endpoint(region, internal=True)}/{location.prefix}"


@dataclass
class TailSearch:
    """The GetPodLogs windows that find the last ``lines`` lines of a pod, shared by sync and async.

    GetPodLogs reads from StartTime ("Default value: 7 days ago") and answers at most MaxLines
    lines ("Default value: 2000"; GetPodLogsRequest docstring), so asking without StartTime gives
    a log's beginning, and a full answer need not reach its end. The tail is read with a StartTime
    shortly before the job's ``end``: a full answer narrows the window; one with fewer than
    ``lines`` lines widens it, unless it already starts at ``first`` (the job's start). Between a
    window known too wide and one known too narrow the next is their geometric mean; at most
    ``TAIL_MAX_REQUESTS`` requests are made. This holds whichever lines a full answer keeps.
    EndTime stays at its default (now): nothing is logged after the end, and a StartTime in whole
    seconds only widens a window.
    """

    lines: int
    first: float
    end: float
    window: float = TAIL_FIRST_WINDOW_SECONDS
    requests: int = 0
    done: bool = False
    #: The narrowest window whose answer was full, and the widest that held too few lines.
    too_wide: float | None = None
    too_narrow: float | None = None
    #: The last answer that reached the end of the log; the last full one, if none did.
    reached_end: list[str] | None = None
    cut_short: list[str] | None = None

    def next_start(self) -> str | None:
        """The StartTime of the next GetPodLogs request (MaxLines ``POD_LOGS_MAX_LINES``), or None
        once the tail is known or the budget is spent."""
        if self.done or self.requests >= TAIL_MAX_REQUESTS:
            return None
        self.requests += 1
        return _dlc_time(max(self.end - self.window, self.first))

    def record(self, fetched: list[str]) -> None:
        """Take the answer to the last request and choose the next window."""
        if len(fetched) >= POD_LOGS_MAX_LINES:
            self.cut_short, self.too_wide = fetched, self.window
        elif len(fetched) >= self.lines or self.end - self.window <= self.first:
            self.reached_end, self.done = fetched, True
            return
        else:
            self.reached_end, self.too_narrow = fetched, self.window
        window = self._next_window()
        if window is None:
            self.done = True
        else:
            self.window = window

    def _next_window(self) -> float | None:
        wide, narrow = self.too_wide, self.too_narrow
        if wide is not None and narrow is not None:
            return math.sqrt(wide * narrow) if wide - narrow > 1 else None
        if wide is not None:
            return max(wide / TAIL_WINDOW_FACTOR, 1.0) if wide > 1 else None
        return (narrow or self.window) * TAIL_WINDOW_FACTOR

    def result(self, job_id: str) -> list[str]:
        """The last ``lines`` lines found; from a full answer only when no window reached the end."""
        if self.reached_end is not None:
            return self.reached_end[-self.lines :]
        if self.cut_short is None:
            return []
        log.warning(
            "Job %s logged more than %d lines within its last second; the log tail shown may end early",
            job_id,
            POD_LOGS_MAX_LINES,
        )
        return self.cut_short[-self.lines :]


def _unseen(seen: list[str], fetched: list[str]) -> list[str]:
    """``fetched`` without its leading lines that repeat the end of ``seen`` (the overlap re-read)."""
    for overlap in range(min(len(seen), len(fetched)), 0, -1):
        if seen[-overlap:] == fetched[:overlap]:
            return fetched[overlap:]
    return fetched


def _dlc_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(DLC_TIME_FORMAT)


def _epoch(value: str | None) -> float:
    """A DLC time as epoch seconds (0 when unknown: the search then treats the start as open)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else 0.0


def _iso(value: str | None) -> str | None:
    """DLC times (``2026-11-30T12:00:00Z``) as ISO 8601 with an explicit offset."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).isoformat() if value else None


def _phase(item: Any) -> dict[str, Any]:
    start, end = _iso(item.start_time), _iso(item.end_time)
    seconds = (
        (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
        if start and end
        else None
    )
    phase = PHASES.get(item.status, item.status.lower())
    return {"status": item.status, "phase": phase, "start": start, "end": end, "seconds": seconds}


def _describe_failure(events: Any, checks: Any) -> list[str]:
    """Job events, then failed sanity checks, as lines for the task error."""
    lines = [f"event: {event}" for event in (events.events or [])[-FAILURE_EVENTS:]]
    for round_ in checks.sanity_check_results or []:
        for check in round_:
            if check.status not in ("Succeeded", "Passed"):
                lines.append(
                    f"sanity check #{check.check_number} {check.phase}: {check.status} {check.message}"
                )
    return lines
