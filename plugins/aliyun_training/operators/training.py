"""Submit a distributed training job and wait for it without holding a worker slot.

Crash safety: the job gets a deterministic name from (dag_id, run_id, task_id, map_index) and the
round of tries (clearing the task starts a new one). Before launching, the operator reattaches to
the job an earlier try of the round saved in ``task_state_store``, or to one found under the name
(a worker that died between submitting and saving), so a job is never launched twice. Only a job
that failed or was stopped is launched again on retry; a cleared task launches a new one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.backends import get_backend
from aliyun_training.backends.base import JobHandle, JobState, JobStatus, TrainingBackend
from aliyun_training.kubernetes.names import job_name
from aliyun_training.links import TrainingJobConsoleLink
from aliyun_training.monitor import JobMonitor, JobOutcome
from aliyun_training.operators.deferral import DeferralMixin
from aliyun_training.plan.models import JobPlan
from aliyun_training.records import JobResult, OutcomeStatus, StagedDataset, mount_staged
from aliyun_training.settings import local_paths
from aliyun_training.spec import TrainingJobSpec, mounted_output_uri
from aliyun_training.triggers.training import TrainingJobTrigger
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context

#: task_state_store key of the job handle; renaming it breaks reattachment of in-flight retries.
HANDLE_KEY = "training_job_handle"
#: Slack between our clock and the platform's when searching jobs by creation time.
CLOCK_SKEW = timedelta(hours=1)


class TrainingJobOperator(DeferralMixin, BaseOperator):
    """Run the plan's job on its backend; return a ``JobResult`` (as a dict) when the job succeeds.

    :param job: the run plan's ``JobPlan`` (or its dict form, or an XComArg of it; templated): the
        spec, the backend's settings and where the job writes. A job whose spec has no
        ``output_dir`` writes to ``<output_root>/<job name>`` (the local root's ``outputs/`` when
        ``output_root`` is unset); with ``output_uri`` mounted there, the result's ``output_uri``
        names the job's outputs in OSS, where they outlive the nodes.
    :param dataset: the staging task's StagedDataset (templated): the job reads that version, mounted
        at the plan's ``dataset_mount_path`` when it was registered for the backend.
    :param image: the image stage's record (an ``ImageRef`` or ``BuiltImage``) or an image reference
        (templated): the job runs in it instead of the spec's image.
    :param deferrable: wait in the triggerer (default) instead of blocking a worker slot.
    :param poll_interval: seconds between status polls.
    """

    template_fields: Sequence[str] = ("job", "dataset", "image")
    ui_color = "#ff6a00"
    operator_extra_links = (TrainingJobConsoleLink(),)

    def __init__(
        self,
        *,
        job: JobPlan | dict[str, Any],
        dataset: Any = None,
        image: Any = None,
        deferrable: bool = True,
        poll_interval: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job.model_dump(mode="json") if isinstance(job, JobPlan) else job
        self.dataset = dataset
        self.image = image
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self._waiting_for: JobHandle | None = None

    @property
    def plan(self) -> JobPlan:
        """The job's part of the run plan, once templates are rendered."""
        return validate_record(JobPlan, self.job)

    def _backend(self, name: str) -> TrainingBackend:
        return get_backend(name, self.plan.backend_config)

    # -- entry points ----------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        spec, backend, name = self._prepare(context)
        handle = self._attach_or_submit(backend, spec, name, context)
        context["task_state_store"].set(HANDLE_KEY, handle.model_dump())
        TrainingJobConsoleLink().persist(context, backend.console_url(handle))
        monitor = JobMonitor(backend, handle, self.log)
        status = monitor.poll()
        remaining = self._remaining(spec, status)
        if not status.state.is_terminal and remaining.total_seconds() <= 0:
            self._stop_after_timeout(backend, handle, spec)
        if status.state.is_terminal:
            return self._finish(spec, backend, monitor.outcome(status))
        if self.deferrable:
            trigger = TrainingJobTrigger(
                backend=backend.name,
                handle=handle.model_dump(),
                backend_config=backend.config,
                poll_interval=self.poll_interval,
                log_cursor=monitor.cursor,
                last_raw_status=monitor.last_raw_status,
            )
            self.defer_until_done(trigger, remaining)
        return self._wait_blocking(spec, backend, monitor, remaining)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: turn its event into a result or a precise error."""
        spec = self._spec()
        return self._finish(spec, self._backend(spec.backend), JobOutcome.model_validate(event))

    def stop_after_deferral_timeout(self, context: Context) -> None:
        """Stop the job of the saved handle, failing with where it was stuck."""
        stored = context["task_state_store"].get(HANDLE_KEY)
        if stored:
            spec = self._spec()
            self._stop_after_timeout(self._backend(spec.backend), JobHandle.model_validate(stored), spec)

    def on_kill(self) -> None:
        """Blocking mode: the task was killed on the worker, so stop the job it is waiting for."""
        handle = self._waiting_for
        if handle is not None:
            self.log.info("Task killed: stopping job %s", handle.job_id)
            self._backend(handle.backend).stop(handle)

    # -- steps -----------------------------------------------------------------------------------

    def _spec(self) -> TrainingJobSpec:
        plan = self.plan
        spec = plan.spec
        if self.dataset:
            spec = mount_staged(spec, validate_record(StagedDataset, self.dataset), plan.dataset_mount_path)
        if self.image:
            spec = spec.model_copy(update={"image": _image_reference(self.image)})
        return spec

    def _prepare(self, context: Context) -> tuple[TrainingJobSpec, TrainingBackend, str]:
        ti = context["ti"]
        name = job_name(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, self._first_try_of_round(ti))
        try:
            spec = self._spec()
            if spec.output_dir is None:
                output_root = self.plan.output_root or str(local_paths().outputs)
                spec = spec.model_copy(update={"output_dir": f"{output_root.rstrip('/')}/{name}"})
            backend = self._backend(spec.backend)
        except SpecError as exc:
            # Retrying cannot fix a bad spec: fail at once, before anything is submitted.
            raise AirflowFailException(str(exc)) from None
        return spec, backend, name

    def _attach_or_submit(
        self, backend: TrainingBackend, spec: TrainingJobSpec, name: str, context: Context
    ) -> JobHandle:
        stored = context["task_state_store"].get(HANDLE_KEY)
        candidates = [
            ("saved by an earlier try", JobHandle.model_validate(stored) if stored else None),
            ("found under the job name", backend.find(name, since=_round_lower_bound(context))),
        ]
        for origin, handle in candidates:
            if handle is None:
                continue
            status = self._status_or_none(backend, handle)
            # A job that still runs is reattached whichever round launched it, so two never run at
            # once; a succeeded one only if this round did (the store outlives a clear, the name not).
            reusable = {JobState.PENDING, JobState.RUNNING}
            if handle.name == name:
                reusable.add(JobState.SUCCEEDED)
            if status is not None and status.state in reusable:
                self.log.info("Reattaching to job %s (%s), %s", handle.job_id, origin, status.raw)
                return handle
        try:
            handle = backend.submit(spec, name)
        except SpecError as exc:
            # Backend-specific rules (e.g. the cluster's GPUs per node) are checked before creating.
            raise AirflowFailException(str(exc)) from None
        self.log.info(
            "Submitted job %s (%s, %d node(s)) on backend %s", handle.job_id, name, spec.nodes, backend.name
        )
        return handle

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
        self, spec: TrainingJobSpec, backend: TrainingBackend, monitor: JobMonitor, remaining: timedelta
    ) -> dict[str, Any]:
        self._waiting_for = monitor.handle
        deadline = time.monotonic() + remaining.total_seconds()
        while True:
            time.sleep(self.poll_interval)
            status = monitor.poll()
            if status.state.is_terminal:
                return self._finish(spec, backend, monitor.outcome(status))
            if time.monotonic() >= deadline:
                self._stop_after_timeout(backend, monitor.handle, spec)

    def _stop_after_timeout(self, backend: TrainingBackend, handle: JobHandle, spec: TrainingJobSpec) -> None:
        """Stop the job; the error says where it was stuck (a job pending for ever names the cause)."""
        self.log.error("Job %s exceeded timeout_minutes=%d: stopping it", handle.job_id, spec.timeout_minutes)
        last = backend.status(handle)
        evidence = [f"last status: {last.raw}" + (f" ({last.reason})" if last.reason else "")]
        evidence += backend.failure_details(handle)
        backend.stop(handle)
        details = "".join(f"\n  {line}" for line in evidence)
        raise AirflowException(
            f"Training job {handle.job_id} did not finish within timeout_minutes={spec.timeout_minutes} "
            f"and was stopped; raise timeout_minutes or shorten the run{details}"
        )

    def _finish(self, spec: TrainingJobSpec, backend: TrainingBackend, outcome: JobOutcome) -> dict[str, Any]:
        handle, status = outcome.handle, outcome.job_status
        if outcome.status is OutcomeStatus.ERROR or status is None:
            raise AirflowException(f"Lost track of job {handle.job_id}: {outcome.message}")
        if outcome.status is OutcomeStatus.FAILED:
            tail = "\n".join(f"    {line}" for line in outcome.tail)
            details = "".join(f"\n  {line}" for line in outcome.details)
            raise AirflowException(
                f"Training job {handle.job_id} failed: {status.reason}.{details}\n"
                f"Last log lines of node {outcome.failed_node}:\n{tail}"
            )
        if outcome.status is not OutcomeStatus.SUCCEEDED:
            raise AirflowException(f"Training job {handle.job_id} ended {status.raw}: {status.reason}")
        return self._result(spec, backend, handle, status).model_dump(mode="json")

    def _result(
        self, spec: TrainingJobSpec, backend: TrainingBackend, handle: JobHandle, status: JobStatus
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
        )


def _image_reference(image: str | dict[str, Any]) -> str:
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
