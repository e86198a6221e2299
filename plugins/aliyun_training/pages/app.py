"""The pages' FastAPI app, mounted by Airflow's API server at ``urls.PREFIX`` (see ``plugin.py``).

Only the API server imports this module (the plugin builds the app when the server asks for it).
Its annotations are evaluated when the routes are defined, as FastAPI reads them for dependencies.

Every page is behind Airflow's own authentication (the session cookie the UI's login sets, or a
bearer token) and the DAG's access rules, checked by the API server's own dependencies: a user who
may not read a DAG's runs gets a 403 for its pages and does not see it in the list. A browser that
is not logged in is sent to the login page and back.

Rolling a champion back writes its Asset's state and announces an event on it, so it takes what
Airflow's own routes for those take: the permission to edit that asset (the simple auth manager's
Op role and above). The form is posted to the same origin only (the login cookie is ``SameSite=Lax``,
and a post whose ``Origin`` is another site is refused as well).
"""

from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlsplit

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import AssetDetails, DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, Form, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException

from aliyun_training.champion import RollbackRefused, past_champion
from aliyun_training.pages import run_view, views
from aliyun_training.pages.runs import (
    PageNotFound,
    broken_declarations,
    live_run,
    pipeline_dag_ids,
    pipeline_runs,
    pipeline_summaries,
    read_report,
    task_record,
)
from aliyun_training.pages.urls import pipeline_page
from aliyun_training.plan.render_html import render_html
from aliyun_training.rollback import ChampionStanding, champion_standing, roll_back_champion
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
    def pipeline(dag_id: str, user: GetUserDep, session: SessionDep) -> str:
        """A pipeline's champion and runs, newest first, with their versions, metrics and pages."""
        standing = _pipeline_champion(session, dag_id)
        return views.pipeline_runs_page(
            dag_id, pipeline_runs(session, dag_id), standing, _may_roll_back(user, standing)
        )

    @app.get("/pipelines/{dag_id}/rollback", response_class=HTMLResponse, dependencies=read_runs)
    def rollback_form(dag_id: str, to: str, user: GetUserDep, session: SessionDep) -> str:
        """What rolling back to the past champion ``to`` moves, with the button that does it."""
        standing = _pipeline_champion(session, dag_id)
        _require_roll_back(user, standing)
        target = past_champion(standing.history, to)
        if standing.current is None or target is None:
            raise PageNotFound(f"{to} is no past champion of {dag_id}")
        return views.rollback_confirmation_page(dag_id, standing.current, target)

    @app.post("/pipelines/{dag_id}/rollback", dependencies=read_runs)
    def rollback(
        dag_id: str, to: Annotated[str, Form()], request: Request, user: GetUserDep, session: SessionDep
    ) -> Response:
        """Roll the champion back to ``to``, as this user; back to the pipeline's page once done."""
        _require_same_origin(request)
        _require_roll_back(user, _pipeline_champion(session, dag_id))
        try:
            roll_back_champion(session, dag_id, to, user.get_name())
        except RollbackRefused as exc:
            page = views.rollback_refused_page(dag_id, str(exc))
            return HTMLResponse(page, status_code=status.HTTP_409_CONFLICT)
        return RedirectResponse(pipeline_page(dag_id), status_code=status.HTTP_303_SEE_OTHER)

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=read_records)
    def run(dag_id: str, run_id: str, session: SessionDep) -> str:
        """The run's training job as it goes (state, progress, ETA, GPU use, cost, deadline), from
        the live record its trigger keeps; once the run published its report, a link to it."""
        return run_view.run_live_page(live_run(session, dag_id, run_id), datetime.now(UTC))

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


def _pipeline_champion(session: Session, dag_id: str) -> ChampionStanding:
    """The pipeline's champion standing; not found where ``dag_id`` is no pipeline deployed here."""
    if dag_id not in pipeline_dag_ids(session):
        raise PageNotFound(f"{dag_id} is not a training pipeline deployed here")
    return champion_standing(session, dag_id)


def _may_roll_back(user: BaseUser, standing: ChampionStanding) -> bool:
    """Whether ``user`` may edit the pipeline's champion Asset (what Airflow's asset state and
    asset event routes ask), so roll its champion back."""
    return standing.asset_id is not None and get_auth_manager().is_authorized_asset(
        method="PUT", details=AssetDetails(id=str(standing.asset_id)), user=user
    )


def _require_roll_back(user: BaseUser, standing: ChampionStanding) -> None:
    if not _may_roll_back(user, standing):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "rolling the champion back takes the permission to edit its asset"
        )


def _require_same_origin(request: Request) -> None:
    """Refuse a form posted from another site (a browser says where a post comes from): its
    ``Origin`` must be the host the request was sent to, as the server or its proxy saw it."""
    origin = request.headers.get("origin")
    hosts = {request.headers.get("host"), request.headers.get("x-forwarded-host")}
    if origin and urlsplit(origin).netloc not in hosts:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the form was posted from another site")
