"""links: what a task stores for its UI links, and the address each link then shows.

The XCom store is reached through the task runner's supervisor, which a unit test has not: the
``xcom_push`` of the task instance and Airflow's ``XCom.get_one`` meet here in one dictionary.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk.execution_time.xcom import XCom
from airflow.sdk.types import TaskInstanceKey

from aliyun_training.links import RunPageLink, RunPlanLink, RunReportLink, TrainingJobConsoleLink
from tests.operator_harness import TaskInstanceIds

RUN_ID = "manual__2026-11-30T00:00:00+00:00"
#: The run id as a page's path carries it: ':' and '+' quoted.
QUOTED_RUN_ID = "manual__2026-11-30T00%3A00%3A00%2B00%3A00"
CONSOLE = "https://pai.console.aliyun.com/#/dlc/jobs/dlc1a2b3c4d"


@pytest.fixture
def ti(monkeypatch: pytest.MonkeyPatch) -> TaskInstanceIds:
    """The task instance whose pushes ``XCom.get_one`` reads back."""
    task_instance = TaskInstanceIds(run_id=RUN_ID)

    def get_one(*, key: str, dag_id: str, task_id: str, run_id: str, **_: Any) -> Any:
        assert (dag_id, task_id, run_id) == (
            task_instance.dag_id,
            task_instance.task_id,
            task_instance.run_id,
        )
        return task_instance.pushed.get(key)

    monkeypatch.setattr(XCom, "get_one", get_one)
    return task_instance


def link_of(
    link: TrainingJobConsoleLink | RunPageLink | RunPlanLink | RunReportLink, ti: TaskInstanceIds
) -> str:
    """What the UI shows for ``link`` on ``ti``'s task."""
    operator = EmptyOperator(task_id=ti.task_id)
    return link.get_link(operator, ti_key=TaskInstanceKey(ti.dag_id, ti.task_id, ti.run_id))


def test_the_console_link_is_the_url_the_task_stored(ti: TaskInstanceIds) -> None:
    link = TrainingJobConsoleLink()

    link.persist({"ti": ti}, CONSOLE)

    assert ti.pushed == {"training_job_console_url": CONSOLE}
    assert link_of(link, ti) == CONSOLE


def test_a_job_without_a_console_stores_an_empty_url_and_shows_no_link(ti: TaskInstanceIds) -> None:
    link = TrainingJobConsoleLink()

    link.persist({"ti": ti}, None)

    assert ti.pushed == {"training_job_console_url": ""}, "a value, so resolving links logs no missing XCom"
    assert link_of(link, ti) == ""


@pytest.mark.parametrize(
    ("link", "page"), [(RunPageLink(), ""), (RunPlanLink(), "/plan"), (RunReportLink(), "/report")]
)
def test_a_run_page_link_opens_the_providers_page_once_the_task_stored_what_it_shows(
    ti: TaskInstanceIds, link: RunPageLink | RunPlanLink | RunReportLink, page: str
) -> None:
    assert link_of(link, ti) == "", "nothing stored yet: no link"

    link.persist({"ti": ti}, "/srv/airflow/dry-runs/cifar10/run/plan.html")

    assert link_of(link, ti) == f"/aliyun-training/runs/retrain/{QUOTED_RUN_ID}{page}"


def test_each_link_has_its_own_name_and_xcom_key() -> None:
    links = [TrainingJobConsoleLink(), RunPageLink(), RunPlanLink(), RunReportLink()]

    assert [(link.name, link.xcom_key) for link in links] == [
        ("Training job console", "training_job_console_url"),
        ("Run page", "run_page_url"),
        ("Run plan", "run_plan_url"),
        ("Run report", "run_report_url"),
    ]
