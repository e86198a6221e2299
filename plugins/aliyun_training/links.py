"""Console links shown on training tasks in the Airflow UI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class TrainingJobConsoleLink(BaseOperatorLink):
    """The job's page in its platform's console (PAI-DLC); empty for jobs without one (local)."""

    name = "Training job console"

    @property
    def xcom_key(self) -> str:
        return "training_job_console_url"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

    def persist(self, context: Any, url: str | None) -> None:
        """Store the URL where the UI reads it, as soon as the job exists (not only on success).

        Backends without a console (local) store an empty link, so resolving links after the task
        finds a value instead of logging a missing XCom.
        """
        context["ti"].xcom_push(key=self.xcom_key, value=url or "")


class RunPlanLink(BaseOperatorLink):
    """The dry run's readable plan (``plan.html``) that the show_plan task wrote."""

    name = "Run plan"

    @property
    def xcom_key(self) -> str:
        return "run_plan_url"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

    def persist(self, context: Any, url: str) -> None:
        context["ti"].xcom_push(key=self.xcom_key, value=url)
