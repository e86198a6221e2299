"""Preflight as parallel checks plus one report: every check runs, then every finding is shown at once.

Each ``PreflightCheckOperator`` runs one group of checks that applies to the run's backend and
returns its findings without failing, so a mistake in one group never hides the others; a group
that does not apply to the backend, or every group when the run asks to skip preflight, ends
skipped with the reason. The ``PreflightReportOperator`` (trigger rule all_done) gathers them, logs
one report with a fix for every finding and the reason of every skipped group, fails the run if
anything failed (or no check ran because an upstream task failed), and returns the report as XCom
for the run report.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseOperator, TaskInstanceState
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from aliyun_training.backend_catalog import BACKENDS, backend_record, preflight_groups
from aliyun_training.backends import get_backend
from aliyun_training.findings import Finding, NotApplicable, PreflightReport, Verdict
from aliyun_training.plan.models import JobPlan, PreflightPlan
from aliyun_training.upstream import Returned, ReturnedRecordsMixin, read_returned
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from airflow.sdk import Context

    from aliyun_training.backends.dlc.backend import DlcBackend
    from aliyun_training.spec import TrainingJobSpec

#: Check groups: every group some backend's record lists (each backend runs its own).
CHECK_GROUPS: tuple[str, ...] = preflight_groups()
#: XCom key of a skipped check's reason: the report shows it, and an exception's message reaches
#: only the check's own log.
SKIP_REASON_KEY = "skip_reason"


class PreflightCheckOperator(ReturnedRecordsMixin, BaseOperator):
    """Run one group of preflight checks for the run's backend; return findings, never fail on them.

    :param group: one of ``CHECK_GROUPS``.
    :param job: the run plan's ``JobPlan`` (or its dict form, or an XComArg of it; templated).
    :param preflight: the run plan's ``PreflightPlan`` (templated): lingjun_regions, zone_id,
        role_name, policy_file, source_uri and target_root (local disk check).
    :param skip: skip the checks (templated, e.g. from a ``skip_preflight`` param); logs a warning.

    A group that does not apply to the run's backend, or is skipped on request, raises
    ``AirflowSkipException`` with the reason (pushed as XCom ``skip_reason`` for the report).
    """

    template_fields = ("job", "preflight", "skip")

    def __init__(
        self,
        *,
        group: str,
        job: JobPlan | dict[str, Any],
        preflight: PreflightPlan | dict[str, Any] | None = None,
        skip: Any = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if group not in CHECK_GROUPS:
            raise ValueError(f"group must be one of {list(CHECK_GROUPS)}, not {group!r}")
        self.group = group
        self.job = job.model_dump(mode="json") if isinstance(job, JobPlan) else job
        self.preflight = (
            preflight.model_dump(mode="json") if isinstance(preflight, PreflightPlan) else preflight or {}
        )
        self.skip = skip

    def execute(self, context: Context) -> list[dict[str, Any]]:
        job = validate_record(JobPlan, self.job)
        spec = job.spec
        if str(self.skip).lower() in ("true", "1"):
            self.log.warning(
                "!!! PREFLIGHT SKIPPED (skip_preflight) — %s checks were NOT run; a broken network, quota "
                "or permission will surface only after the job has queued or failed !!!",
                self.group,
            )
            self._skip(
                context, f"skipped on request: the run sets skip_preflight, so no {self.group} check ran"
            )
        if self.group not in backend_record(spec.backend).preflight_groups:
            applies_to = " and ".join(r.name.value for r in BACKENDS if self.group in r.preflight_groups)
            self._skip(
                context,
                f"{self.group} checks apply to the {applies_to} backend; this run uses {spec.backend.value}",
            )
        findings = group_findings(self.group, job, self.preflight)
        self.log.info("%s", group_table(self.group, findings))
        return [finding.model_dump(mode="json") for finding in findings]

    def _skip(self, context: Context, reason: str) -> NoReturn:
        """End the task skipped (not green: nothing was checked), leaving the reason for the report."""
        context["ti"].xcom_push(key=SKIP_REASON_KEY, value=reason)
        self.log.info("Not run: %s", reason)
        raise AirflowSkipException(reason)


def group_findings(group: str, job: JobPlan, preflight: PreflightPlan | dict[str, Any]) -> list[Finding]:
    """The findings of one check group for the run's job: what the group's task returns, and what a
    dry run from the command line reports without a task around it."""
    spec, backend_config = job.spec, job.backend_config
    settings = validate_record(PreflightPlan, preflight).model_dump()
    if group == "machine":
        return _machine(spec, backend_config, settings)
    backend = get_backend(spec.backend, backend_config)
    if group == "cluster":
        from aliyun_training.preflight.ack import check_dataset_pvcs

        # Only the ACK backend's record lists "cluster", only DLC's "quota".
        return _guard("pvc", lambda: check_dataset_pvcs(backend, spec))  # type: ignore[arg-type]
    if group == "network":
        return _network(backend, spec, settings)
    if group == "quota":
        return _quota(backend, spec)  # type: ignore[arg-type]
    return _permissions(backend, settings)


def group_table(group: str, findings: list[Finding]) -> str:
    """One group's findings as its task logs them and the command line prints them."""
    return f"Preflight {group}:\n{PreflightReport(findings=findings).render()}"


