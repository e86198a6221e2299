"""Run a ``TrainingJobSpec`` as a PAI-DLC job (Lingjun or ECS resources) through the real SDK.

The spec's command is the torchrun line the local backend runs: DLC injects MASTER_ADDR,
MASTER_PORT, WORLD_SIZE (nodes) and RANK (node index), and on Lingjun the NCCL_IB_* variables.
The deterministic job name is the DisplayName (and a tag), so ``find`` reattaches through ListJobs;
the task instance that launched the job is tagged too, so ``launched`` tells whose each job is;
CreateJob has no idempotency token, so a CreateJob retried after a lost response first looks the
job up by name instead of creating a second one. Every call goes through ``hooks.dlc.DlcHook``
(DescribeVpcs through ``VpcHook``); :func:`create_job_request` builds the CreateJob body with no
call and no connection, so a dry run can show it.
"""

from __future__ import annotations

import logging
import math
import re
import shlex
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aliyun_training.backends.base import (
    FoundJob,
    JobHandle,
    JobState,
    JobStatus,
    LaunchedJob,
    LogChunk,
    node_line,
    same_owner,
)
from aliyun_training.failures import (
    BLOCKING_REASONS,
    COMMAND_NOT_RUN,
    TEXT_RULES,
    Failure,
    FailureClass,
    Rules,
    class_from_text,
)
from aliyun_training.failures.torchrun import read_node_output
from aliyun_training.hooks.alibaba_cloud import shared_hook
from aliyun_training.hooks.dlc import DlcHook
from aliyun_training.hooks.paistudio import PaiStudioHook
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.oss_location import oss_endpoint, parse_oss_uri
from aliyun_training.spec import Framework, JobOwner, TrainingJobSpec
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
    "Stopping": JobState.STOPPING,
    "SucceededReserving": JobState.SUCCEEDED,
    "Succeeded": JobState.SUCCEEDED,
    "FailedReserving": JobState.FAILED,
    "Failed": JobState.FAILED,
    "Stopped": JobState.STOPPED,
}
#: The statuses of a job that has not ended, in the order a job passes them (``launched`` lists
#: them in this order).
UNENDED_STATUSES = tuple(status for status, state in DLC_STATES.items() if not state.is_terminal)
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
#: The owner tag naming the installation: what ``launched`` asks ListJobs to filter on.
INSTALLATION_TAG = JobOwner.tag_key("installation")
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
#: How many recent platform events a failure message shows, of the job and of each pod.
FAILURE_EVENTS = 20
#: Of the pods that ended badly, how many (the first to end first) have their GetPodEvents read.
FAILURE_EVENT_PODS = 4
#: Pod statuses (GetJob's Pods[].Status) of a pod that has not ended badly. Any other did: Failed,
#: or whatever else the platform reports for an ended pod (a preempted one, Unknown for a lost node).
POD_STATUSES_FINE = frozenset({"Pending", "Running", "Succeeded"})
#: A kubelet event about an image pull (Pulling, Pulled, "Failed to pull image", "Back-off pulling
#: image"): the last of them says whether the pod's image is being pulled or cannot be.
IMAGE_PULL_EVENT = re.compile(r"pull", re.I)
#: The best-effort reads a poll makes beside GetJob; after one failure a backend stops asking.
QUEUE_INFO, POD_EVENTS = "PAI Studio QueueInfo", "GetPodEvents"
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

