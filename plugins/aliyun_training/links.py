"""Links shown on the tasks in the Airflow UI: the job's console, its live page, the dry run's plan,
the run report.

The run page, the plan and the report are the provider's own pages (``aliyun_training.pages``),
served over http by the API server behind Airflow's login; a task stores where the file it wrote
lies (``train``: the page's address, once its job is submitted), and the link appears once it has.
When a task ends, Airflow's task runner stores each link's ``get_link`` under the link's
``xcom_key``, which is what the UI reads: from then on that XCom holds the page's address.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

from aliyun_training.pages.urls import plan_page, report_page, run_page

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


class _RunPageLink(_StoredUrlLink):
    """A link to the run's page of the provider's, drawn once the task stored what the page shows."""

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        if not super().get_link(operator, ti_key=ti_key):
            return ""
        return self.page(ti_key.dag_id, ti_key.run_id)

    @abstractmethod
    def page(self, dag_id: str, run_id: str) -> str:
        """The page's address for the run."""


class RunPageLink(_RunPageLink):
    """The run's live page: its training job's state, progress, ETA, GPU use and cost while it runs
    (the ``train`` task stores the address when it submits the job), then the way to its report."""

    name = "Run page"
    key = "run_page_url"

    def page(self, dag_id: str, run_id: str) -> str:
        return run_page(dag_id, run_id)


class RunPlanLink(_RunPageLink):
    """The dry run's readable plan, rendered from the document the show_plan task returned."""

    name = "Run plan"
    key = "run_plan_url"

    def page(self, dag_id: str, run_id: str) -> str:
        return plan_page(dag_id, run_id)


class RunReportLink(_RunPageLink):
    """The published artifact set's run report, read from where it was published."""

    name = "Run report"
    key = "run_report_url"

    def page(self, dag_id: str, run_id: str) -> str:
        return report_page(dag_id, run_id)
