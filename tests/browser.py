"""A real headless Chromium for the browser tests (Debian's chromium and chromium-driver, through
selenium), and what they do in Airflow's own UI. Screenshots are kept in ``ARTIFACTS``."""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from infra import airflow, credentials, processes
from infra.deployment import REPO, Deployment

#: Where the browser tests keep their screenshots.
ARTIFACTS = Path(os.environ.get("LAMBDALAKE_ARTIFACTS", REPO / ".artifacts"))


@contextmanager
def chromium():
    """A headless Chromium, quit at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        yield browser
    finally:
        browser.quit()


def screenshot(browser, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / name))


def backfill(browser, settings: Deployment, dag: str, days: list[datetime], timeout: float = 900) -> dict[str, str]:
    """Log in on Airflow's login page, start a backfill of ``dag`` over ``days`` (consecutive, oldest
    first) from its "Trigger → Backfill" dialog, and wait until the runs succeed: one backfill run per
    day, listed as such in the DAG's Runs tab. Returns ``{run_id: state}`` of the backfill runs."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)

    def find(xpath: str):
        def look(_):
            try:
                return browser.find_element(By.XPATH, xpath)
            except WebDriverException as error:  # asked while the page navigates (signing in): look again
                if "navigat" in (error.msg or ""):
                    return False
                raise

        return wait.until(look)

    browser.get(f"{settings.airflow_url}/dags/{dag}")  # Airflow sends the browser to its login page first
    find("//input[@name='username']").send_keys(settings.airflow_user)
    find("//input[@name='password']").send_keys(credentials.airflow_password(settings))
    find("//button[@type='submit' and normalize-space()='Sign in']").click()

    find("//button[@data-testid='trigger-dag-button']").click()
    find("//label[.//span[normalize-space()='Backfill']]").click()
    for label, day in (("From", days[0]), ("To", days[-1])):
        find(f"//div[@role='group'][label[normalize-space()='{label}']]//*[@data-testid='datetime-input']").click()
        date = find("//*[@data-scope='popover' and @data-state='open']//input[@placeholder='YYYY/MM/DD']")
        date.send_keys(f"{day:%Y/%m/%d}", Keys.ESCAPE)
    find(f"//*[normalize-space()='{len(days)} run{'s' * (len(days) != 1)} will be triggered.']")
    unpause = find(f"//label[.//span[normalize-space()='Unpause {dag} on trigger']]//input")
    assert unpause.is_selected()  # the DAG is paused; the dialog unpauses it, or no run would start
    screenshot(browser, "airflow-backfill-dialog.png")
    find("//button[normalize-space()='Run Backfill']").click()

    client = airflow.AirflowClient(settings)

    def created() -> list[airflow.DagRun] | None:
        runs = [r for r in client.dag_runs(dag) if r.run_type == "backfill"]
        return runs if len(runs) >= len(days) else None

    runs = processes.poll(created, 60, 1, lambda: AssertionError(f"the backfill did not create {len(days)} runs"))
    logical = sorted(r.logical_date for r in runs if r.logical_date)
    assert logical == days, (logical, days)
    browser.get("about:blank")  # not the DAG's page, which polls the API server throughout the runs
    states = client.wait_for_runs(dag, [r.run_id for r in runs], timeout=timeout)

    browser.get(f"{settings.airflow_url}/dags/{dag}/runs")  # the UI lists them: backfill runs, succeeded

    def cells(column: str) -> list[str]:
        path = f"//table[@data-testid='table-list']//td[@data-testid='table-cell-{column}']"
        return [c.text for c in browser.find_elements(By.XPATH, path)]

    def listed() -> list[tuple[str, str]]:
        # strict=False: the columns are read one after the other, and the table may change between the reads
        rows = zip(cells("dag_run_id"), cells("state"), cells("run_type"), strict=False)
        return sorted((run_id, state) for run_id, state, kind in rows if kind == "Backfill")

    WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda _: listed() == sorted((run_id, "Success") for run_id in states)
    )
    screenshot(browser, "airflow-backfill-done.png")
    return states