#: How ``classify`` reads a failed job; the first step that applies decides:
#:
#: 1. DLC's verdict (ReasonCode, ReasonMessage, the job's and its pods' SubStatus) against these
#:    rules; the evidence is that verdict ("ReasonCode=...");
#: 2. a failed sanity check: infrastructure (DLC checks the machines, not the script);
#: 3. AIMaster's restart records (``restart: ...``, the newest first) against these rules and the
#:    text rules: the platform's own diagnosis of a fault it restarted the job for;
#: 4. the job's and its failed pods' events (``event: ...``, ``pod event <pod>: ...``) against these
#:    rules in the order DLC produced them (:func:`in_platform_order`: a capacity line gives way to a
#:    later failure), capacity only while the job never ran: the events of a job that ran still
#:    hold the words of its queuing;
#: 5. ``failures.class_from_text`` over DLC's words, then the failing node's output read from where
#:    its failure began (``failures.torchrun.read_node_output``: NCCL and GPU faults, CUDA out of
#:    memory, a missing file, a torchrun stopped from outside);
#: 6. the script's own failure: a Python traceback, or an exit code of 1 to 125, is user code; 126
#:    and 127 (the shell's "not executable" and "not found") are config;
#: 7. otherwise infrastructure. DLC named no cause and the script did not say it failed (no
#:    traceback, no exit code of its own), so what ended it was under it: a signal from outside,
#:    a node that went away, a runtime that never started it. Calling that user code would blame
#:    a script that may never have run.
#:
#: The rules are (class, pattern), case-insensitive, the first rule any line matches winning; each
#: names a failure, never a step every job takes (events also tell of queuing, mounting and
#: checking that went well). DLC publishes no list of ReasonCodes, so they are keywords, and the
#: exact codes and messages are unverified. Sources: the SDK's docstrings (GetJob SubStatus "such
#: as the preemption retry status", a pod's SubStatus "Normal" or "Evicted") and the failure
#: patterns of Alibaba Cloud's own PAI-DLC diagnostics skill (repository
#: aliyun/alibabacloud-aiops-skills, skill alibabacloud-pai-dlc-job-diagnostics,
#: references/diagnostic-patterns.md): ResourceAllocateFailed, "resource type is not enough",
#: OutOfGPU, NotEnoughGPU, ErrImagePull, ImagePullBackOff, "image not found", "manifest unknown",
#: "unauthorized", Evicted, "preempted", spot reclamation, GPUUnhealthy, AIMasterBlackList,
#: DriverVersionMismatch, hang detection. The other words are Kubernetes' (NodeNotReady,
#: FailedMount, "Insufficient nvidia.com/gpu") and Alibaba Cloud's general error codes (Forbidden,
#: NoPermission, InvalidParameter). Preemption comes first, as the pods of a reclaimed node then
#: fail in other ways too; config before capacity, as no permission to use a quota is no shortage
#: of it.
DLC_FAILURE_RULES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        FailureClass.PREEMPTION,
        re.compile(r"preempted|preemption|reclaim|evict|NodeNotReady|node\s*lost|lost\s+node", re.I),
    ),
    (
        FailureClass.CONFIG,
        re.compile(
            r"ErrImagePull|ImagePullBackOff|fail\w*\s+to\s+pull|image\s+not\s+found|manifest\s+unknown"
            r"|unauthorized|forbidden|NoPermission|permission\s+denied|access\s*denied"
            r"|InvalidParameter|invalid\s+(?:command|argument|parameter|spec)",
            re.I,
        ),
    ),
    (
        FailureClass.CAPACITY,
        re.compile(
            r"ResourceAllocateFailed|resource\s+type\s+is\s+not\s+enough|insufficient|OutOfGPU|NotEnoughGPU"
            r"|exceed\w*\s+(?:the\s+)?quota|quota\w*\s+exceed|queu\w*\s+(?:timeout|timed\s+out|too\s+long)",
            re.I,
        ),
    ),
    (
        FailureClass.DATA,
        re.compile(
            r"FailedMount|MountFailed|mount\w*\s+(?:fail|error)|(?:fail\w*|unable)\s+to\s+mount"
            r"|(?:dataset|data\s*source)\b.*\b(?:not\s+found|missing|unavailable|fail)|NoSuchBucket|NoSuchKey",
            re.I,
        ),
    ),
    (
        FailureClass.INFRASTRUCTURE,
        re.compile(
            r"GPUUnhealthy|AIMasterBlackList|DriverVersionMismatch|hardware\s+(?:fault|failure|error)"
            r"|sanity\s*check\w*\s*fail|\bhang\b.*\bdetect|detect\w*\s+(?:a\s+)?hang|\bhung\b",
            re.I,
        ),
    ),
)
#: A Python traceback: the script itself raised.
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
#: An exit code as a pod's message, an event or torchrun's failure summary writes it ("exited with
#: code 1", "exit status 2", "exitcode  : 1"). 126 and 127 are the shell's "not executable" and
#: "not found"; 128 and above mean a signal ended the process (from outside: no verdict on the
#: script), as does torchrun's negative exitcode, which this does not match.
EXIT_CODE = re.compile(
    r"exit(?:ed)?\s+(?:with\s+)?(?:code|status)\s*[:=]?\s*(\d+)|exitcode\s*:\s*(\d+)", re.I
)


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
        settings=models.JobSettings(enable_rdma=spec.rdma or None, tags=job_tags(spec, name)),
        job_max_running_time_minutes=spec.timeout_minutes,
        priority=spec.priority,
    )


