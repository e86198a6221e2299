"""Submit a distributed training job and wait for it without holding a worker slot.

Crash safety: the job gets a deterministic name from (dag_id, run_id, task_id, map_index) and the
round of tries (clearing the task starts a new one). Before launching, the operator reattaches to
the job an earlier try of the round saved in ``task_state_store``, or to one found under the name
(a worker that died between submitting and saving), so a job is never launched twice. Only a job
that failed or was stopped is launched again on retry; a cleared task stops a job of its earlier
round that still runs and launches a new one. A job still ``stopping`` (a stop was asked, its
machines are not free yet) is waited for first.

Recovery: a failed job's backend names its failure class; the task fails with
:class:`~aliyun_training.operators.recovery.TrainingJobFailed`, whose class the task's retry policy
turns into fail-now, retry-later or retry-and-resume. Every try of a round is recorded in
``task_state_store`` (job, class, evidence, decision, GPU-hours); the next try reads the last one to
decide whether to set ``RESUME_FROM``, and the successful try returns them all for the manifest.

The job contract each try sees: ``CHECKPOINT_DIR`` (the same for every try of a round: the round's
output directory, the dataset version and a hash of what the job computes), ``TRAINING_ATTEMPT``
(the try number) and, on a try that resumes, ``RESUME_FROM``. A task that ends without success
stops its saved job (``on_failure_callback``), so no job outlives its task; what no callback sees
(a task marked failed before the triggerer picked its trigger up, a deleted run) the reconciler
DAG stops.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.backends import get_backend
from aliyun_training.backends.base import JobHandle, JobState, JobStatus, TrainingBackend, same_owner
from aliyun_training.failures import Failure, FailureClass
from aliyun_training.installation import installation_id
from aliyun_training.kubernetes.names import job_name
from aliyun_training.links import RunPageLink, TrainingJobConsoleLink
from aliyun_training.monitor import GpuBudget, JobMonitor, JobOutcome
from aliyun_training.notifications import NotifierSpec
from aliyun_training.operators.deferral import DeferralMixin
from aliyun_training.operators.live import keep_announced, live_settings, outcome_fields, write_first_record
from aliyun_training.operators.ownership import task_owner
from aliyun_training.operators.recovery import FailureClassRetryPolicy, TrainingJobFailed
from aliyun_training.pages.urls import run_page
from aliyun_training.plan.models import DatasetPlan, GpuHourPrice, JobPlan, TryContract
from aliyun_training.settings import local_paths
from aliyun_training.spec import JobOwner, TrainingJobSpec, describe_owner, mounted_output_uri
from aliyun_training.stage_records import Attempt, JobResult, OutcomeStatus, StagedDataset, jobs_gpu_hours
from aliyun_training.triggers.training import TrainingJobTrigger
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import Context

#: task_state_store key of the job handle; renaming it breaks reattachment of in-flight retries.
HANDLE_KEY = "training_job_handle"
#: task_state_store key of the tries recorded so far (``Attempt`` dicts, every round's).
ATTEMPTS_KEY = "training_job_attempts"
#: Slack between our clock and the platform's when searching jobs by creation time.
CLOCK_SKEW = timedelta(hours=1)
#: What a job still pending at its timeout may be stuck on besides room: no retry frees it.
STUCK_FOR_GOOD = frozenset({FailureClass.CONFIG, FailureClass.DATA})
#: How long a try waits for an earlier job that is still stopping before it gives up (and retries).
STOPPING_WAIT = timedelta(minutes=15)
#: What of a spec decides what the job computes: the checkpoint key hashes these, and only these.
CHECKPOINT_KEY_FIELDS = frozenset(
    {"command", "image", "framework", "nodes", "gpus_per_node", "env", "datasets"}
)


class TrainingJobOperator(ReturnedRecordsMixin, DeferralMixin, BaseOperator):
    """Run the plan's job on its backend; return a ``JobResult`` (as a dict) when the job succeeds.

    :param job: the run plan's ``JobPlan`` (or its dict form, or an XComArg of it; templated): the
        spec, the backend's settings and where the job writes. A job whose spec has no
        ``output_dir`` writes to ``<output_root>/<job name>`` (the local root's ``outputs/`` when
        ``output_root`` is unset); with ``output_uri`` mounted there, the result's ``output_uri``
        names the job's outputs in OSS, where they outlive the nodes.
    :param dataset: the staging task's StagedDataset (templated): the job reads that version, mounted
        at the plan's ``dataset_mount_path`` when it was registered for the backend.
    :param planned_dataset: the run plan's ``DatasetPlan`` (templated): the version a job given no
        staged dataset trains on (a fixed dataset), which names its checkpoints.
    :param image: the image stage's record (an ``ImageRef`` or ``BuiltImage``) or an image reference
        (templated): the job runs in it instead of the spec's image.
    :param price: the run plan's ``GpuHourPrice`` (templated; None: the environment prices none):
        the money the job costs so far, on the run page and in the result.
    :param expected_minutes: how long the job should run (None: the median of the task's jobs in
        the pipeline's recent successful runs); ``deadline_tolerance`` times it from the job's start
        is its deadline, whose risk (by the ETA the job's progress gives) and miss are announced.
    :param notifications: the pipeline's notifiers (``NotifierSpec``), told of a deadline at risk
        or missed.
    :param deferrable: wait in the triggerer (default) instead of blocking a worker slot. The job's
        live record (the run page, GPU use, deadlines) is kept only while it waits deferred.
    :param poll_interval: seconds between status polls.
    :param retry_policy: how a failure's class decides the retry (default: a
        ``FailureClassRetryPolicy`` with the default recovery table).
    """

    #: Whether the job is a training run that checkpoints: it gets CHECKPOINT_DIR and may resume.
    resumable = True
    #: Whether the trigger keeps the job's live record (the run page, GPU use, the deadline): the
    #: run's training job; not the jobs that probe an image, prepare or score.
    live_record = True

    template_fields: Sequence[str] = ("job", "dataset", "planned_dataset", "image", "price")
    ui_color = "#ff6a00"
    operator_extra_links = (TrainingJobConsoleLink(), RunPageLink())

    def __init__(
        self,
        *,
        job: JobPlan | dict[str, Any],
        dataset: Any = None,
        planned_dataset: DatasetPlan | dict[str, Any] | None = None,
        image: Any = None,
        price: Any = None,
        expected_minutes: float | None = None,
        deadline_tolerance: float = 1.5,
        notifications: Sequence[NotifierSpec | dict[str, Any]] = (),
        deferrable: bool = True,
        poll_interval: float = 10.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("retry_policy", FailureClassRetryPolicy())
        kwargs["on_failure_callback"] = [*_callbacks(kwargs.get("on_failure_callback")), stop_saved_job]
        super().__init__(**kwargs)
        self.job = job.model_dump(mode="json") if isinstance(job, JobPlan) else job
        self.dataset = dataset
        self.planned_dataset = (
            planned_dataset.model_dump(mode="json")
            if isinstance(planned_dataset, DatasetPlan)
            else planned_dataset
        )
        self.image = image
        self.price = price
        self.expected_minutes = expected_minutes
        self.deadline_tolerance = deadline_tolerance
        self.notifications = [NotifierSpec.model_validate(n).model_dump(mode="json") for n in notifications]
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self._waiting_for: JobHandle | None = None

    @property
    def plan(self) -> JobPlan:
        """The job's part of the run plan, once templates are rendered."""
        return validate_record(JobPlan, self.job)

    def _backend(self, name: str) -> TrainingBackend:
        return get_backend(name, self.plan.backend_config)

    def _live_settings(
        self,
        context: Context,
        spec: TrainingJobSpec,
        backend: TrainingBackend,
        handle: JobHandle,
        status: JobStatus,
    ) -> dict[str, Any] | None:
        """What the trigger needs to keep the job's live record, whose first version (the job as
        this first poll saw it) is written now; None for a job that keeps none."""
        if not self.live_record:
            return None
        settings = live_settings(
            context,
            spec,
            backend,
            handle,
            price=self._price,
            expected_minutes=self.expected_minutes,
            tolerance=self.deadline_tolerance,
            notifications=[NotifierSpec.model_validate(n) for n in self.notifications],
        )
        write_first_record(context, settings, handle, status)
        return settings.model_dump(mode="json")

    @property
    def _price(self) -> GpuHourPrice | None:
        """The run plan's price of a GPU-hour, once templates are rendered (None: unpriced)."""
        return validate_record(GpuHourPrice, self.price) if self.price else None

    # -- entry points ----------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        spec, backend, name = self._prepare(context)
        handle = self._attach_or_submit(backend, spec, name, context)
        context["task_state_store"].set(HANDLE_KEY, handle.model_dump())
        TrainingJobConsoleLink().persist(context, backend.console_url(handle))
        # A job without a live record stores an empty link (no page), as a job without a console does.
        ti = context["ti"]
        RunPageLink().persist(context, run_page(ti.dag_id, ti.run_id) if self.live_record else None)
        budget = self._budget(spec, context, handle)
        monitor = JobMonitor(backend, handle, self.log, budget=budget)
        status = monitor.poll()
        remaining = self._remaining(spec, status)
        if not status.state.is_terminal and remaining.total_seconds() <= 0:
            self._stop_after_timeout(context, backend, handle, spec)
        given_up = monitor.give_up(status)
        if given_up is not None:
            backend.stop(handle)
            return self._finish(context, spec, backend, given_up)
        if status.state.is_terminal:
            return self._finish(context, spec, backend, monitor.outcome(status))
        if self.deferrable:
            trigger = TrainingJobTrigger(
                backend=backend.name,
                handle=handle.model_dump(),
                backend_config=backend.config,
                poll_interval=self.poll_interval,
                log_cursor=monitor.cursor,
                last_raw_status=monitor.last_raw_status,
                budget=budget.model_dump() if budget else None,
                waited_because=monitor.waited_because,
                live=self._live_settings(context, spec, backend, handle, status),
            )
            self.defer_until_done(trigger, remaining)
        return self._wait_blocking(context, spec, backend, monitor, remaining)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: turn its event into a result or a precise error."""
        spec, backend, _ = self._prepare(context, announce=False)
        return self._finish(context, spec, backend, JobOutcome.model_validate(event))

    def stop_after_deferral_timeout(self, context: Context) -> None:
        """Stop the job of the saved handle, failing with where it was stuck."""
        spec, backend, _ = self._prepare(context, announce=False)
        handle = self._saved_job(backend, spec.owner, context)
        if handle is not None:
            self._stop_after_timeout(context, backend, handle, spec)

    def on_kill(self) -> None:
        """Blocking mode: the task was killed on the worker, so stop the job it is waiting for."""
        handle = self._waiting_for
        if handle is not None:
            self.log.info("Task killed: stopping job %s", handle.job_id)
            self._backend(handle.backend).stop(handle)

    # -- steps -----------------------------------------------------------------------------------

    def _spec(self) -> TrainingJobSpec:
        staged = validate_record(StagedDataset, self.dataset) if self.dataset else None
        return self.plan.shaped(staged, image_reference(self.image) if self.image else None)

    def _prepare(
        self, context: Context, announce: bool = True
    ) -> tuple[TrainingJobSpec, TrainingBackend, str]:
        """The try's spec as its job runs it (``JobPlan.for_try``: owner, contract variables), its
        backend and job name; ``announce`` logs whether it resumes (once per try: not again when the
        try resumes)."""
        ti = context["ti"]
        try:
            installation = installation_id()
            name = job_name(
                ti.dag_id,
                ti.run_id,
                ti.task_id,
                ti.map_index,
                self._first_try_of_round(ti),
                installation=installation,
            )
            contract = self._contract(context)
            spec = self.plan.for_try(
                self._spec(),
                name,
                contract=contract,
                owner=task_owner(ti, installation),
                output_root=str(local_paths().outputs),
            )
            backend = self._backend(spec.backend)
            backend.check(spec, name)
        except SpecError as exc:
            # Retrying cannot fix a bad spec: fail at once, before anything is submitted.
            raise AirflowFailException(str(exc)) from None
        if announce and contract is not None:
            self._announce(context, spec)
        return spec, backend, name

    def _contract(self, context: Context) -> TryContract | None:
        """What the try's job is told: its try number, and RESUME_FROM when the last try of the
        round failed in a class the recovery table resumes; None for a job that does not checkpoint."""
        if not self.resumable:
            return None
        last = next(reversed(self._round_attempts(context)), None)
        resume = (
            last is not None and last.failure_class is not None and self._policy.resumes(last.failure_class)
        )
        return TryContract(
            dataset_version=self._dataset_version(), attempt=context["ti"].try_number, resume=resume
        )

    def _announce(self, context: Context, spec: TrainingJobSpec) -> None:
        """Log whether the try resumes the last one's checkpoint or trains from scratch, and why."""
        last = next(reversed(self._round_attempts(context)), None)
        if last is None or last.failure_class is None:
            return
        if "RESUME_FROM" in spec.env:
            self.log.info(
                "Try %d resumes after job %s failed (%s): RESUME_FROM=%s",
                context["ti"].try_number,
                last.job_id,
                last.failure_class.value,
                spec.env["RESUME_FROM"],
            )
        else:
            self.log.warning(
                "Try %d trains from scratch: the recovery table does not resume after %s failures",
                context["ti"].try_number,
                last.failure_class.value,
            )

    def _dataset_version(self) -> str:
        """The version the job trains on, which names its checkpoints: the staged one, else the run
        plan's (a fixed dataset the environment mounts is read at its version too), else the
        mounted PAI dataset's; "unversioned" for a job given none (a backend used on its own). The
        dry run names the plan's version the same way."""
        if self.dataset:
            return validate_record(StagedDataset, self.dataset).version
        if self.planned_dataset:
            return validate_record(DatasetPlan, self.planned_dataset).version
        versions = [mount.dataset_version for mount in self.plan.spec.datasets if mount.dataset_version]
        return versions[0] if versions else "unversioned"

    @property
    def _policy(self) -> FailureClassRetryPolicy:
        policy = self.retry_policy
        return policy if isinstance(policy, FailureClassRetryPolicy) else FailureClassRetryPolicy()

    def _budget(self, spec: TrainingJobSpec, context: Context, handle: JobHandle) -> GpuBudget | None:
        """What the run's max_gpu_hours leaves the job of ``handle``: the limit less every other job
        this task ran, in every round of tries.

        A clear starts a new round but does not give the GPU-hours back: the tries are recorded in
        ``task_state_store``, which a clear keeps, and a job no try watched to its end (a try that
        lost track of it, an earlier round's job stopped by the clear) is recorded when it is next
        seen. The job being watched is left out: the monitor counts it from its start.
        """
        limit = self.plan.max_gpu_hours
        if limit is None:
            return None
        attempts = _stored_attempts(context)
        used = jobs_gpu_hours(((a.job_id, a.gpu_hours) for a in attempts), excluding=handle.job_id)
        self.log.info("GPU-hour budget: %.3f of %g used by earlier jobs of this task", used, limit)
        return GpuBudget(gpus=spec.nodes * spec.gpus_per_node, hours_left=max(limit - used, 0.0))

    def _count_unwatched(
        self, context: Context, spec: TrainingJobSpec, handle: JobHandle, status: JobStatus, try_number: int
    ) -> None:
        """Record a job no try recorded (lost track of, or an earlier round's), for the budget."""
        if any(attempt.job_id == handle.job_id for attempt in _stored_attempts(context)):
            return
        self._record_attempt(
            context,
            Attempt(
                try_number=try_number,
                job_id=handle.job_id,
                status=status.raw,
                decision="not watched to its end by a try; counted for the GPU-hour budget",
                gpu_hours=_gpu_hours(spec, status),
                started=status.started,
                finished=status.finished,
            ),
        )

    # -- the tries of a round --------------------------------------------------------------------

    def _round_attempts(self, context: Context) -> list[Attempt]:
        """The tries of this round recorded so far, oldest first (the store outlives a clear)."""
        first = self._first_try_of_round(context["ti"])
        return [attempt for attempt in _stored_attempts(context) if attempt.try_number >= first]

    def _record_attempt(self, context: Context, attempt: Attempt) -> list[Attempt]:
        """Save this try's attempt (once, whichever path ends it); return the round's tries."""
        kept = [
            a
            for a in _stored_attempts(context)
            if (a.try_number, a.job_id) != (attempt.try_number, attempt.job_id)
        ]
        context["task_state_store"].set(ATTEMPTS_KEY, [a.model_dump(mode="json") for a in [*kept, attempt]])
        return self._round_attempts(context)

    def _fail(
        self,
        context: Context,
        spec: TrainingJobSpec,
        handle: JobHandle,
        status: JobStatus | None,
        failure: Failure,
        message: str,
    ) -> TrainingJobFailed:
        """Record the failed try and build the error the retry policy reads."""
        rule = self._policy.rule(failure.failure_class)
        self._record_attempt(
            context,
            Attempt(
                try_number=context["ti"].try_number,
                job_id=handle.job_id,
                status=status.raw if status else "unknown",
                failure_class=failure.failure_class,
                evidence=failure.evidence,
                decision=rule.describe(),
                gpu_hours=_gpu_hours(spec, status),
                started=status.started if status else None,
                finished=status.finished if status else None,
                resume_from=spec.env.get("RESUME_FROM"),
            ),
        )
        evidence = "".join(f"\n  {line}" for line in failure.evidence)
        return TrainingJobFailed(
            f"{message}\nFailure class: {failure.failure_class.value} -> {rule.describe()}{evidence}", failure
        )

    def _attach_or_submit(
        self, backend: TrainingBackend, spec: TrainingJobSpec, name: str, context: Context
    ) -> JobHandle:
        candidates = [
            ("saved by an earlier try", self._saved_job(backend, spec.owner, context)),
            ("found under the job name", self._found_job(backend, spec, name, context)),
        ]
        for origin, handle in candidates:
            if handle is None:
                continue
            status = self._status_or_none(backend, handle)
            if status is not None and handle.name != name and not status.state.is_terminal:
                # An earlier round's job (the store outlives a clear, the name does not): the clear
                # asked for a new run, and the trigger's on_kill may not have stopped it yet. Stop
                # it here, so two never run at once and this round never watches it end stopped.
                self.log.info(
                    "Job %s is an earlier round's (the task was cleared): stopping it first", handle.job_id
                )
                backend.stop(handle)
                status = backend.status(handle)
            if status is not None and status.state is JobState.STOPPING:
                status = self._wait_until_stopped(backend, handle)
            # Only this round's jobs are reattached: running, or succeeded but never saved.
            reusable = {JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED}
            if status is not None and handle.name == name and status.state in reusable:
                self.log.info("Reattaching to job %s (%s), %s", handle.job_id, origin, status.raw)
                return handle
            if status is not None:
                earlier_round = handle.name != name
                last_try = (
                    self._first_try_of_round(context["ti"]) - 1
                    if earlier_round
                    else context["ti"].try_number - 1
                )
                self._count_unwatched(context, spec, handle, status, last_try)
        try:
            handle = backend.submit(spec, name)
        except SpecError as exc:
            # Backend-specific rules (e.g. the cluster's GPUs per node) are checked before creating.
            raise AirflowFailException(str(exc)) from None
        self.log.info(
            "Submitted job %s (%s, %d node(s)) on backend %s", handle.job_id, name, spec.nodes, backend.name
        )
        return handle

    def _saved_job(
        self, backend: TrainingBackend, owner: JobOwner | None, context: Context
    ) -> JobHandle | None:
        """The job an earlier try saved in ``task_state_store``, when it is this task's (``saved_job``)."""
        return saved_job(backend, owner, context["task_state_store"].get(HANDLE_KEY), self.log)

    def _found_job(
        self, backend: TrainingBackend, spec: TrainingJobSpec, name: str, context: Context
    ) -> JobHandle | None:
        """The job under this round's name, when its owner tags name this task of this installation.

        The name is predictable, so anyone who may create jobs where this one runs could create one
        under it (another deployment of the same DAGs, a person, a squatter): adopting it would
        report someone else's job, and its outputs wherever they point, as this task's. Such a
        job fails the task, naming it; nothing is reattached, replaced or stopped.
        """
        found = backend.find(name, since=_round_lower_bound(context))
        if found is None or same_owner(spec.owner, found.owner):
            return found.handle if found else None
        raise AirflowFailException(
            f"Job {found.handle.job_id} on {backend.name} carries this task's job name {name}, but it was "
            f"not launched by this task: its owner tags name {describe_owner(found.owner)}, not "
            f"{spec.owner}. It was neither reattached to nor replaced. Fix: if it is not yours, find who "
            "created it (another Airflow deployment sharing the workspace or namespace needs its own "
            "[aliyun_training] installation_id) and stop or rename it, then clear this task"
        )

    def _wait_until_stopped(self, backend: TrainingBackend, handle: JobHandle) -> JobStatus:
        """Wait for an earlier job that is still stopping: its GPUs are not free, and reattaching to
        it would only watch it end ``stopped``."""
        self.log.info("Earlier job %s is still stopping: waiting for it before launching", handle.job_id)
        deadline = time.monotonic() + STOPPING_WAIT.total_seconds()
        while (status := backend.status(handle)).state is JobState.STOPPING:
            if time.monotonic() >= deadline:
                raise AirflowException(
                    f"Earlier job {handle.job_id} of this task is still stopping after "
                    f"{STOPPING_WAIT.total_seconds() / 60:.0f} minutes; its machines are not free yet, so "
                    "nothing was launched (a retry waits again; check the job in its platform's console)"
                )
            time.sleep(min(self.poll_interval, 5.0))
        self.log.info("Earlier job %s ended %s", handle.job_id, status.raw)
        return status

    def _first_try_of_round(self, ti: Any) -> int:
        """The try number this round of tries began with: 1, or past the last try after a clear.

        Clearing sets ``max_tries`` to the last try number plus ``retries``; Airflow finds a round's
        first try the same way for sensor reschedules.
        """
        return ti.max_tries - (self.retries or 0) + 1

    def _status_or_none(self, backend: TrainingBackend, handle: JobHandle) -> JobStatus | None:
        try:
            return backend.status(handle)
        except (LookupError, FileNotFoundError) as exc:
            self.log.info("Earlier job %s is gone (%s); a new one will be submitted", handle.job_id, exc)
            return None

    def _remaining(self, spec: TrainingJobSpec, status: JobStatus) -> timedelta:
        """Time left of the spec's timeout, counted from when the job started (across retries)."""
        started = datetime.fromisoformat(status.started) if status.started else datetime.now(UTC)
        return timedelta(minutes=spec.timeout_minutes) - (datetime.now(UTC) - started)

    def _wait_blocking(
        self,
        context: Context,
        spec: TrainingJobSpec,
        backend: TrainingBackend,
        monitor: JobMonitor,
        remaining: timedelta,
    ) -> dict[str, Any]:
        self._waiting_for = monitor.handle
        deadline = time.monotonic() + remaining.total_seconds()
        while True:
            time.sleep(self.poll_interval)
            status = monitor.poll()
            given_up = monitor.give_up(status)
            if given_up is not None:
                backend.stop(monitor.handle)
                return self._finish(context, spec, backend, given_up)
            if status.state.is_terminal:
                return self._finish(context, spec, backend, monitor.outcome(status))
            if time.monotonic() >= deadline:
                self._stop_after_timeout(context, backend, monitor.handle, spec)

    def _stop_after_timeout(
        self, context: Context, backend: TrainingBackend, handle: JobHandle, spec: TrainingJobSpec
    ) -> None:
        """Stop the job; the error says where it was stuck (a job pending for ever names the cause).

        A job that never started running had no room (``capacity``); one that ran past its time
        is taken for hung (``infrastructure``): both retry, the second resuming.
        """
        self.log.error("Job %s exceeded timeout_minutes=%d: stopping it", handle.job_id, spec.timeout_minutes)
        last = backend.status(handle)
        evidence = [f"last status: {last.raw}" + (f" ({last.reason})" if last.reason else "")]
        evidence += backend.failure_details(handle)
        backend.stop(handle)
        never_ran = last.state is JobState.PENDING
        where = "pending" if never_ran else "still running"
        failure_class = FailureClass.CAPACITY if never_ran else FailureClass.INFRASTRUCTURE
        if never_ran:
            # Pods that wait on an image that cannot be pulled, or on a volume, wait for good.
            found = backend.classify(last, evidence[1:], []).failure_class
            failure_class = found if found in STUCK_FOR_GOOD else failure_class
        failure = Failure(
            failure_class=failure_class,
            evidence=[f"{where} after timeout_minutes={spec.timeout_minutes}", *evidence],
        )
        raise self._fail(
            context,
            spec,
            handle,
            last,
            failure,
            f"Training job {handle.job_id} did not finish within timeout_minutes={spec.timeout_minutes} "
            "and was stopped; raise timeout_minutes or shorten the run",
        )

    def _finish(
        self, context: Context, spec: TrainingJobSpec, backend: TrainingBackend, outcome: JobOutcome
    ) -> dict[str, Any]:
        handle, status = outcome.handle, outcome.job_status
        if outcome.live is not None:
            keep_announced(context, outcome.live.sent)
        if outcome.status is OutcomeStatus.ERROR or status is None:
            try:
                last_seen = status or backend.status(handle)
            except Exception as exc:  # the platform that lost the job may not answer: the next try counts it
                self.log.warning("Job %s cannot be read to count its GPU-hours now: %s", handle.job_id, exc)
            else:
                self._count_unwatched(context, spec, handle, last_seen, context["ti"].try_number)
            raise AirflowException(f"Lost track of job {handle.job_id}: {outcome.message}")
        if outcome.status is OutcomeStatus.FAILED:
            failure = outcome.failure or backend.classify(status, outcome.details, outcome.tail)
            tail = "\n".join(f"    {line}" for line in outcome.tail)
            details = "".join(f"\n  {line}" for line in outcome.details)
            raise self._fail(
                context,
                spec,
                handle,
                status,
                failure,
                f"Training job {handle.job_id} failed: {status.reason}.{details}\n"
                f"Last log lines of node {outcome.failed_node}:\n{tail}",
            )
        if outcome.status is not OutcomeStatus.SUCCEEDED:
            # Stopped from outside this task (the console, arena delete): someone meant it; a retry
            # would launch it again behind their back.
            raise AirflowFailException(
                f"Training job {handle.job_id} ended {status.raw}: {status.reason}. It was stopped outside "
                "this task, so it is not retried; clear the task to run it again"
            )
        result = self._result(spec, backend, handle, status, outcome.waited_because)
        result = result.model_copy(update=outcome_fields(result, outcome.live, self._price))
        attempts = self._record_attempt(
            context,
            Attempt(
                try_number=context["ti"].try_number,
                job_id=handle.job_id,
                status=status.raw,
                decision="succeeded",
                gpu_hours=result.gpu_hours,
                started=status.started,
                finished=status.finished,
                resume_from=spec.env.get("RESUME_FROM"),
            ),
        )
        return result.model_copy(update={"attempts": attempts}).model_dump(mode="json")

    def _result(
        self,
        spec: TrainingJobSpec,
        backend: TrainingBackend,
        handle: JobHandle,
        status: JobStatus,
        waited_because: str = "",
    ) -> JobResult:
        wall = 0.0
        phase_seconds: dict[str, float] = {}
        for item in status.history:
            if item.get("seconds") is not None:
                phase_seconds[item["phase"]] = round(
                    phase_seconds.get(item["phase"], 0.0) + item["seconds"], 3
                )
        if status.started and status.finished:
            wall = (
                datetime.fromisoformat(status.finished) - datetime.fromisoformat(status.started)
            ).total_seconds()
        return JobResult(
            backend=spec.backend,
            job_id=handle.job_id,
            display_name=handle.name,
            status=status.raw,
            reason=status.reason,
            started=status.started,
            finished=status.finished,
            wall_seconds=round(wall, 3),
            node_hours=round(spec.nodes * wall / 3600, 6),
            gpu_hours=round(spec.nodes * spec.gpus_per_node * wall / 3600, 6),
            console_url=backend.console_url(handle),
            output_uri=mounted_output_uri(
                backend.output_uri(handle), self.plan.output_root, self.plan.output_uri
            ),
            status_history=status.history,
            phase_seconds=phase_seconds,
            waited_because=waited_because,
        )


def stop_saved_job(context: Context) -> None:
    """``on_failure_callback``: stop the job the failed task saved, unless it already ended.

    A try that fails while its job still runs (the trigger lost track, the worker's error after the
    job started) would otherwise leave it holding GPUs once no retry is left to reattach to it.
    """
    operator = context["task"]
    stored = context["task_state_store"].get(HANDLE_KEY)
    if not stored or not isinstance(operator, TrainingJobOperator):
        return
    try:
        backend = operator._backend(operator.plan.spec.backend)
    except SpecError:  # the task failed before its plan was read (a refused record): it ran no job
        return
    handle = saved_job(backend, task_owner(context["ti"], installation_id()), stored, operator.log)
    if handle is None:
        return
    try:
        state = backend.status(handle).state
    except (LookupError, FileNotFoundError):
        return
    if not state.is_terminal:
        operator.log.warning("Task failed with job %s still %s: stopping it", handle.job_id, state.value)
        backend.stop(handle)


def saved_job(backend: TrainingBackend, owner: JobOwner | None, stored: Any, log: Any) -> JobHandle | None:
    """The job handle ``stored`` in ``task_state_store``, when the job it names is ``owner``'s task's.

    The store is evidence, not authority: a user who may edit task instances may write any handle
    there through the REST API, another installation's job id included. So a saved handle is used
    (reattached to, counted, stopped) only when the platform lists a job of that id under its name
    whose own owner tags name this task instance of this installation: the rule for a job found by
    name (``_found_job``). Any other handle is ignored, with a warning, and its job left alone.
    """
    if not stored:
        return None
    try:
        handle = JobHandle.model_validate(stored)
    except ValueError:
        log.warning("The saved job handle is not one (%r): ignored", stored)
        return None
    found = backend.find(handle.name) if handle.backend == backend.name else None
    if found is not None and found.handle.job_id == handle.job_id and same_owner(owner, found.owner):
        return handle
    log.warning(
        "The saved job handle names job %s (%s on %s), which is not this task's: %s. It is left alone "
        "(neither reattached to nor stopped)",
        handle.job_id,
        handle.name,
        handle.backend,
        "no such job is listed under that name"
        if found is None or found.handle.job_id != handle.job_id
        else f"its owner tags name {describe_owner(found.owner)}",
    )
    return None


def _stored_attempts(context: Context) -> list[Attempt]:
    stored = context["task_state_store"].get(ATTEMPTS_KEY)
    return [Attempt.model_validate(item) for item in stored] if isinstance(stored, list) else []


def _callbacks(given: Any) -> list[Any]:
    if given is None:
        return []
    return list(given) if isinstance(given, list | tuple) else [given]


def _gpu_hours(spec: TrainingJobSpec, status: JobStatus | None) -> float:
    """GPU-hours a job held from its start until its end (or now, for one that was stopped)."""
    if status is None:
        return 0.0
    return round(spec.nodes * spec.gpus_per_node * status.held_seconds(datetime.now(UTC)) / 3600, 6)


def image_reference(image: str | dict[str, Any]) -> str:
    """The image to run, by digest when the image stage knows it: a tag can be pushed again (a forced
    rebuild) between verifying the image and running it; a digest cannot."""
    if isinstance(image, str):
        return image
    uri, digest = image["uri"], image.get("digest") or ""
    if not digest.startswith("sha256:") or "@" in uri:
        return uri
    repository, _, tag = uri.rpartition(":")
    return f"{repository}@{digest}" if repository and "/" not in tag else uri


def _round_lower_bound(context: Context) -> datetime | None:
    """A time no job of this task's round can predate: its DAG run's start, less clock skew.

    Jobs are launched by tries of a running DAG run; clearing a task starts a new round (a new job
    name) and restarts the run, so nothing under the round's name was created before the run's
    ``start_date``. None where the context has no DAG run (the backend then uses its own horizon).
    """
    started = getattr(context.get("dag_run"), "start_date", None)
    return started - CLOCK_SKEW if started else None
