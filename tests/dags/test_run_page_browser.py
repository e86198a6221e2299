"""The run page in a browser: headless Chromium on the pages app served over HTTP, signed in with
the JWT cookie Airflow's login sets. The page follows the job by reloading itself, and stops once
the job ended: what a user leaving the page open sees."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.pages import run_view
from aliyun_training.pages.urls import run_page
from tests.dags.live_runs import DAG_ID, forget_runs, new_run, record, write_live
from tests.e2e.browser import browser
from tests.pages_client import SCREENSHOT_WIDTH, SCREENSHOTS, deploy, pages_client

if TYPE_CHECKING:
    from collections.abc import Iterator

    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.slow

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "training_pipelines.py"
#: The page reloads this often once it was first shown (and screenshot) as a deployment serves it
#: (every 15 s, which test_run_page checks), so the test sees two reloads and a stop in seconds.
REFRESH_SECONDS = 2
#: The most a reload may take to show a new record: its period, and a loaded machine's slack.
WAIT_SECONDS = 20


@pytest.fixture(scope="module")
def served(airflow_db: Path) -> Iterator[str]:
    """The pipelines deployed, and the pages app (as the API server mounts it) served over HTTP on
    a free local port; its address."""
    import uvicorn

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert not bag.import_errors
    deploy(*bag.dags.values())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(pages_client(signed_in=False).app, host="127.0.0.1", port=port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the pages app did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(WAIT_SECONDS)
    forget_runs()


def sign_in(driver: WebDriver, url: str) -> None:
    """The cookie Airflow's login sets, for a viewer, set on the server's origin."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="reader", role="viewer"))
    driver.get(f"{url}/favicon.ico")  # any page of the origin: a cookie is set on the page's
    driver.add_cookie({"name": COOKIE_NAME_JWT_TOKEN, "value": token, "path": "/"})


def shown(driver: WebDriver, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def until(driver: WebDriver, css: str, text: str) -> None:
    """Wait, at most ``WAIT_SECONDS``, for the page to show ``text`` at ``css``: only a reload of
    its own brings it, as nothing here loads the page again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(
        driver, WAIT_SECONDS, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
    ).until(lambda _: text in shown(driver, css), f"the page did not show {text!r} at {css}")


def test_the_open_page_follows_the_job_and_stops_reloading_once_it_ended(
    served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = new_run("in-a-browser")
    running = record(420, datetime.now(UTC))
    write_live(run_id, running)
    chosen = os.environ.get(SCREENSHOTS)

    with browser(served, Path(chosen) if chosen else tmp_path) as user:
        driver = user.driver
        sign_in(driver, served)
        driver.set_window_size(SCREENSHOT_WIDTH, 900)
        driver.get(served + run_page(DAG_ID, run_id))
        first = {"percent": shown(driver, ".percent"), "eta": shown(driver, ".eta")}
        wide = driver.execute_script("return document.documentElement.scrollWidth > window.innerWidth")
        if chosen:
            _screenshot(driver, user.shots / "run-page.png")
        # From here the page reloads every REFRESH_SECONDS: the user reloads it once to get that.
        monkeypatch.setattr(run_view, "_REFRESH_SECONDS", REFRESH_SECONDS)
        driver.refresh()
        period = driver.find_element("css selector", "meta[http-equiv='refresh']").get_attribute("content")

        write_live(run_id, record(570, datetime.now(UTC)))
        until(driver, ".percent", "57%")
        write_live(run_id, record(1000, datetime.now(UTC), state="succeeded"))
        until(driver, ".state-succeeded", "succeeded")
        driver.execute_script("window.notReloaded = true")
        time.sleep(3 * REFRESH_SECONDS)
        stayed = driver.execute_script("return window.notReloaded === true")
        with _no_implicit_wait(driver):
            refresh = driver.find_elements("css selector", "meta[http-equiv='refresh']")

    assert first["percent"] == "42%" and period == str(REFRESH_SECONDS)
    assert running.progress is not None and first["eta"] == f"{running.progress.eta:%Y-%m-%d %H:%M} UTC"
    assert not wide, f"the page scrolls sideways at {SCREENSHOT_WIDTH} px"
    assert stayed and refresh == [], "the page stops reloading once the job ended"


def _screenshot(driver: WebDriver, path: Path) -> None:
    """The whole page at a laptop's width (the window as tall as the page)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(SCREENSHOT_WIDTH, min(int(height) + 150, 4000))
    driver.save_screenshot(str(path))
    driver.set_window_size(SCREENSHOT_WIDTH, 900)


@contextlib.contextmanager
def _no_implicit_wait(driver: WebDriver) -> Iterator[None]:
    """Look for elements that should be absent without waiting a minute for them to appear."""
    from tests.e2e.browser import WAIT_SECONDS as IMPLICIT

    driver.implicitly_wait(0)
    try:
        yield
    finally:
        driver.implicitly_wait(IMPLICIT)