class PreflightReportOperator(ReturnedRecordsMixin, BaseOperator):
    """Gather every check group's findings into one report; fail with it when anything failed.

    A dry run's report returns its failures instead: ``show_plan`` puts them beside the plan, which
    is what a dry run is for (the CLI's ``plan`` shows both too), then fails the run with them.

    A group that skipped itself (not for this backend, or skip_preflight) is listed as not applicable
    with its reason, never as a failure. Checks that never ran because a task before them failed
    (``configure``) fail the report naming that task; checks skipped because a task before them was
    skipped (a dataset version that did not land) skip it, so nothing after preflight runs unchecked.
    """

    template_fields = ("shows_plan",)

    def __init__(self, *, check_task_ids: Sequence[str], shows_plan: Any = False, **kwargs: Any) -> None:
        """:param shows_plan: whether the run is a dry run, which shows its plan whatever the checks
        found (a ``Returned`` plan part, or a bool)."""
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.check_task_ids = list(check_task_ids)
        self.shows_plan = shows_plan

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        upstream = sorted(self.get_flat_relative_ids(upstream=True))
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=upstream, run_ids=[ti.run_id]).get(
            ti.run_id, {}
        )
        reasons = {
            task_id: ti.xcom_pull(task_ids=task_id, key=SKIP_REASON_KEY)
            for task_id in self.check_task_ids
            if states.get(task_id) == TaskInstanceState.SKIPPED
        }
        if failed_before := [
            t for t in self.check_task_ids if states.get(t) == TaskInstanceState.UPSTREAM_FAILED
        ]:
            raise AirflowFailException(self._never_ran(failed_before, states, TaskInstanceState.FAILED))
        if skipped_before := [t for t, reason in reasons.items() if reason is None]:
            raise AirflowSkipException(self._never_ran(skipped_before, states, TaskInstanceState.SKIPPED))
        findings: list[Finding] = []
        for task_id in self.check_task_ids:
            if task_id in reasons:
                continue
            # A check's findings are sealed like every record: rewritten to PASS, they fail the report.
            found = read_returned(ti, Returned(task_id), ran=states.get(task_id) == TaskInstanceState.SUCCESS)
            if found is None:
                findings.append(
                    Finding(
                        check=task_id,
                        verdict=Verdict.FAIL,
                        found=f"the {task_id} checks did not finish",
                        fix=f"read the log of task {task_id}",
                    )
                )
            findings.extend(Finding.model_validate(f) for f in found or [])
        report = PreflightReport(
            findings=findings,
            not_applicable=[
                NotApplicable(check=task_id, reason=reason) for task_id, reason in reasons.items()
            ],
        )
        if report.failed and self.shows_plan is True:
            self.log.warning("Preflight failed; show_plan shows the plan beside it:\n%s", report.render())
        elif report.failed:
            # The task log shows the failure's message: the table is in it, and logged only there.
            raise AirflowFailException(
                f"Preflight failed; fix every FAIL below and rerun:\n{report.render()}"
            )
        self.log.info("Preflight report:\n%s", report.render())
        return report.model_dump(mode="json")

    def _never_ran(self, blocked: list[str], states: dict[str, str], cause: TaskInstanceState) -> str:
        """Why checks have nothing to report, logged: the tasks before them that ended ``cause``."""
        causes = (
            ", ".join(
                t for t, state in sorted(states.items()) if state == cause and t not in self.check_task_ids
            )
            or "a task before them"
        )
        which = (
            "No preflight check ran"
            if len(blocked) == len(self.check_task_ids)
            else f"The checks {', '.join(blocked)} did not run"
        )
        message = (
            f"{which} because {causes} failed: read the log of {causes} for the error, fix what it names "
            "and trigger the run again"
            if cause is TaskInstanceState.FAILED
            else f"{which} because {causes} was skipped (its log says why): nothing after preflight runs"
        )
        self.log.warning("%s", message)
        return message


