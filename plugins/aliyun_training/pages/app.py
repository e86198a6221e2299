"""The pages' FastAPI app, mounted by Airflow's API server at ``urls.PREFIX`` (see ``plugin.py``).

Only the API server imports this module (the plugin builds the app when the server asks for it).
Its annotations are evaluated when the routes are defined, as FastAPI reads them for dependencies.

Every page is behind Airflow's own authentication (the session cookie the UI's login sets, or a
bearer token) and the DAG's access rules, checked by the API server's own dependencies: a user who
may not read a DAG's runs gets a 403 for its pages and does not see it in the list. A browser that
is not logged in is sent to the login page and back.
"""

from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from aliyun_training.pages import views
from aliyun_training.pages.runs import (
    PageNotFound,
    broken_declarations,
    pipeline_dag_ids,
    pipeline_runs,
    pipeline_summaries,
    read_report,
    task_record,
)
from aliyun_training.plan.render_html import render_html
from aliyun_training.task_ids import CONFIGURE, PUBLISH_ARTIFACTS, SHOW_PLAN


def create_app() -> FastAPI:
    """The app, with its routes."""
    app = FastAPI(title="Alibaba Cloud training pipelines", docs_url=None, redoc_url=None)
    read_runs = [Depends(requires_access_dag("GET", DagAccessEntity.RUN))]
    read_records = [Depends(requires_access_dag("GET", DagAccessEntity.XCOM))]

    @app.get("/", response_class=HTMLResponse)
    def pipelines(user: GetUserDep, session: SessionDep) -> str:
        """The deployed training pipelines this user may read, and the declarations that did not load."""
        readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
        dag_ids = sorted(set(pipeline_dag_ids(session)) & readable)
        broken = [b for b in broken_declarations(session) if b.dag_id in readable]
        return views.pipelines_index(pipeline_summaries(session, dag_ids), broken)

    @app.get("/pipelines/{dag_id}", response_class=HTMLResponse, dependencies=read_runs)
    def pipeline(dag_id: str, session: SessionDep) -> str:
        """A pipeline's runs, newest first, with their versions, metrics and pages."""
        if dag_id not in pipeline_dag_ids(session):
            raise PageNotFound(f"{dag_id} is not a training pipeline deployed here")
        return views.pipeline_runs_page(dag_id, pipeline_runs(session, dag_id))

    @app.get("/runs/{dag_id}/{run_id}/report", response_class=HTMLResponse, dependencies=read_records)
    def report(dag_id: str, run_id: str, session: SessionDep) -> str:
        """The run's report, read from where its publish_artifacts task published it."""
        published = task_record(session, dag_id, run_id, PUBLISH_ARTIFACTS)
        planned = task_record(session, dag_id, run_id, CONFIGURE, "artifacts")
        return read_report(published, planned.get("alibaba_cloud_conn_id"))

    @app.get("/runs/{dag_id}/{run_id}/plan", response_class=HTMLResponse, dependencies=read_records)
    def plan(dag_id: str, run_id: str, session: SessionDep) -> str:
        """The dry run's readable plan, rendered from the document its show_plan task returned."""
        document: dict[str, Any] = task_record(session, dag_id, run_id, SHOW_PLAN)
        return render_html(document)

    @app.exception_handler(PageNotFound)
    def not_found(request: Request, exc: PageNotFound) -> HTMLResponse:
        return HTMLResponse(views.not_found_page(str(exc)), status_code=status.HTTP_404_NOT_FOUND)

    @app.exception_handler(HTTPException)
    async def to_login(request: Request, exc: StarletteHTTPException) -> Response:
        """A browser without a session goes to Airflow's login and comes back; others get the error."""
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and "text/html" in request.headers.get(
            "accept", ""
        ):
            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)))
        return await http_exception_handler(request, exc)

    return app
