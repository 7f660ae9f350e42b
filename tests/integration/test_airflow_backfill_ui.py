"""A backfill started from Airflow's own web UI, driven in a real headless Chromium (Debian's chromium
and chromium-driver, through selenium): logged in on Airflow's login page, batch_recompute's "Trigger →
Backfill" dialog over three past days makes the real scheduler run one recompute per day, and the merged
views of those days are then final batch rows equal to the oracle."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from infra import airflow, generator
from infra.settings import load
from serving_layer import engine
from speed_layer import queries
from tests import oracle
from tests.compare import assert_measures, merged_rows
from tests.integration.records import land
from tests.integration.test_serving_http import ARTIFACTS
from views import all_views, timebase

pytestmark = [pytest.mark.integration]

DAYS = 3
DAG = "batch_recompute"


@pytest.fixture(scope="module")
def backfill_deployment(spark, deployment, tmp_path_factory):
    """A deployment of its own whose raw_events holds the three days before today, with its own Airflow
    (on the port after the session's). Its batch starts today, so no catch-up run competes with the
    backfill. Not the session's Airflow: unpausing batch_recompute there would batch the end-to-end
    test's days before their events exist, and that test counts the DAG's runs and final days."""
    home = tmp_path_factory.mktemp("backfill-ui")
    today = timebase.day_start(datetime.now(timebase.UTC).date())
    stored = json.loads((deployment.home / "settings.json").read_text())
    (home / "settings.json").write_text(json.dumps({
        **stored, "airflow_port": deployment.airflow_port + 1, "batch_start_date": today.date().isoformat()}))
    settings = load(home)
    records = generator.generate(today - timedelta(days=DAYS), today, 1000 * DAYS, seed=21)
    queries.ensure_tables(spark, settings)
    land(spark, settings, records)
    airflow.start(settings)
    try:
        airflow.AirflowClient(settings).wait_for_dag(DAG)
        yield settings, records, today
    finally:
        airflow.stop(settings)


@pytest.fixture
def browser():
    """Headless Chromium through Debian's chromedriver, as the dashboard test drives it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    yield driver
    driver.quit()


def test_backfill_from_the_ui_makes_the_days_final_and_equal_to_the_oracle(backfill_deployment, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    settings, records, today = backfill_deployment
    days = [today - timedelta(days=d) for d in range(DAYS, 0, -1)]
    wait = WebDriverWait(browser, 60)
    find = lambda xpath: wait.until(lambda _: browser.find_element(By.XPATH, xpath))  # noqa: E731

    browser.get(f"{settings.airflow_url}/dags/{DAG}")  # Airflow sends the browser to its login page first
    find("//input[@name='username']").send_keys(settings.airflow_user)
    find("//input[@name='password']").send_keys(settings.airflow_password)
    find("//button[@type='submit' and normalize-space()='Sign in']").click()

    find("//button[@data-testid='trigger-dag-button']").click()
    find("//label[.//span[normalize-space()='Backfill']]").click()
    for label, day in (("From", days[0]), ("To", days[-1])):
        find(f"//div[@role='group'][label[normalize-space()='{label}']]//*[@data-testid='datetime-input']").click()
        date = find("//*[@data-scope='popover' and @data-state='open']//input[@placeholder='YYYY/MM/DD']")
        date.send_keys(f"{day:%Y/%m/%d}", Keys.ESCAPE)
    find(f"//*[normalize-space()='{DAYS} runs will be triggered.']")
    unpause = find(f"//label[.//span[normalize-space()='Unpause {DAG} on trigger']]//input")
    assert unpause.is_selected()  # the DAG is paused; the dialog unpauses it, or no run would start
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "airflow-backfill-dialog.png"))
    find("//button[normalize-space()='Run Backfill']").click()

    client = airflow.AirflowClient(settings)
    states = client.wait_for_runs(DAG, DAYS, timeout=900)
    runs = [r for r in client.dag_runs(DAG) if r["dag_run_id"] in states]
    assert {r["run_type"] for r in runs} == {"backfill"}
    assert sorted(datetime.fromisoformat(r["logical_date"]) for r in runs) == days

    browser.get(f"{settings.airflow_url}/dags/{DAG}/runs")  # the UI lists them: backfill runs, succeeded
    cells = lambda column: [c.text for c in browser.find_elements(  # noqa: E731
        By.XPATH, f"//table[@data-testid='table-list']//td[@data-testid='table-cell-{column}']")]
    WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda _: cells("state") == ["Success"] * DAYS and cells("run_type") == ["Backfill"] * DAYS)
    assert sorted(cells("dag_run_id")) == sorted(states)
    assert browser.save_screenshot(str(ARTIFACTS / "airflow-backfill-done.png"))

    assert all(d["final"] == {day.date() for day in days} for d in engine.finality(settings).values())
    expected = oracle.views(records)
    for name, view in all_views(settings.view_modules).items():
        merged = {k: r for k, r in merged_rows(settings, view).items() if days[0] <= k[0] < today}
        assert set(merged) == {k for k in expected[name] if days[0] <= k[0] < today}, name
        for key, row in merged.items():
            assert (row["source"], row["is_final"]) == ("batch", True), (name, key)
            assert_measures(view, row, expected[name][key], key)
