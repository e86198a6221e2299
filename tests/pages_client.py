"""The provider's pages app over HTTP in the test process, against the session's metadata DB.

The app is the one the API server mounts (``aliyun_training.pages.app``), with Airflow's own auth
manager: a user signs in with the JWT cookie the UI's login sets, so the pages' access checks are
Airflow's, not the test's.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

    from fastapi.testclient import TestClient

#: The folder screenshots go to, as for the end-to-end suite's (docs/screenshots/ is refreshed so).
SCREENSHOTS = "ALIYUN_TRAINING_E2E_SCREENSHOTS"
#: A laptop's window: the pages must read without scrolling sideways at this width.
SCREENSHOT_WIDTH = 1280


def pages_client(role: str | None = "viewer", signed_in: bool = True) -> TestClient:
    """A browser on the pages: signed in as a user of ``role`` (None: a user with no role)."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from aliyun_training.pages.app import create_app
    from aliyun_training.pages.urls import PREFIX

    manager = init_auth_manager()
    server = FastAPI()
    server.mount(PREFIX, create_app())  # where the API server mounts it, so the pages' links resolve
    client = TestClient(server)
    if signed_in:
        token = manager.generate_jwt(SimpleAuthManagerUser(username="reader", role=role))
        client.cookies.set(COOKIE_NAME_JWT_TOKEN, token)
    return client


def deploy(*dags: Any) -> None:
    """``dags`` written to the session's metadata DB as the DAG processor writes them."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    bag = DagBag(collect_dags=False)
    for dag in dags:
        bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def turn_on(dag_id: str) -> datetime | None:
    """Unpause the DAG, as its trigger form does; when the scheduler creates its next run."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        model = session.get(DagModel, dag_id)
        assert model is not None, f"{dag_id} is not deployed"
        model.is_paused = False
        return model.next_dagrun_create_after


def start_runs_when_their_tasks_did(dag_id: str) -> None:
    """Give the DAG's runs the start a deployment records, when their first task started:
    ``dag.test`` starts a run at its logical date, so a run of a past date reads as weeks long."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        for run in session.scalars(select(DagRun).where(DagRun.dag_id == dag_id)):
            run.start_date = session.scalar(
                select(func.min(TaskInstance.start_date)).where(
                    TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id
                )
            )


def screenshot_pages(pages: dict[str, str]) -> None:
    """Each page's HTML (by name) as headless Chromium shows it at a laptop's width, the window as
    tall as the page, saved as ``<name>.png`` where :data:`SCREENSHOTS` says; none where it is unset.

    The pages are self-contained (inline CSS and SVG), so a file of the HTML the app served shows
    what a signed-in browser does, without a server for the browser to sign in to.
    """
    chosen = os.environ.get(SCREENSHOTS)
    if not chosen:
        return
    from tests.e2e.browser import browser

    shots = Path(chosen).resolve()
    with tempfile.TemporaryDirectory(prefix="pages-") as folder, browser("", shots) as user:
        driver = user.driver
        for name, html in pages.items():
            source = Path(folder) / f"{name}.html"
            source.write_text(html, encoding="utf-8")
            driver.set_window_size(SCREENSHOT_WIDTH, 900)
            driver.get(source.as_uri())
            # The page's own height (its scrollHeight is the window's when shorter), plus what the
            # window's bars take of the window's.
            height, bars = driver.execute_script(
                "return [document.documentElement.getBoundingClientRect().height,"
                " window.outerHeight - window.innerHeight]"
            )
            driver.set_window_size(SCREENSHOT_WIDTH, min(math.ceil(height), 4000) + int(bars))
            driver.save_screenshot(str(shots / f"{name}.png"))
