"""operators.plan: ``configure``'s body (the run's plan, or a failure naming the bad value) and the dry
run's task, which writes plan.json and plan.html, links them, and fails with a failed preflight.

Runs are local runs of the CIFAR-10 example under the test's local root, planned from environment
files in the test's folder.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.operators.plan import RunPlanOperator, plan_for_task
from aliyun_training.params import param_defaults
from aliyun_training.plan.models import RunPlan
from aliyun_training.settings import ENVIRONMENT_DIR_ENV
from aliyun_training.upstream import seal_returned
from fakes.environment_files import cifar10, write_environment
from tests.operator_harness import TaskInstanceIds

if TYPE_CHECKING:
    from pathlib import Path

VERSION = "2026-11-22"
RUN_ID = "manual__2026-11-22T00:00:00+00:00"
REPORT = {
    "findings": [
        {"check": "disk", "verdict": "FAIL", "found": "2 MB free under the root", "fix": "free space"},
    ],
    "not_applicable": [],
}


class PlanTaskInstance(TaskInstanceIds):
    """The show_plan task's instance, reading what the tasks before it pushed."""

    def __init__(self, upstream: dict[str, TaskInstanceIds]) -> None:
        super().__init__(run_id=RUN_ID, task_id="show_plan")
        self.upstream = upstream

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        return self.upstream[task_ids].pushed.get(key) if task_ids in self.upstream else None


@pytest.fixture
def environments(tmp_path: Path, local_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped environment files, in the folder the DAG file names; VERSION has landed locally."""
    monkeypatch.delenv(ENVIRONMENT_DIR_ENV, raising=False)
    for backend in ("local", "dlc", "arena"):
        write_environment(tmp_path / "config", backend, {})
    landed = local_root / "object-store" / "cifar10" / VERSION
    landed.mkdir(parents=True)
    (landed / "_SUCCESS").touch()
    return tmp_path / "config"


def configure(environments: Path, **form: Any) -> dict[str, Any]:
    """What ``configure`` returns for the trigger form's defaults with ``form`` over them."""
    params = {**param_defaults(cifar10()), "dataset_version": VERSION, **form}
    return plan_for_task(params, datetime(2026, 11, 22, tzinfo=UTC), False, cifar10(), environments)


def test_configure_returns_the_runs_plan_as_json_for_xcom(environments: Path, local_root: Path) -> None:
    returned = configure(environments, epochs=5)

    plan = RunPlan.model_validate(returned)
    assert json.loads(json.dumps(returned)) == returned, "plain JSON"
    assert (plan.backend.value, plan.dataset.version, plan.installation) == (
        "local",
        VERSION,
        "test-deployment",
    )
    assert plan.dataset.source_uri == f"file://{local_root}/object-store/cifar10/{VERSION}/"
    assert "--epochs 5 " in plan.job.spec.command


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            {"nodes": 0},
            "  - nodes: 0 is less than the minimum of 1 (fix: use a whole number from 1 up to 16)",
        ),
        ({"backend": "dlc"}, "dlc.json leaves required settings blank: image (or an image_build block)"),
    ],
)
def test_a_bad_value_fails_configure_at_once_naming_it_and_its_fix(
    environments: Path, form: dict[str, Any], message: str
) -> None:
    with pytest.raises(AirflowFailException, match="fix: ") as failed:
        configure(environments, **form)

    assert message in str(failed.value), "a retry would fail the same: AirflowFailException, no retry"


def test_the_dry_run_writes_its_document_and_page_and_links_the_page(
    environments: Path, local_root: Path
) -> None:
    ti = PlanTaskInstance({})
    operator = RunPlanOperator(task_id="show_plan", plan=configure(environments, dry_run=True))

    document = operator.execute({"ti": ti})

    folder = local_root / "dry-runs" / "cifar10" / "manual__2026-11-22T00_00_00_00_00"
    assert json.loads((folder / "plan.json").read_text()) == json.loads(json.dumps(document, default=str))
    assert (folder / "plan.html").read_text().startswith("<!doctype html>")
    assert ti.pushed == {"run_plan_url": str(folder / "plan.html")}
    assert document["backend"] == "local" and document["checks"]["staging"]["files"] == 1, (
        "the _SUCCESS marker"
    )


def test_a_failed_preflight_fails_the_dry_run_once_its_plan_is_written(
    environments: Path, local_root: Path
) -> None:
    preflight = TaskInstanceIds(run_id=RUN_ID, task_id="preflight_report")
    seal_returned({"ti": preflight, "task": EmptyOperator(task_id="preflight_report")}, REPORT)
    preflight.pushed["return_value"] = REPORT
    ti = PlanTaskInstance({"preflight_report": preflight})
    operator = RunPlanOperator(
        task_id="show_plan", plan=configure(environments, dry_run=True), report_task_id="preflight_report"
    )

    with pytest.raises(AirflowFailException) as failed:
        operator.execute({"ti": ti})

    page = local_root / "dry-runs" / "cifar10" / "manual__2026-11-22T00_00_00_00_00" / "plan.html"
    assert str(failed.value).startswith(f"Preflight failed; the plan is beside its failures in {page}")
    assert "Fix every FAIL below" in str(failed.value) and "2 MB free under the root" in str(failed.value)
    assert page.exists() and ti.pushed == {"run_plan_url": str(page)}
    written = json.loads(page.with_name("plan.json").read_text())
    assert written["checks"]["preflight"] == REPORT, "the page shows the failures beside the plan"