def job_tags(spec: TrainingJobSpec, name: str) -> dict[str, str]:
    """JobSettings.Tags ("The custom tags"): the job's name, and the task instance that launched it
    when the operator set ``spec.owner``, which ``launched`` reads back."""
    return {NAME_TAG: name, **(spec.owner.tags() if spec.owner else {})}


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
        #: Best-effort reads (``QUEUE_INFO``, ``POD_EVENTS``) that failed once: not asked again.
        self._unavailable: set[str] = set()

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
        start_time = _dlc_time((since or datetime.now(UTC) - FIND_HORIZON).timestamp())
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
        if _in_quota_queue(job) and QUEUE_INFO not in self._unavailable:
            try:
                queued = self._studio.queue_info(job.resource_id, job.job_id)
            except AlibabaCloudApiError as exc:
                self._best_effort_failed(QUEUE_INFO, job, exc)
        pod = _pending_pod(job)
        if pod is not None and POD_EVENTS not in self._unavailable:
            try:
                events = self.hook.get_pod_events(job.job_id, pod)
            except AlibabaCloudApiError as exc:
                self._best_effort_failed(POD_EVENTS, job, exc)
        return self._interpret(handle, job, queued, events)

    async def astatus(self, handle: JobHandle) -> JobStatus:
        job = await self.hook.aget_job(handle.job_id)
        queued = events = None
        if _in_quota_queue(job) and QUEUE_INFO not in self._unavailable:
            try:
                queued = await self._studio.aqueue_info(job.resource_id, job.job_id)
            except AlibabaCloudApiError as exc:
                self._best_effort_failed(QUEUE_INFO, job, exc)
        pod = _pending_pod(job)
        if pod is not None and POD_EVENTS not in self._unavailable:
            try:
                events = await self.hook.aget_pod_events(job.job_id, pod)
            except AlibabaCloudApiError as exc:
                self._best_effort_failed(POD_EVENTS, job, exc)
        return self._interpret(handle, job, queued, events)

    @property
    def _studio(self) -> PaiStudioHook:
        return shared_hook(PaiStudioHook, self.conn_id, self.region)

    def _best_effort_failed(self, read: str, job: Any, exc: AlibabaCloudApiError) -> None:
        """Where a job waits (its place in the quota's queue, its pods' events) is information, not
        its state: without it monitoring goes on, and this backend does not ask again (no
        permission, no route: the next poll would fail alike)."""
        self._unavailable.add(read)
        log.warning("Job %s: %s is unavailable (%s); monitoring goes on without it", job.job_id, read, exc)

    def _interpret(
        self, handle: JobHandle, job: Any, queued: Any = None, pod_events: list[str] | None = None
    ) -> JobStatus:
        state = DLC_STATES.get(job.status)
        if state is None:
            log.warning(
                "Job %s reports status %r, unknown to this backend: treating it as running",
                handle.job_id,
                job.status,
            )
            state = JobState.RUNNING
        self._views[handle.job_id] = LogView.of(job)
        failed = _first_failed_node(job)
        reason, reason_code = "", job.reason_code or ""
        if state in (JobState.FAILED, JobState.STOPPED):
            reason = _reason(job)
        elif job.status in QUEUE_STATUSES:
            reason = _why_waiting(job, queued)
        elif state is JobState.PENDING:
            pulling = _last_pull_event(pod_events or [])
            reason = "; ".join(part for part in (_reason(job), pulling) if part)
            reason_code = _blocking_reason([reason]) or reason_code
        return JobStatus(
            state=state,
            raw=job.status,
            reason=reason,
            reason_code=reason_code,
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
            start = _since(view, seen.get(pod))
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
            start = _since(view, seen.get(pod))
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
            new = _unseen(recent, fetched)
            if len(fetched) >= self.log_lines_per_poll:
                log.warning(
                    "Job %s: pod %s wrote more than %d log lines since the last poll; some may be missing "
                    "here (the console has the full log)",
                    handle.job_id,
                    pod,
                    self.log_lines_per_poll,
                )
            lines += [node_line(node, line) for line in new]
            since = _dlc_time(asked_at - LOG_OVERLAP_SECONDS)
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

    # -- failure evidence ------------------------------------------------------------------------

    def failure_details(self, handle: JobHandle) -> list[str]:
        """What DLC recorded of the failure: its restart records (GetJob), the job's events, the
        events of the pods that ended badly (GetPodEvents, the first to end first), then the
        failed sanity checks."""
        job = self.hook.get_job(handle.job_id)
        pods = {pod: self.hook.get_pod_events(handle.job_id, pod) for pod in _pods_to_explain(job)}
        events = self.hook.get_job_events(handle.job_id)
        return _describe_failure(job, events, pods, self.hook.get_sanity_checks(handle.job_id))

    async def afailure_details(self, handle: JobHandle) -> list[str]:
        job = await self.hook.aget_job(handle.job_id)
        pods = {pod: await self.hook.aget_pod_events(handle.job_id, pod) for pod in _pods_to_explain(job)}
        events = await self.hook.aget_job_events(handle.job_id)
        return _describe_failure(job, events, pods, await self.hook.aget_sanity_checks(handle.job_id))

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
        start_time = _dlc_time((datetime.now(UTC) - FIND_HORIZON).timestamp())
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
            created=_iso(job.gmt_create_time),
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


def _first_failed_node(job: Any) -> int | None:
    """The node whose pod ended badly first, by the platform's GmtFinishTime (node order on a tie; a
    pod with no finish time, such as one on a lost node, after those with one): the master's
    collateral error, ended later, must not hide the worker's own failure."""
    ended = [
        (pod.gmt_finish_time or "~", rank)
        for rank, pod in enumerate(_node_order(job))
        if pod.status not in POD_STATUSES_FINE
    ]
    return min(ended)[1] if ended else None


def _pods_to_explain(job: Any) -> list[str]:
    """The pods whose events explain the job's end: those that ended badly, the first to end first;
    of a job that never got that far, those still pending. At most ``FAILURE_EVENT_PODS``."""
    pods = [pod for pod in _node_order(job) if pod.status not in POD_STATUSES_FINE]
    pods.sort(key=lambda pod: pod.gmt_finish_time or "~")
    if not pods and DLC_STATES.get(job.status) is JobState.PENDING:
        pods = [pod for pod in _node_order(job) if pod.status == "Pending"]
    return [pod.pod_id for pod in pods[:FAILURE_EVENT_PODS]]


def _pending_pod(job: Any) -> str | None:
    """While DLC prepares a job's pods (EnvPreparing), the first still Pending: its events tell an
    image being pulled from one that cannot be. None in any other status."""
    if job.status != "EnvPreparing":
        return None
    return next((pod.pod_id for pod in _node_order(job) if pod.status == "Pending"), None)


def _last_pull_event(events: list[str]) -> str:
    """The newest of a pod's events about its image pull, as ``pod event: ...``; "" when none."""
    pulls = [event for event in events if IMAGE_PULL_EVENT.search(event)]
    return f"pod event: {pulls[-1]}" if pulls else ""


def _blocking_reason(texts: list[str]) -> str | None:
    """The first of ``BLOCKING_REASONS`` (the kubelet's words for a pod that waits for good) any of
    ``texts`` names, for ``JobMonitor.give_up``; None when none does."""
    for text in texts:
        for reason in BLOCKING_REASONS:
            if re.search(rf"\b{reason}\b", text):
                return reason
    return None


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


def _describe_failure(job: Any, events: Any, pod_events: dict[str, list[str]], checks: Any) -> list[str]:
    """Restart records, the job's events, the pods' events, then failed sanity checks, as lines
    for the task error and the classifier, each kind oldest first."""
    lines = [_restart_line(record, error) for record in job.restart_record or [] for error in _errors(record)]
    lines += [f"event: {event}" for event in (events.events or [])[-FAILURE_EVENTS:]]
    for pod, recorded in pod_events.items():
        lines += [f"pod event {pod}: {event}" for event in recorded[-FAILURE_EVENTS:]]
    for round_ in checks.sanity_check_results or []:
        for check in round_:
            if check.status not in ("Succeeded", "Passed"):
                lines.append(
                    f"sanity check #{check.check_number} {check.phase}: {check.status} {check.message}"
                )
    return lines


def _errors(record: Any) -> list[Any]:
    """A restart record's fault details; one empty entry when it has none, so the record shows."""
    return list(record.detail_error_info_list or []) or [None]


def _restart_line(record: Any, error: Any) -> str:
    """One fault a restart record names: ``restart: <when> <reason> [<status>]: <source> <code>:
    <message> (pod, node)``, as AIMaster recorded it (GetJob RestartRecord, DetailErrorInfoList)."""
    head = " ".join(
        part
        for part in (
            record.occur_time,
            record.reason,
            f"[{record.restart_status}]" if record.restart_status else "",
            record.restart_fail_reason,
        )
        if part
    )
    if error is None:
        return f"restart: {head}"
    fault = " ".join(
        part
        for part in (error.error_source, error.error_code, error.error_msg, error.detail_error_msg)
        if part
    )
    where = ", ".join(
        f"{name} {value}" for name, value in (("pod", error.pod), ("node", error.node)) if value
    )
    return f"restart: {head}: {fault}" + (f" ({where})" if where else "")


#: DLC statuses in which a job waits for its quota: Queuing, and Bidding for Lingjun spot resources.
QUEUE_STATUSES = frozenset({"Queuing", "Bidding"})


def _in_quota_queue(job: Any) -> bool:
    """Whether a job waits in a resource quota's queue, where PAI Studio knows its place."""
    return job.status in QUEUE_STATUSES and bool(job.resource_id)


def _why_waiting(job: Any, queued: Any) -> str:
    """Why a queued job waits, in the platform's words: DLC's ReasonCode and ReasonMessage, then PAI
    Studio's QueueInfo (Position, Reason, GmtEnqueuedTime) for its quota."""
    parts = [": ".join(part for part in (job.reason_code, job.reason_message) if part)]
    if queued is not None and queued.position is not None:
        since = f" since {queued.gmt_enqueued_time}" if queued.gmt_enqueued_time else ""
        parts.append(f"queue position {queued.position} in quota {job.resource_id}{since}")
    if queued is not None and queued.reason:
        parts.append(f"queue reason: {queued.reason}")
    return "; ".join(part for part in parts if part)


def _reason(job: Any) -> str:
    """ReasonCode and ReasonMessage, then the job's SubStatus, then each pod's Status when it is
    neither fine nor plain Failed (a preempted pod) and its SubStatus when it is not Normal."""
    parts = [": ".join(part for part in (job.reason_code, job.reason_message) if part)]
    if job.sub_status:
        parts.append(f"SubStatus={job.sub_status}")
    for pod in _node_order(job):
        said = []
        if pod.status and pod.status not in POD_STATUSES_FINE | {"Failed"}:
            said.append(f"Status={pod.status}")
        if pod.sub_status and pod.sub_status != "Normal":
            said.append(f"SubStatus={pod.sub_status}")
        if said:
            parts.append(f"pod {pod.pod_id} {' '.join(said)}")
    return "; ".join(part for part in parts if part)


def classify_dlc(status: JobStatus, details: list[str], tail: list[str]) -> Failure:
    """The class of a failed DLC job, by the steps ``DLC_FAILURE_RULES`` describes."""
    verdict = _verdict(status)
    said = [verdict] if verdict else []
    matched = class_from_text(said, DLC_FAILURE_RULES)
    if matched is not None:
        return Failure(failure_class=matched[0], evidence=said)
    checks = [line for line in details if line.startswith("sanity check #")]
    if checks:
        return Failure(failure_class=FailureClass.INFRASTRUCTURE, evidence=[*said, *checks])
    restarts = [line for line in details if line.startswith("restart: ")]
    events = [line for line in details if line.startswith(("event: ", "pod event "))]
    ran = any(phase.get("status") == "Running" for phase in status.history)
    rules = tuple(rule for rule in DLC_FAILURE_RULES if not (ran and rule[0] is FailureClass.CAPACITY))
    matched = (
        in_platform_order(list(reversed(restarts)), (*DLC_FAILURE_RULES, *TEXT_RULES))
        or in_platform_order(events, rules)
        or class_from_text([*said, *events])
    )
    if matched is None:
        # The failing pod's own output, read from the rank torchrun saw fail first: a torchrun the
        # platform stopped prints a traceback as it dies, which is not the script's failure.
        output = read_node_output(tail, status.failed_node)
        if output.failure_class is not None:
            return Failure(failure_class=output.failure_class, evidence=[*said, *output.evidence])
        matched = _script_failure([*said, *events, *tail])
    if matched is not None:
        return Failure(failure_class=matched[0], evidence=list(dict.fromkeys([*said, matched[1]])))
    if status.raw in QUEUE_STATUSES | {"Creating"}:
        # Given up on while still waiting for its resources, with no other word: no room.
        stayed = f"the job stayed {status.raw}" + (f": {status.reason}" if status.reason else "")
        return Failure(failure_class=FailureClass.CAPACITY, evidence=[stayed])
    return Failure(failure_class=FailureClass.INFRASTRUCTURE, evidence=said or ["DLC named no reason"])


def in_platform_order(lines: list[str], rules: Rules) -> tuple[FailureClass, str] | None:
    """The failure ``lines`` name, read in the order the platform produced them: the first line any
    rule matches decides, except that a line of capacity (waiting for room) gives way to any later
    line naming another failure: the job left that queue, and what happened after ended it."""
    found = None
    for line in lines:
        matched = class_from_text([line], rules)
        if matched is None:
            continue
        if found is None or (found[0] is FailureClass.CAPACITY and matched[0] is not FailureClass.CAPACITY):
            found = matched
    return found


def _verdict(status: JobStatus) -> str:
    """DLC's reason as evidence: ``ReasonCode=<code>: <message>; SubStatus=...``."""
    if status.reason_code and status.reason.startswith(status.reason_code):
        return f"ReasonCode={status.reason}"
    if status.reason_code:
        return "; ".join(part for part in (f"ReasonCode={status.reason_code}", status.reason) if part)
    return status.reason


def _script_failure(lines: list[str]) -> tuple[FailureClass, str] | None:
    """User code for a traceback or the script's own exit code, config for 126/127; None for none
    (an exit code of 128 or more is a signal's)."""
    for line in lines:
        if TRACEBACK.search(line):
            return FailureClass.USER_CODE, line.strip()
        for match in EXIT_CODE.finditer(line):
            code = int(match.group(1) or match.group(2))
            if code in COMMAND_NOT_RUN:
                return FailureClass.CONFIG, line.strip()
            if 0 < code < 128:
                return FailureClass.USER_CODE, line.strip()
    return None
