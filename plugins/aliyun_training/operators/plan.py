"""The run plan in a task: ``configure``'s body, and a dry run's plan written as plan.json and plan.html."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.findings import PreflightReport
from aliyun_training.kubernetes.names import job_name
from aliyun_training.links import RunPlanLink
from aliyun_training.plan.models import RunPlan
from aliyun_training.upstream import Returned, ReturnedRecordsMixin, read_returned
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from datetime import datetime
    from pathlib import Path

    from airflow.sdk import Context

    from aliyun_training.declaration import PipelineDeclaration


class RunPlanOperator(ReturnedRecordsMixin, BaseOperator):
    """Render the run's plan with the preflight report; nothing is created, copied or submitted.

    The document (see ``aliyun_training.plan.dry_run``) is returned as XCom and written under the
    local root's ``dry-runs/<model>/<run id>/`` as ``plan.json`` and ``plan.html``, which the task's
    "Run plan" link opens. Unless preflight was skipped, it also asks the platform the read-only
    questions of a dry run: what staging would copy, whether the image exists.

    :param plan: ``configure``'s whole output, the ``RunPlan`` (templated).
    :param report_task_id: the preflight report task whose findings the document includes; a dry
        run's report holds its failures, and the task fails with them once the plan is written.
    """

    template_fields = ("plan",)
    ui_color = "#e1bee7"
    operator_extra_links = (RunPlanLink(),)

    def __init__(self, *, plan: Any, report_task_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.report_task_id = report_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from aliyun_training.plan.dry_run import dry_run_document
        from aliyun_training.plan.render_html import render_html
        from aliyun_training.settings import local_paths

        plan = validate_record(RunPlan, self.plan)
        ti = context["ti"]
        report = read_returned(ti, Returned(self.report_task_id)) if self.report_task_id else None
        document = dry_run_document(
            plan,
            lambda task_id: job_name(ti.dag_id, ti.run_id, task_id, installation=plan.installation),
            preflight=report,
            check_platform=not plan.skip_preflight,
        )
        folder = (
            local_paths().root
            / "dry-runs"
            / plan.artifacts.model
            / re.sub(r"[^A-Za-z0-9._-]", "_", ti.run_id)
        )
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "plan.json").write_text(json.dumps(document, indent=2, sort_keys=True, default=str))
        (folder / "plan.html").write_text(render_html(document))
        RunPlanLink().persist(context, str(folder / "plan.html"))
        self.log.info(
            "Dry run: %d requests, at most %s GPU-hours; nothing was created, copied, built or submitted. "
            "Plan: %s",
            len(document["requests"]),
            document["gpu_hour_ceiling"],
            folder / "plan.json",
        )
        for request in document["requests"]:
            self.log.info("  %s: %s %s", request["task"], request["service"], request["action"])
        if report is not None and (checked := PreflightReport.model_validate(report)).failed:
            # The plan is written and linked; the run still fails, as the checks did.
            raise AirflowFailException(
                f"Preflight failed; the plan is beside its failures in {folder / 'plan.html'} (this task's "
                f"Run plan link). Fix every FAIL below and run again:\n{checked.render()}"
            )
        return document


def plan_for_task(
    params: dict[str, Any],
    run_date: datetime,
    scheduled: bool,
    declaration: PipelineDeclaration,
    default_environment_dir: Path,
) -> dict[str, Any]:
    """``configure``'s body: the run's plan as JSON for XCom; a bad value fails the task at once."""
    from pydantic import ValidationError

    from aliyun_training.installation import installation_id, plain_registry_aliases
    from aliyun_training.plan.inputs import RunContext
    from aliyun_training.plan.resolve import resolve_run
    from aliyun_training.settings import environment_directory, local_paths

    try:
        plan = resolve_run(
            dict(params),
            RunContext(
                run_date, installation_id(), scheduled, plain_registry_aliases=plain_registry_aliases()
            ),
            declaration,
            local_paths(),
            environment_directory(default_environment_dir),
        )
    except SpecError as exc:
        # A bad setting stays bad on retry: fail at once, naming the field and the fix.
        raise AirflowFailException(str(exc)) from None
    except ValidationError as exc:
        # A model the plan is built of refused a value no check before it caught: as bad on retry.
        raise AirflowFailException(f"The run's plan is invalid: {exc}") from None
    return plan.model_dump(mode="json")
