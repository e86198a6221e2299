"""The provider's pages behind Airflow's auth, and what turning a pipeline on schedules, with the DAG
file's DAGs written to the session's metadata DB the way the DAG processor writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.pages.urls import PREFIX, airflow_dag_url, pipeline_page, plan_page, report_page
from aliyun_training.pipelines.folder import broken_declaration_dag
from aliyun_training.pipelines.reconciler import RECONCILER_DAG_ID
from tests.pages_client import deploy, pages_client, turn_on

pytestmark = pytest.mark.slow

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "training_pipelines.py"
RUN_ID = "manual__2026-11-22T10:00:00+00:00"
#: A declaration error as the loader words it, with markup a file's content could carry.
BROKEN_ERROR = "team-b.yaml: resources.max_nodes: <b>0</b> is below 1 (fix: set max_nodes to 1 or more)"


@pytest.fixture(scope="module")
def deployed(airflow_db: Path) -> DagBag:
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert not bag.import_errors
    deploy(*bag.dags.values())
    return bag


def test_the_list_shows_the_declared_pipelines_and_not_the_reconciler(deployed: DagBag) -> None:
    page = pages_client().get(f"{PREFIX}/")

    assert page.status_code == 200
    for dag_id in ("cifar10_retrain", "imagenet_resnet_retrain"):
        assert f"href='{pipeline_page(dag_id)}'" in page.text
    assert RECONCILER_DAG_ID not in page.text


def test_the_index_says_of_each_pipeline_when_it_runs_next_and_what_it_has_not_done_yet(
    deployed: DagBag,
) -> None:
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    # Turned on (the trigger form does it), the weekly pipeline runs next Sunday; the monthly one is off.
    next_sunday = turn_on("cifar10_retrain")
    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == "imagenet_resnet_retrain"))
        monthly = session.get(DagModel, "imagenet_resnet_retrain")
        assert monthly is not None
        monthly.is_paused = True

    page = pages_client().get(f"{PREFIX}/").text

    pipelines = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("<tr>")[1:]
    rows = {row.split("</a>", 1)[0].rsplit(">", 1)[1]: row for row in pipelines}
    assert next_sunday is not None and f"<td>{next_sunday:%Y-%m-%d %H:%M} UTC</td>" in rows["cifar10_retrain"]
    assert ">paused</span>" in rows["imagenet_resnet_retrain"]
    assert "no runs yet" in rows["imagenet_resnet_retrain"]
    assert "<td class='number'>—</td>" in rows["imagenet_resnet_retrain"], "no job recorded: unknown"


def test_the_index_lists_a_declaration_that_did_not_load_with_its_error_escaped(deployed: DagBag) -> None:
    dag = broken_declaration_dag(Path("team-b.yaml"), BROKEN_ERROR)
    deploy(dag)
    dag_id = dag.dag_id

    page = pages_client().get(f"{PREFIX}/").text
    hidden = pages_client(role=None).get(f"{PREFIX}/").text

    pipelines, broken = page.split("<h2>Declarations that did not load</h2>", 1)
    assert dag_id not in pipelines and f"href='{pipeline_page(dag_id)}'" not in page
    assert f"<a href='{airflow_dag_url(dag_id)}'>{dag_id}</a>" in broken
    assert "max_nodes: &lt;b&gt;0&lt;/b&gt; is below 1 (fix: set max_nodes to 1 or more)" in broken
    assert "<b>0</b>" not in page
    assert "cifar10_retrain" in pipelines, "the other pipelines loaded"
    assert dag_id not in hidden and "did not load" not in hidden, "a user who may read no DAG sees none"


def test_a_pipeline_with_no_runs_says_how_to_start_one(deployed: DagBag) -> None:
    # The worker's metadata DB is the session's: a DAG test of this pipeline may have run in it.
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == "imagenet_resnet_retrain"))

    page = pages_client().get(pipeline_page("imagenet_resnet_retrain"))

    assert page.status_code == 200 and "No runs yet" in page.text


def test_a_user_airflow_gives_no_role_reads_no_page_and_sees_no_pipeline(deployed: DagBag) -> None:
    pages = pages_client(role=None)

    for path in (
        pipeline_page("cifar10_retrain"),
        report_page("cifar10_retrain", RUN_ID),
        plan_page("cifar10_retrain", RUN_ID),
    ):
        assert pages.get(path).status_code == 403, path
    assert "cifar10_retrain" not in pages.get(f"{PREFIX}/").text


def test_a_browser_without_a_session_goes_to_the_login_and_back(deployed: DagBag) -> None:
    pages = pages_client(signed_in=False)
    path = report_page("cifar10_retrain", RUN_ID)

    browser = pages.get(path, headers={"Accept": "text/html"}, follow_redirects=False)
    program = pages.get(path, headers={"Accept": "application/json"})

    assert browser.status_code == 307
    assert browser.headers["location"].startswith("/auth/login?next=")
    assert "aliyun-training%2Fruns%2Fcifar10_retrain" in browser.headers["location"]
    assert program.status_code == 401


def test_a_page_of_what_a_run_never_produced_is_a_404_saying_so(deployed: DagBag) -> None:
    pages = pages_client()

    report = pages.get(report_page("cifar10_retrain", RUN_ID))
    not_a_pipeline = pages.get(pipeline_page(RECONCILER_DAG_ID))

    assert report.status_code == 404 and f"publish_artifacts of run {RUN_ID}" in report.text.replace(
        "&#x27;", "'"
    )
    assert not_a_pipeline.status_code == 404 and "is not a training pipeline" in not_a_pipeline.text


def test_turning_a_weekly_pipeline_on_schedules_the_next_week_not_the_one_under_way(deployed: DagBag) -> None:
    """Without catchup, Airflow would create the current week's run the moment the DAG is turned on
    (the trigger form turns it on), waiting for a version beside the run its user triggered."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    now = datetime.now(UTC)
    with create_session() as session:
        model = session.get(DagModel, "cifar10_retrain")
        assert model is not None
        first = model.next_dagrun_create_after

    assert first is not None and now < first <= now + timedelta(days=7)
    assert first.weekday() == 6 and (first.hour, first.minute) == (0, 0), "the next Sunday, 00:00 UTC"
