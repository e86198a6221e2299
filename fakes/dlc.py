"""PAI-DLC 2020-12-03 emulator: jobs whose lifecycle, pods and logs follow a per-job script.

A job's statuses advance with the emulator's clock from its creation time, along a
:class:`JobScript` chosen by DisplayName prefix, so a test decides up front whether a job
succeeds, fails (with which ReasonCode) or runs long enough to be stopped.

Decisions where the service's behaviour is not documented (keep them in mind when reading a test):

- Pods appear once the job leaves scheduling (Creating/Queuing/Bidding), one per replica of each
  JobSpec, named ``<JobId>-<role lower-cased>-<index>`` (``dlc123-master-0``, ``dlc123-worker-0``).
  Pod status follows the job: Pending while EnvPreparing, Running while running, then Succeeded or
  Failed; a stopped job's pods end Failed.
- Log lines are returned verbatim (no timestamp prefix). Each line has a hidden emit time: the
  script's lines are spread evenly over the planned Running phase (line i of n at
  ``running_start + running_seconds * (i + 1) / n``), so they appear gradually while Running and
  are all visible once the job finished; a stop hides the lines not yet emitted for good.
  GetPodLogs returns the first MaxLines lines emitted at or after StartTime and at or before
  EndTime. Times are ISO 8601 UTC; a fractional second is accepted.
- ListJobs' DisplayName is a case-insensitive substring match, as the SDK documents ("Supports
  fuzzy match"); a caller that needs one exact name filters the answer itself.
- Unknown JobId / PodId answer 404 ``JobNotFound`` / ``PodNotFound``.
- GetJobEvents and GetPodEvents return the first MaxEventsNum events of the script (events carry
  no times here); a pod's events are there whatever the job's status.
- A recorded job (``replay``) is served as a real DLC recorded it, whatever the clock says: its
  GetJob body, events, sanity checks and pod logs (GetPodLogs honours only MaxLines for it).
- StopJob turns a job that has not ended Stopping for ``stopping_seconds``, then Stopped, with no
  ReasonCode; stopping a stopping or ended job changes nothing.
- SubStatus (the job's and its pods') is reported only once the job reached its scripted final
  status, and only where the script sets it: the docstrings give examples and a pod's values
  (Normal, Evicted), not when the field is present.
- ListJobs' Status, WorkspaceId, JobType and ResourceId filters match one value exactly (the
  docstrings list single values and no way to ask for several).
- ListJobs' ``JobIds`` ("A list of job IDs separated by commas", ListJobsRequest) lists only those
  jobs, under every other filter (StartTime's 7-day default included); an unknown id is left out of
  the answer, not refused: the docstring says nothing of either.
- The create body's Settings, Tags included, are echoed as sent by GetJob and ListJobs (both
  models carry JobSettings, whose Tags are "The custom tags").
- ListJobs' ``Tags`` ("The tags used for filtering"; the SDK sends the map as a JSON string) lists
  only jobs whose Settings.Tags hold every given key with the given value: how the filter combines
  several tags is not documented; the package sends one tag and checks every job's tags itself.
- Refusals of bodies the service would not run (the codes are not documented): 400
  ``InvalidParameter`` naming the parameter, like the emulator's other refusals.

Documented rules the emulator enforces (sources: the installed alibabacloud_pai_dlc20201203
models' docstrings, and the PAI-DLC 2020-12-03 API reference, whose metadata is published as
api-docs.json):

- GetPodLogs: "StartTime ... Default value: 7 days ago", "EndTime ... Default value: current
  time", "MaxLines ... Default value: 2000" (GetPodLogsRequest). Not documented, and decided
  here: which lines a full answer keeps (the first ones after StartTime, read forwards).
- GetJobEvents: the same StartTime/EndTime defaults and "MaxEventsNum ... Default value: 2000".
- ListJobs: filters on the creation time; "StartTime ... Default value: the current time minus 7
  days" and "EndTime ... Default value: the current time" (ListJobsRequest). PageSize: default
  10, maximum 100, minimum 1 (the reference's metadata; the SDK docstring gives no default).
- CreateJob UserVpc: "If the vSwitch ID is specified, this parameter [ExtendedCIDRs] is required.
  Specify all CIDR blocks in the VPC." (CreateJobRequestUserVpc).
- CreateJob DataSources Uri: every example names the bucket's endpoint,
  ``oss://bucket.oss-cn-hangzhou-internal.aliyuncs.com/path/`` (CreateJob reference); a bare
  ``oss://bucket/path/`` is refused. Unverified: whether the service itself refuses the bare form.
- CreateJob ElasticSpec (JobElasticSpec): accepted with the job types AIMaster supports ("AIMaster
  currently supports the following frameworks: PyTorch, MPI, TensorFlow, and ElasticBatch", DLC
  guide "AIMaster: Elastic automatic fault tolerance engine"); with EnableElasticTraining,
  MinParallelism and MaxParallelism must be given, at least 1, Min <= Max. Unverified: the
  CreateJob reference and SDK docstring say of ElasticSpec "This parameter is not supported", and
  no job-type rule or range check is documented.

Test hook (not DLC): ``on_create`` is called with each accepted CreateJob body after the job is
stored and before the answer is sent, outside the emulator's lock. The emulator runs no code, so a
test uses it to play the job's side effects (outputs written to a mounted OSS location), or to hold
the answer back (an answer lost in transit) while other requests are still served.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from alibabacloud_pai_dlc20201203 import models as dlc_models

from fakes.base import (
    ApiError,
    ApiRequest,
    EmulatorServer,
    iso_utc,
    model_mismatches,
    parse_iso_utc,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from darabonba.model import DaraModel

    from fakes.base import _Exchange

JOB_TYPES = frozenset(
    {
        "TFJob",
        "PyTorchJob",
        "MPIJob",
        "XGBoostJob",
        "OneFlowJob",
        "ElasticBatchJob",
        "SlurmJob",
        "RayJob",
        "DataJuicerJob",
    }
)
#: Roles a JobSpec ``Type`` may take per job type (only the types the reference documents).
ROLES = {
    "PyTorchJob": frozenset({"Master", "Worker"}),
    "TFJob": frozenset({"Chief", "PS", "Worker", "Evaluator"}),
    "MPIJob": frozenset({"Launcher", "Worker"}),
}
TERMINAL_STATUSES = frozenset({"Succeeded", "Failed", "Stopped"})
SCHEDULING_STATUSES = frozenset({"Creating", "Queuing", "Bidding"})
POD_STATUS = {
    "EnvPreparing": "Pending",
    "SanityChecking": "Running",
    "Running": "Running",
    "Restarting": "Pending",
    "Stopping": "Running",
    "SucceededReserving": "Succeeded",
    "Succeeded": "Succeeded",
    "FailedReserving": "Failed",
    "Failed": "Failed",
    "Stopped": "Failed",
}
#: GetPodLogs MaxLines and GetJobEvents MaxEventsNum: "Default value: 2000" (request docstrings).
DEFAULT_MAX_LINES = 2000
DEFAULT_MAX_EVENTS = 2000
#: GetPodLogs, GetJobEvents and ListJobs look back this far without StartTime ("7 days ago").
DEFAULT_LOOKBACK_SECONDS = 7 * 24 * 3600
#: ListJobs PageSize: default 10, maximum 100 (the API reference's metadata for ListJobs).
DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 100
LIST_JOBS_FILTERS = ("DisplayName", "WorkspaceId", "Status", "JobType", "ResourceId")
LIST_JOBS_PARAMETERS = frozenset(
    {
        *LIST_JOBS_FILTERS,
        "Tags",
        "PageNumber",
        "PageSize",
        "SortBy",
        "Order",
        "ShowOwn",
        "StartTime",
        "EndTime",
        "JobIds",
    }
)
#: Job types whose ElasticSpec is accepted: the frameworks AIMaster supports (DLC's AIMaster guide).
ELASTIC_JOB_TYPES = frozenset({"PyTorchJob", "MPIJob", "TFJob", "ElasticBatchJob"})
#: A bucket endpoint as the DataSources examples write it: <bucket>.oss-<region>[-internal].aliyuncs.com.
OSS_BUCKET_ENDPOINT = re.compile(
    r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\.oss-[a-z0-9-]+?(-internal)?\.aliyuncs\.com"
)
#: Create-body fields echoed by both GetJob and ListJobs (the response models share these names).
ECHOED_FIELDS = (
    "Accessibility",
    "DisplayName",
    "ElasticSpec",
    "Envs",
    "JobSpecs",
    "JobType",
    "ResourceId",
    "Settings",
    "ThirdpartyLibDir",
    "ThirdpartyLibs",
    "UserCommand",
    "WorkspaceId",
)


@dataclass(frozen=True)
class JobScript:
    """How a job behaves: (status, seconds) phases from creation, then the final status.

    ``reason_code``/``reason_message`` are reported once the final status is reached (meant for
    Failed), and so are ``sub_status`` (the job's SubStatus, "such as the preemption retry
    status") and ``pod_sub_status`` (a pod's SubStatus, "Normal" or "Evicted", keyed by the pod's
    ``<role lower-cased>-<index>``; GetJob's docstrings). ``sanity_check_results`` is returned as
    is by ListJobSanityCheckResults, in wire shape: a list of check rounds, each a list of
    ``{CheckNumber, Phase, Status, Message, StartedAt, FinishedAt}``.
    """

    phases: list[tuple[str, float]] = field(
        default_factory=lambda: [
            ("Creating", 0.05),
            ("Queuing", 0.1),
            ("EnvPreparing", 0.1),
            ("Running", 0.5),
        ]
    )
    final: str = "Succeeded"
    reason_code: str = ""
    reason_message: str = ""
    sub_status: str = ""
    pod_sub_status: dict[str, str] = field(default_factory=dict)
    log_lines: list[str] = field(
        default_factory=lambda: [
            "Starting training: WORLD_SIZE=2 RANK=0",
            "epoch 1/3 loss=2.3026",
            "epoch 2/3 loss=1.8412",
            "epoch 3/3 loss=1.5107",
            "Training finished",
        ]
    )
    events: list[str] = field(
        default_factory=lambda: [
            "Job is created",
            "Job is queuing for resources",
            "Pods are scheduled",
            "Job is running",
        ]
    )
    sanity_check_results: list[list[dict[str, Any]]] = field(default_factory=list)
    #: GetPodEvents' Events of a pod, keyed like ``pod_sub_status``, returned whatever the job's status.
    pod_events: dict[str, list[str]] = field(default_factory=dict)
    #: GetJob's RestartRecord (wire shape), reported once the final status is reached.
    restart_record: list[dict[str, Any]] = field(default_factory=list)
    #: (ReasonCode, ReasonMessage) GetJob reports while the job is in a status before its final one
    #: (e.g. EnvPreparing with an image that cannot be pulled).
    waiting_reason: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedJob:
    """A job served as a real DLC recorded it: GetJob's body, its job and pod events, sanity checks
    and pod logs (tests/data/dlc/recorded_failures.json), unchanged by the clock."""

    body: dict[str, Any]
    job_events: list[str]
    pod_events: dict[str, list[str]]
    sanity_checks: list[list[dict[str, Any]]]
    logs: dict[str, list[str]]


@dataclass(frozen=True)
class Span:
    """One status a job is in from ``start`` until ``end`` (None: for good)."""

    status: str
    start: float
    end: float | None


@dataclass
class EmulatedJob:
    """A created job: its create body, script and the times that decide its status."""

    job_id: str
    body: dict[str, Any]
    script: JobScript
    created_at: float
    stop_requested_at: float | None = None

    @property
    def display_name(self) -> str:
        return self.body["DisplayName"]

    @property
    def pod_ids(self) -> list[tuple[str, str]]:
        """(PodId, role) for every replica, in JobSpecs order."""
        return [
            (f"{self.job_id}-{spec['Type'].lower()}-{index}", spec["Type"])
            for spec in self.body["JobSpecs"]
            for index in range(spec["PodCount"])
        ]

    def planned_spans(self) -> list[Span]:
        """The statuses the script walks through when nobody stops the job."""
        spans, start = [], self.created_at
        for status, seconds in self.script.phases:
            spans.append(Span(status, start, start + seconds))
            start += seconds
        return [*spans, Span(self.script.final, start, None)]

    def spans(self, stopping_seconds: float) -> list[Span]:
        """The statuses the job walks through, cut short by a stop request if there was one."""
        planned = self.planned_spans()
        stop = self.stop_requested_at
        if stop is None:
            return planned
        kept = [s for s in planned if s.start <= stop]
        kept[-1] = replace(kept[-1], end=stop)
        return [
            *kept,
            Span("Stopping", stop, stop + stopping_seconds),
            Span("Stopped", stop + stopping_seconds, None),
        ]

    def status_at(self, now: float, stopping_seconds: float) -> str:
        """The job's status at ``now``."""
        return [s for s in self.spans(stopping_seconds) if s.start <= now][-1].status

    def log_times(self) -> list[float]:
        """Emit time of each script log line: spread over the planned Running phase."""
        planned = self.planned_spans()
        running = next((s for s in planned if s.status == "Running"), None)
        if running is None:
            start, length = planned[-1].start, 0.0
        else:
            assert running.end is not None, "a Running phase has an end; only the final status has none"
            start, length = running.start, running.end - running.start
        count = len(self.script.log_lines)
        return [start + length * (i + 1) / count for i in range(count)]

    def visible_log(self, now: float) -> list[tuple[float, str]]:
        """(emit time, line) of the lines emitted by ``now`` (and before a stop)."""
        cutoff = now if self.stop_requested_at is None else min(now, self.stop_requested_at)
        return [
            (t, line) for t, line in zip(self.log_times(), self.script.log_lines, strict=True) if t <= cutoff
        ]


class DlcEmulator(EmulatorServer):
    """PAI-DLC: CreateJob, GetJob, ListJobs, StopJob, GetPodLogs, GetJobEvents, GetPodEvents, sanity
    checks."""

    api_version = "2020-12-03"

    def __init__(
        self,
        access_keys: Mapping[str, str | None] | None = None,
        resource_type: str = "Lingjun",
        stopping_seconds: float = 0.05,
        on_create: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__(access_keys)
        self.on_create = on_create
        self.default_script = JobScript()
        self.resource_type = resource_type
        self.stopping_seconds = stopping_seconds
        self.jobs: dict[str, EmulatedJob] = {}
        self.recorded: dict[str, RecordedJob] = {}
        self._scripts: dict[str, JobScript] = {}
        self._register_routes()

    def _register_routes(self) -> None:
        jobs = "/api/v1/jobs"
        self.add_roa_route("POST", jobs, "CreateJob", self._create_job, dlc_models.CreateJobResponseBody)
        self.add_roa_route("GET", jobs, "ListJobs", self._list_jobs, dlc_models.ListJobsResponseBody)
        self.add_roa_route("GET", f"{jobs}/{{JobId}}", "GetJob", self._get_job, dlc_models.GetJobResponseBody)
        self.add_roa_route(
            "POST", f"{jobs}/{{JobId}}/stop", "StopJob", self._stop_job, dlc_models.StopJobResponseBody
        )
        self.add_roa_route(
            "GET",
            f"{jobs}/{{JobId}}/pods/{{PodId}}/logs",
            "GetPodLogs",
            self._get_pod_logs,
            dlc_models.GetPodLogsResponseBody,
        )
        self.add_roa_route(
            "GET",
            f"{jobs}/{{JobId}}/pods/{{PodId}}/events",
            "GetPodEvents",
            self._get_pod_events,
            dlc_models.GetPodEventsResponseBody,
        )
        self.add_roa_route(
            "GET",
            f"{jobs}/{{JobId}}/events",
            "GetJobEvents",
            self._get_job_events,
            dlc_models.GetJobEventsResponseBody,
        )
        self.add_roa_route(
            "GET",
            f"{jobs}/{{JobId}}/sanitycheckresults",
            "ListJobSanityCheckResults",
            self._list_sanity_check_results,
            dlc_models.ListJobSanityCheckResultsResponseBody,
            request_id_key="RequestID",  # sic: this model's wire name differs from every other
        )

    def script_for(self, display_name_prefix: str, script: JobScript) -> None:
        """Jobs whose DisplayName starts with the prefix follow ``script`` (longest prefix wins)."""
        self._scripts[display_name_prefix] = script

    def replay(self, case: dict[str, Any]) -> str:
        """Serve a recorded job (one case of tests/data/dlc/recorded_failures.json) under its JobId.

        The body must be one GetJob's model takes whole: a field it does not know is a mistake in the
        recording, refused here rather than dropped.
        """
        body = copy.deepcopy(case["job"])
        problems = model_mismatches(dlc_models.GetJobResponseBody, body)
        if problems:
            raise ValueError(f"recorded GetJob body of {case['name']!r}: {'; '.join(problems)}")
        job_id = body.setdefault("JobId", f"dlc{secrets.token_hex(7)}")
        self.recorded[job_id] = RecordedJob(
            body=body,
            job_events=list(case.get("job_events") or []),
            pod_events=dict(case.get("pod_events") or {}),
            sanity_checks=list(case.get("sanity_checks") or []),
            logs=dict(case.get("logs") or {}),
        )
        return job_id

    def _script(self, display_name: str) -> JobScript:
        prefixes = [p for p in self._scripts if display_name.startswith(p)]
        return self._scripts[max(prefixes, key=len)] if prefixes else self.default_script

    def _answer(self, exchange: _Exchange, outcome: str, body: Any) -> None:
        """Run the handler; then, for a job just created, ``on_create`` before the answer goes out."""
        super()._answer(exchange, outcome, body)
        if exchange.action == "CreateJob" and self.on_create is not None:
            self.on_create(copy.deepcopy(body))

    def _job(self, request: ApiRequest) -> EmulatedJob:
        job_id = request.path_params["JobId"]
        if job_id not in self.jobs:
            raise ApiError(404, "JobNotFound", f"Job {job_id} is not found.")
        return self.jobs[job_id]

    # ----------------------------------------------------------------------------- handlers

    def _create_job(self, request: ApiRequest) -> dict[str, Any]:
        body = validate_create_job_body(request.body)
        job_id = f"dlc{secrets.token_hex(7)}"
        self.jobs[job_id] = EmulatedJob(job_id, body, self._script(body["DisplayName"]), self.clock())
        return {"JobId": job_id}

    def _get_job(self, request: ApiRequest) -> dict[str, Any]:
        recorded = self.recorded.get(request.path_params["JobId"])
        if recorded is not None:
            return copy.deepcopy(recorded.body)
        job = self._job(request)
        view = self._job_view(job, self.clock())
        if "Description" in job.body:
            view["Description"] = job.body["Description"]
        return _with_echoes(
            view, job.body, dlc_models.GetJobResponseBodyDataSources, dlc_models.GetJobResponseBodyUserVpc
        )

    def _list_jobs(self, request: ApiRequest) -> dict[str, Any]:
        unsupported = sorted(request.query.keys() - LIST_JOBS_PARAMETERS)
        if unsupported:
            raise ApiError(400, "InvalidParameter", f"ListJobs parameters {unsupported} are not emulated.")
        now = self.clock()
        start = _time_param(request.query, "StartTime", now - DEFAULT_LOOKBACK_SECONDS)
        end = _time_param(request.query, "EndTime", now)
        jobs = list(self.jobs.values())
        if request.query.get("JobIds"):
            wanted = set(request.query["JobIds"].split(","))
            jobs = [job for job in jobs if job.job_id in wanted]
        created = [job for job in jobs if start <= job.created_at <= end]
        views = [(job, self._job_view(job, now)) for job in created]
        matching = [(job, view) for job, view in views if _matches(view, request.query)]
        matching.sort(key=_sort_key(request.query.get("SortBy", "GmtCreateTime")))
        if request.query.get("Order", "desc").lower() != "asc":
            matching.reverse()
        page = _int_param(request.query, "PageNumber", 1, minimum=1)
        size = _int_param(request.query, "PageSize", DEFAULT_PAGE_SIZE, minimum=1, maximum=MAX_PAGE_SIZE)
        return {
            "Jobs": [self._job_item(job, view) for job, view in matching[(page - 1) * size : page * size]],
            "TotalCount": len(matching),
        }

    def _stop_job(self, request: ApiRequest) -> dict[str, Any]:
        job = self._job(request)
        now = self.clock()
        if (
            job.stop_requested_at is None
            and job.status_at(now, self.stopping_seconds) not in TERMINAL_STATUSES
        ):
            job.stop_requested_at = now  # stopping a stopping or finished job changes nothing
        return {"JobId": job.job_id}

    def _get_pod_logs(self, request: ApiRequest) -> dict[str, Any]:
        pod_id = request.path_params["PodId"]
        recorded = self.recorded.get(request.path_params["JobId"])
        if recorded is not None:
            limit = _int_param(request.query, "MaxLines", DEFAULT_MAX_LINES)
            lines = recorded.logs.get(pod_id, [])
            return {"JobId": recorded.body["JobId"], "PodId": pod_id, "Logs": lines[:limit]}
        job = self._job(request)
        if pod_id not in dict(job.pod_ids):
            raise ApiError(404, "PodNotFound", f"Pod {pod_id} is not found in job {job.job_id}.")
        now = self.clock()
        lines = select_log_lines(job.visible_log(now), request.query, now)
        return {"JobId": job.job_id, "PodId": pod_id, "PodUid": _pod_uid(pod_id), "Logs": lines}

    def _get_job_events(self, request: ApiRequest) -> dict[str, Any]:
        limit = _int_param(request.query, "MaxEventsNum", DEFAULT_MAX_EVENTS)
        recorded = self.recorded.get(request.path_params["JobId"])
        if recorded is not None:
            return {"JobId": recorded.body["JobId"], "Events": recorded.job_events[:limit]}
        job = self._job(request)
        return {"JobId": job.job_id, "Events": list(job.script.events[:limit])}

    def _get_pod_events(self, request: ApiRequest) -> dict[str, Any]:
        """GetPodEvents: the first MaxEventsNum events of the pod (no times here, as for jobs)."""
        limit = _int_param(request.query, "MaxEventsNum", DEFAULT_MAX_EVENTS)
        pod_id = request.path_params["PodId"]
        recorded = self.recorded.get(request.path_params["JobId"])
        if recorded is not None:
            events = recorded.pod_events.get(pod_id, [])
            return {"JobId": recorded.body["JobId"], "PodId": pod_id, "Events": events[:limit]}
        job = self._job(request)
        if pod_id not in dict(job.pod_ids):
            raise ApiError(404, "PodNotFound", f"Pod {pod_id} is not found in job {job.job_id}.")
        events = job.script.pod_events.get(pod_id.removeprefix(f"{job.job_id}-"), [])
        return {"JobId": job.job_id, "PodId": pod_id, "PodUid": _pod_uid(pod_id), "Events": events[:limit]}

    def _list_sanity_check_results(self, request: ApiRequest) -> dict[str, Any]:
        recorded = self.recorded.get(request.path_params["JobId"])
        source = (
            recorded.sanity_checks if recorded is not None else self._job(request).script.sanity_check_results
        )
        results = copy.deepcopy(source)
        return {"SanityCheckResults": results, "TotalCount": len(results)}

    # ----------------------------------------------------------------------------- views

    def _job_view(self, job: EmulatedJob, now: float) -> dict[str, Any]:
        """Fields GetJob and ListJobs share: identity, echoes of the body, status and times."""
        spans = [s for s in job.spans(self.stopping_seconds) if s.start <= now]
        view = {key: copy.deepcopy(job.body[key]) for key in ECHOED_FIELDS if key in job.body}
        view.update(
            JobId=job.job_id,
            Priority=job.body.get("Priority", 1),
            ResourceType=self.resource_type,
            RequestGPU=_request_gpu(job.body),
            **_status_fields(job, spans, now),
            Pods=_pods(job, spans),
        )
        return view

    def _job_item(self, job: EmulatedJob, view: dict[str, Any]) -> dict[str, Any]:
        item = {**view}
        if "JobMaxRunningTimeMinutes" in job.body:
            item["JobMaxRunningTimeMinutes"] = job.body["JobMaxRunningTimeMinutes"]
        return _with_echoes(item, job.body, dlc_models.JobItemDataSources, dlc_models.JobItemUserVpc)


def validate_create_job_body(body: Any) -> dict[str, Any]:
    """Accept only a body the SDK's CreateJobRequest would produce, with the fields DLC requires."""
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidParameter", "The CreateJob body must be a JSON object.")
    problems = model_mismatches(dlc_models.CreateJobRequest, body)
    if problems:
        raise ApiError(400, "InvalidParameter", f"CreateJob body: {'; '.join(problems)}")
    for name in ("DisplayName", "JobType", "JobSpecs", "UserCommand"):
        if not body.get(name):
            raise ApiError(400, "InvalidParameter", f"The parameter {name} is required.")
    if body["JobType"] not in JOB_TYPES:
        raise ApiError(
            400, "InvalidParameter", f"The parameter JobType {body['JobType']!r} is not supported."
        )
    for index, spec in enumerate(body["JobSpecs"]):
        _validate_job_spec(body["JobType"], index, spec)
    _validate_elastic_spec(body["JobType"], body.get("ElasticSpec"))
    _validate_user_vpc(body.get("UserVpc"))
    for index, source in enumerate(body.get("DataSources") or []):
        _validate_data_source_uri(index, source.get("Uri"))
    return body


def _validate_elastic_spec(job_type: str, elastic: dict[str, Any] | None) -> None:
    """ElasticSpec only with a job type AIMaster drives, and a usable MinParallelism..MaxParallelism."""
    if not elastic:
        return
    if job_type not in ELASTIC_JOB_TYPES:
        raise ApiError(
            400, "InvalidParameter", f"The parameter ElasticSpec is not supported for JobType {job_type}."
        )
    if not elastic.get("EnableElasticTraining"):
        return
    low, high = elastic.get("MinParallelism"), elastic.get("MaxParallelism")
    if not isinstance(low, int) or not isinstance(high, int) or not 1 <= low <= high:
        raise ApiError(
            400,
            "InvalidParameter",
            f"The parameters ElasticSpec.MinParallelism ({low}) and MaxParallelism ({high}) must be "
            "positive integers with MinParallelism <= MaxParallelism.",
        )


def _validate_user_vpc(vpc: dict[str, Any] | None) -> None:
    """CreateJobRequestUserVpc: with a SwitchId, ExtendedCIDRs "is required" (every CIDR of the VPC)."""
    if vpc and vpc.get("SwitchId") and not vpc.get("ExtendedCIDRs"):
        raise ApiError(
            400,
            "InvalidParameter",
            "The parameter UserVpc.ExtendedCIDRs is required when UserVpc.SwitchId is specified; "
            "specify all CIDR blocks in the VPC.",
        )


def _validate_data_source_uri(index: int, uri: str | None) -> None:
    """An OSS DataSources Uri names the bucket's endpoint, as every CreateJob reference example does."""
    if not uri or not uri.startswith("oss://"):
        return
    host = uri.removeprefix("oss://").split("/", 1)[0]
    if not OSS_BUCKET_ENDPOINT.fullmatch(host):
        raise ApiError(
            400,
            "InvalidParameter",
            f"The parameter DataSources[{index}].Uri {uri!r} must name the bucket's endpoint, e.g. "
            "oss://bucket.oss-cn-hangzhou-internal.aliyuncs.com/path/.",
        )


def _validate_job_spec(job_type: str, index: int, spec: dict[str, Any]) -> None:
    where = f"JobSpecs[{index}]"
    for name in ("Type", "Image"):
        if not spec.get(name):
            raise ApiError(400, "InvalidParameter", f"The parameter {where}.{name} is required.")
    if not isinstance(spec.get("PodCount"), int) or spec["PodCount"] < 1:
        raise ApiError(400, "InvalidParameter", f"The parameter {where}.PodCount must be a positive integer.")
    if not spec.get("ResourceConfig") and not spec.get("EcsSpec"):
        raise ApiError(400, "InvalidParameter", f"The parameter {where} needs ResourceConfig or EcsSpec.")
    roles = ROLES.get(job_type)
    if roles is not None and spec["Type"] not in roles:
        raise ApiError(
            400, "InvalidParameter", f"The parameter {where}.Type {spec['Type']!r} is not a {job_type} role."
        )


def select_log_lines(visible: list[tuple[float, str]], query: dict[str, str], now: float) -> list[str]:
    """GetPodLogs: the first MaxLines (default 2000) lines from StartTime (default: 7 days before
    ``now``) to EndTime (default: ``now``), as GetPodLogsRequest's docstring gives the defaults."""
    limit = _int_param(query, "MaxLines", DEFAULT_MAX_LINES)
    start = _time_param(query, "StartTime", now - DEFAULT_LOOKBACK_SECONDS)
    end = _time_param(query, "EndTime", now)
    return [line for t, line in visible if start <= t <= end][:limit]


def _status_fields(job: EmulatedJob, spans: list[Span], now: float) -> dict[str, Any]:
    """Status, StatusHistory, reason and Gmt* times as seen at ``now``."""
    current = spans[-1]
    first = {s.status: s.start for s in reversed(spans)}
    finished = current.status in TERMINAL_STATUSES
    reason = {}
    final = finished and current.status == job.script.final
    if final and job.script.reason_code:
        reason = {"ReasonCode": job.script.reason_code, "ReasonMessage": job.script.reason_message}
    elif current.status in job.script.waiting_reason:
        code, message = job.script.waiting_reason[current.status]
        reason = {"ReasonCode": code, "ReasonMessage": message}
    history = [_history_entry(s, now, reason if s is current else {}) for s in spans]
    times = {
        "GmtCreateTime": job.created_at,
        "GmtSubmittedTime": first.get("Queuing"),
        "GmtRunningTime": first.get("Running"),
        "GmtFinishTime": current.start if finished else None,
        "GmtSuccessedTime": first.get("Succeeded"),
        "GmtFailedTime": first.get("Failed"),
        "GmtStoppedTime": first.get("Stopped"),
    }
    return {
        "Status": current.status,
        **reason,
        **({"SubStatus": job.script.sub_status} if final and job.script.sub_status else {}),
        **({"RestartRecord": job.script.restart_record} if final and job.script.restart_record else {}),
        "StatusHistory": history,
        **{key: iso_utc(value) for key, value in times.items() if value is not None},
        "Duration": int((current.start if finished else now) - job.created_at),
    }


def _history_entry(span: Span, now: float, reason: dict[str, str]) -> dict[str, str]:
    entry = {"Status": span.status, "StartTime": iso_utc(span.start), **reason}
    if span.end is not None and span.end <= now:
        entry["EndTime"] = iso_utc(span.end)
    return entry


def _pods(job: EmulatedJob, spans: list[Span]) -> list[dict[str, Any]]:
    """One pod per replica once the job got past scheduling, with a status derived from the job's."""
    placed = [s for s in spans if s.status not in SCHEDULING_STATUSES | {"Stopping", "Stopped"}]
    if not placed:
        return []
    current = spans[-1]
    running = next((s for s in spans if s.status == "Running"), None)
    pods = []
    for number, (pod_id, role) in enumerate(job.pod_ids):
        pod = {
            "PodId": pod_id,
            "PodUid": _pod_uid(pod_id),
            "Type": role,
            "Status": POD_STATUS.get(current.status, "Unknown"),
            "Ip": f"10.0.0.{number + 10}",
            "NodeName": f"lingjun-node-{number}",
            "GmtCreateTime": iso_utc(placed[0].start),
        }
        if running is not None:
            pod["GmtStartTime"] = iso_utc(running.start)
        if current.status in TERMINAL_STATUSES:
            pod["GmtFinishTime"] = iso_utc(current.start)
        sub_status = job.script.pod_sub_status.get(pod_id.removeprefix(f"{job.job_id}-"))
        if sub_status and current.status == job.script.final:
            pod["SubStatus"] = sub_status
        pods.append(pod)
    return pods


def _pod_uid(pod_id: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, pod_id))


def _request_gpu(body: dict[str, Any]) -> int:
    """GPUs the job asks for: PodCount x ResourceConfig.GPU summed over its JobSpecs."""
    return sum(
        spec["PodCount"] * int(float((spec.get("ResourceConfig") or {}).get("GPU") or 0))
        for spec in body["JobSpecs"]
    )


def _with_echoes(
    view: dict[str, Any], body: dict[str, Any], data_source_model: type[DaraModel], vpc_model: type[DaraModel]
) -> dict[str, Any]:
    """Add DataSources and UserVpc, reduced to the fields the response model has.

    The response models spell the VPC's extra CIDRs ``ExtendedCidrs`` where the request says
    ``ExtendedCIDRs``; the value is carried over.
    """
    if "DataSources" in body:
        view["DataSources"] = [_project(data_source_model, source) for source in body["DataSources"]]
    if "UserVpc" in body:
        vpc = dict(body["UserVpc"])
        if "ExtendedCIDRs" in vpc:
            vpc["ExtendedCidrs"] = vpc.pop("ExtendedCIDRs")
        view["UserVpc"] = _project(vpc_model, vpc)
    return view


def _project(model: type[DaraModel], data: dict[str, Any]) -> dict[str, Any]:
    """Keep the keys of ``data`` that ``model`` knows."""
    parsed = model().from_map(data).to_map()
    return {key: value for key, value in parsed.items() if key in data}


def _matches(view: dict[str, Any], query: dict[str, str]) -> bool:
    if "Tags" in query:
        try:
            wanted_tags = json.loads(query["Tags"])
        except json.JSONDecodeError:
            raise ApiError(400, "InvalidParameter", "The parameter Tags is not a JSON object.") from None
        tags = (view.get("Settings") or {}).get("Tags") or {}
        if not isinstance(wanted_tags, dict) or any(tags.get(k) != v for k, v in wanted_tags.items()):
            return False
    for name in LIST_JOBS_FILTERS:
        wanted = query.get(name)
        if not wanted:
            continue
        actual = str(view.get(name, ""))
        if name == "DisplayName" and wanted.lower() not in actual.lower():
            return False
        if name != "DisplayName" and actual != wanted:
            return False
    return True


def _sort_key(sort_by: str) -> Any:
    """Key over (job, view) pairs for ListJobs' SortBy; times compare by the exact clock value."""
    keys = {
        "GmtCreateTime": lambda pair: pair[0].created_at,
        "GmtFinishTime": lambda pair: pair[1].get("GmtFinishTime", "9999"),
        "DisplayName": lambda pair: pair[1]["DisplayName"],
        "JobType": lambda pair: pair[1]["JobType"],
        "Status": lambda pair: pair[1]["Status"],
    }
    if sort_by not in keys:
        raise ApiError(400, "InvalidParameter", f"The parameter SortBy {sort_by!r} is not supported.")
    return keys[sort_by]


def _int_param(
    query: dict[str, str], name: str, default: int, minimum: int = 0, maximum: int | None = None
) -> int:
    try:
        value = int(query.get(name, default))
    except ValueError as exc:
        raise ApiError(400, "InvalidParameter", f"The parameter {name} must be an integer.") from exc
    if value < minimum:
        raise ApiError(400, "InvalidParameter", f"The parameter {name} must be at least {minimum}.")
    if maximum is not None and value > maximum:
        raise ApiError(400, "InvalidParameter", f"The parameter {name} must be at most {maximum}.")
    return value


def _time_param(query: dict[str, str], name: str, default: float) -> float:
    if not query.get(name):
        return default
    try:
        return parse_iso_utc(query[name])
    except ValueError as exc:
        raise ApiError(
            400, "InvalidParameter", f"The parameter {name} must be an ISO 8601 UTC time."
        ) from exc
