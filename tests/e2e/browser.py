"""A user's browser on a deployment: Debian's Chromium, headless, driven through its ChromeDriver.

It signs in on Airflow's login page, triggers from the DAG's form and follows a task's extra link
as a user clicks it, and saves what it saw as screenshots.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from collections.abc import Iterator

    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: How long an element may take to appear: the UI is a single-page app on a loaded 2-core host.
WAIT_SECONDS = 60


class Browser:
    """One signed-in user of the deployment at ``url``; ``shots`` is where screenshots go."""

    def __init__(self, driver: WebDriver, url: str, shots: Path) -> None:
        self.driver = driver
        self.url = url
        self.shots = shots

    def sign_in(self, user: str, password: str, path: str = "/") -> None:
        from selenium.webdriver.common.by import By

        self.driver.get(self.url + path)
        self.driver.find_element(By.NAME, "username").send_keys(user)
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.driver.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
        self.driver.find_element(By.XPATH, "//button[normalize-space()='Trigger']")

    def trigger_with_the_forms_defaults(self, dag_id: str) -> None:
        """Open the DAG's trigger form and submit it as it opens (its "unpause" box ticked)."""
        from selenium.webdriver.common.by import By

        self.driver.get(f"{self.url}/dags/{dag_id}")
        self.driver.find_element(By.XPATH, "//button[normalize-space()='Trigger']").click()
        self.driver.find_element(By.XPATH, "//*[normalize-space()='Run Parameters']")
        self.shot("trigger-form")
        unpause = self.driver.find_element(By.XPATH, f"//label[contains(., 'Unpause {dag_id} on trigger')]")
        assert unpause.find_element(By.TAG_NAME, "input").is_selected(), "the form unpauses by default"
        # The header's button opened the form; the form's own is the last one.
        self.driver.find_elements(By.XPATH, "//button[normalize-space()='Trigger']")[-1].click()

    def extra_link(self, dag_id: str, run_id: str, task_id: str, name: str) -> str:
        """The address of the task's extra link ``name``, as the task's Details tab draws it."""
        from selenium.webdriver.common.by import By

        self.driver.get(f"{self.url}/dags/{dag_id}/runs/{quote(run_id, safe='')}/tasks/{task_id}")
        self.driver.find_element(By.XPATH, "//a[normalize-space()='Details']").click()
        link = self.driver.find_element(By.XPATH, f"//a[normalize-space()='{name}']")
        self.shot(f"{task_id}-details")
        return str(link.get_attribute("href"))

    def dag_docs(self, dag_id: str, showing: str) -> str:
        """The DAG's docs as its page's "Dag Docs" button shows them, once they show ``showing``."""
        from selenium.webdriver.common.by import By

        self.driver.get(f"{self.url}/dags/{dag_id}")
        self.driver.find_element(By.XPATH, f"//*[contains(text(), '{dag_id}')]")
        self.shot(dag_id)
        self.driver.find_element(
            By.XPATH, "//button[contains(., 'Dag Docs') or @aria-label='Dag Docs']"
        ).click()
        docs = self.driver.find_element(
            By.XPATH, f"//*[contains(text(), '{showing}')]/ancestor::*[@role='dialog']"
        )
        self.shot(f"{dag_id}-docs")
        return str(docs.text)

    def open(self, url: str, shot: str, showing: str | None = None) -> str:
        """Open ``url`` as a user following a link; the page's text, once it shows ``showing`` (a page
        of the UI's single-page app draws its content after the page loaded)."""
        from selenium.webdriver.common.by import By

        self.driver.get(url)
        if showing is not None:
            self.driver.find_element(By.XPATH, f"//*[contains(text(), '{showing}')]")
        text = str(self.driver.find_element(By.TAG_NAME, "body").text)
        self.shot(shot)
        return text

    def shot(self, name: str) -> None:
        """A screenshot of the whole page (the window grown to the page's height)."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1400, min(max(int(height), 900), 4000))
        time.sleep(0.5)  # the UI re-lays out to the new size
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        self.driver.set_window_size(1400, 900)


@contextlib.contextmanager
def browser(url: str, shots: Path) -> Iterator[Browser]:
    """A headless Chromium session on ``url``; ``make browser`` installs it where it is missing."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMEDRIVER.exists() and CHROMIUM.exists(), (
        "the end-to-end suite drives Debian's chromium through chromium-driver: run `make browser`"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(WAIT_SECONDS)
    shots.mkdir(parents=True, exist_ok=True)
    try:
        yield Browser(driver, url, shots)
    finally:
        driver.quit()