def _guard(name: str, checks: Callable[[], list[Finding]]) -> list[Finding]:
    """A check that cannot run (bad input, an API error) is a failing finding, not a crash."""
    from aliyun_training.hooks.alibaba_cloud import AlibabaCloudConnectionError
    from aliyun_training.hooks.kubernetes import KubernetesConnectionError
    from aliyun_training.hooks.retry import AlibabaCloudApiError

    try:
        return checks()
    except (SpecError, AlibabaCloudConnectionError, KubernetesConnectionError, AlibabaCloudApiError) as exc:
        return [Finding.failed_with(name, exc, "see the message")]


def _machine(
    spec: TrainingJobSpec, backend_config: dict[str, Any], settings: dict[str, Any]
) -> list[Finding]:
    from aliyun_training.preflight import local

    return [
        *_guard("cpus", lambda: [local.check_processors(spec)]),
        *_guard("gpus", lambda: [local.check_gpus(spec)]),
        *_guard("disk", lambda: [local.check_disk(settings["source_uri"], settings["target_root"])]),
        *_guard("master_port", lambda: [local.check_master_port(backend_config.get("master_port"))]),
    ]


def _quota(backend: DlcBackend, spec: TrainingJobSpec) -> list[Finding]:
    """The quota the DLC backend's job settings name, asked of PAI Studio."""
    from aliyun_training.hooks.alibaba_cloud import shared_hook
    from aliyun_training.hooks.paistudio import PaiStudioHook
    from aliyun_training.preflight.quota import check_quota

    studio = shared_hook(PaiStudioHook, backend.alibaba_cloud_conn_id, backend.region)
    return _guard("quota", lambda: check_quota(studio, spec, backend.job_settings))


def _network(backend: Any, spec: TrainingJobSpec, settings: dict[str, Any]) -> list[Finding]:
    from aliyun_training.backends.dlc.request import ResourceType
    from aliyun_training.hooks.alibaba_cloud import shared_hook
    from aliyun_training.hooks.ecs import EcsHook
    from aliyun_training.hooks.vpc import VpcHook
    from aliyun_training.preflight.network import NetworkSettings, check_network, check_region

    vpc_hook = shared_hook(VpcHook, backend.alibaba_cloud_conn_id, backend.region)
    ecs_hook = shared_hook(EcsHook, backend.alibaba_cloud_conn_id, backend.region)
    lingjun = backend.job_settings.resource_type is ResourceType.LINGJUN
    findings = _guard(
        "region", lambda: [check_region(vpc_hook.region, lingjun, settings.get("lingjun_regions") or [])]
    )
    vpc = backend.vpc
    if not vpc:
        return [
            *findings,
            Finding(
                check="vpc",
                verdict=Verdict.FAIL if lingjun else Verdict.WARN,
                found="no VPC configured for the job",
                fix="set vpc (vpc_id, switch_id, security_group_id) in include/config/dlc.json",
            ),
        ]
    network = NetworkSettings(
        vpc_id=vpc["vpc_id"],
        switch_id=vpc["switch_id"],
        security_group_id=vpc["security_group_id"],
        zone_id=settings.get("zone_id"),
    )
    from aliyun_training.backends.dlc.request import roles

    pods = sum(count for _role, count, _gpus in roles(spec))
    return [*findings, *_guard("network", lambda: check_network(vpc_hook, ecs_hook, network, pods))]


def _permissions(backend: Any, settings: dict[str, Any]) -> list[Finding]:
    from aliyun_training.hooks.alibaba_cloud import shared_hook
    from aliyun_training.hooks.ram import RamHook
    from aliyun_training.preflight.dlc import check_dlc_access
    from aliyun_training.preflight.permissions import check_role_permissions, required_actions

    findings = _guard("dlc_access", lambda: [check_dlc_access(backend)])
    role = settings.get("role_name")
    if not role:
        return [
            *findings,
            Finding(
                check="ram_role",
                verdict=Verdict.WARN,
                found="no job RAM role configured; its permissions were not checked",
                fix="set role_name in include/config/dlc.json to the role DLC jobs run as",
            ),
        ]
    required = required_actions(Path(settings["policy_file"]))
    ram = shared_hook(RamHook, backend.alibaba_cloud_conn_id, backend.region)
    return [*findings, *_guard("ram_role", lambda: [check_role_permissions(ram, role, required)])]
