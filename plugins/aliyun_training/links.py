"""Links shown on the tasks in the Airflow UI: the job's console, the dry run's plan, the run report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class _StoredUrlLink(BaseOperatorLink):
    """A link whose URL the task stored in an XCom of ``xcom_key`` as soon as it knew it.

    A task that has no URL (a local job has no console) stores an empty one, so resolving links
    after the task finds a value instead of logging a missing XCom.
    """

    key: str = ""

    @property
    def xcom_key(self) -> str:
        return self.key

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

    def persist(self, context: Any, url: str | None) -> None:
        """Store the URL where the UI reads it, as soon as it exists (not only on success)."""
        context["ti"].xcom_push(key=self.xcom_key, value=url or "")


class TrainingJobConsoleLink(_StoredUrlLink):
    """The job's page in its platform's console (PAI-DLC); empty for jobs without one (local)."""

    name = "Training job console"
    key = "training_job_console_url"


class RunPlanLink(_StoredUrlLink):
    """The dry run's readable plan (``plan.html``) that the show_plan task wrote."""

    name = "Run plan"
    key = "run_plan_url"


class RunReportLink(_StoredUrlLink):
    """The published artifact set's run report (``report.html``)."""

    name = "Run report"
    key = "run_report_url"
