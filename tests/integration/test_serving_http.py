"""The HTTP API and the dashboard, served by `lambdalake serve` as a real process over a deployment whose
first day batch made final and whose second day only the speed layer has seen; the dashboard is
driven in a real headless Chromium (Debian's chromium and chromium-driver, through selenium)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
import requests

from batch_layer.recompute import recompute_day
from domains.clickstream import generator
from domains.sample import Mix
from infra import processes, services
from infra.deployment import REPO, load
from serving_layer import client, engine, sandbox
from speed_layer import queries
from speed_layer.fold import Fold
from tests.browser import chromium, screenshot
from tests.ports import free_port
from views import all_views, timebase
from views.events import kafka_frame

pytestmark = [pytest.mark.integration]

DAY = timebase.day_start(datetime(2026, 5, 4).date())


def _home(tmp_path_factory, deployment, name: str, **overrides):
    home = tmp_path_factory.mktemp(name)
    stored = json.loads((deployment.home / "settings.json").read_text())
    (home / "settings.json").write_text(json.dumps({**stored, **overrides}))
    return load(home)


@pytest.fixture(scope="module")
def served(spark, deployment, tmp_path_factory):
    """A running `lambdalake serve` over two days of events: the first final (batch), the second provisional."""
    settings = _home(tmp_path_factory, deployment, "served", serve_port=free_port())
    records = generator.generate(
        DAY, DAY + timedelta(days=2), 800, seed=11, mix=Mix(late=0, duplicate=0.05, malformed=0.05)
    )
    views = settings.views
    queries.ensure_tables(spark, settings)
    Fold(spark, settings, list(views.values()), "http")(kafka_frame(spark, records), 0)
    recompute_day(spark, settings, DAY, DAY + timedelta(days=1))
    services.start_serving(settings)
    yield settings
    processes.stop(settings, services.SERVING)


def _get(settings, path: str, **params):
    return requests.get(settings.serve_url + path.lstrip("/"), params=params, timeout=30)


def _all_rows(settings, name: str) -> list[dict]:
    columns, rows = engine.query(settings, f'SELECT * FROM "{name}"')
    return [dict(zip(columns, row, strict=True)) for row in rows]


def _key(view, row: dict) -> tuple:
    return (
        timebase.utc(
            datetime.fromisoformat(row["window_start"]) if isinstance(row["window_start"], str) else row["window_start"]
        ),
        *(row[k] for k in view.keys),
    )


def test_views_lists_every_view_with_its_final_and_provisional_days(served):
    listing = {v["name"]: v for v in _get(served, "/views").json()}
    assert set(listing) == set(served.views)
    first, second = DAY.date(), (DAY + timedelta(days=1)).date()
    for view in listing.values():
        assert view["final_days"] == str(first), view["name"]
        assert view["provisional_days"] == str(second), view["name"]


def test_view_rows_page_through_the_merged_view_with_source_and_finality(served):
    view = all_views()["page_views_per_minute"]
    expected = {_key(view, r): r for r in _all_rows(served, view.name)}
    seen, offset, pages = {}, 0, 0
    while offset is not None:
        page = _get(served, f"/views/{view.name}", limit=500, offset=offset).json()
        for row in page["rows"]:
            assert _key(view, row) not in seen
            seen[_key(view, row)] = row
        offset, pages = page["next_offset"], pages + 1
    assert pages > 1 and set(seen) == set(expected)
    for key, row in seen.items():
        final = key[0] < DAY + timedelta(days=1)
        assert (row["source"], row["is_final"]) == (("batch", True) if final else ("speed", False)), key
        assert row["views"] == expected[key]["views"], key


def test_view_rows_filter_by_time_range_and_key(served):
    view = all_views()["page_views_per_minute"]
    start, end = DAY + timedelta(hours=20), DAY + timedelta(hours=28)
    page = sorted(_all_rows(served, view.name), key=lambda r: -r["views"])[0]["page"]
    rows = _get(served, f"/views/{view.name}", start=start.isoformat(), end=end.isoformat(), page=page).json()["rows"]
    expected = {
        _key(view, r)
        for r in _all_rows(served, view.name)
        if start <= timebase.utc(r["window_start"]) < end and r["page"] == page
    }
    assert expected and {_key(view, r) for r in rows} == expected
    assert {r["source"] for r in rows} == {"batch", "speed"}  # the range spans the final day's end


def test_view_rows_explain_bad_requests(served):
    assert _get(served, "/views/no_such_view").status_code == 404
    unknown = _get(served, "/views/page_views_per_minute", colour="red")
    assert unknown.status_code == 400 and "colour: not a key of page_views_per_minute" in unknown.json()["detail"]
    assert _get(served, "/views/page_views_per_minute", limit=0).status_code == 422


def test_query_runs_sandboxed_sql(served, tmp_path):
    sql = "SELECT page, sum(views) AS views FROM page_views_per_minute GROUP BY page ORDER BY page"
    body = requests.post(served.serve_url + "query", json={"sql": sql}, timeout=30).json()
    columns, rows = engine.query(served, sql)
    assert body == {"columns": columns, "rows": [list(r) for r in rows]} and rows
    target = tmp_path / "stolen.csv"
    escape = requests.post(
        served.serve_url + "query", timeout=30, json={"sql": f"COPY (SELECT * FROM raw_events) TO '{target}'"}
    )
    assert escape.status_code == 400 and "only SELECT" in escape.json()["detail"] and not target.exists()


def _cli_query(settings, sql: str, *path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lambdalake.cli", "query", sql],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={
            "LAMBDALAKE_HOME": str(settings.home),
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": ":".join(map(str, (*path, REPO))),
        },
        timeout=120,
    )


def test_the_command_line_asks_the_running_api_and_answers_alike_without_it(served, tmp_path):
    sql = "SELECT window_start, page, views FROM page_views_per_minute ORDER BY ALL LIMIT 5"
    (tmp_path / "duckdb.py").write_text("raise ImportError('the command line built an engine of its own')\n")
    through_api = _cli_query(served, sql, tmp_path)  # no engine of its own can be built: the API answers
    refused = _cli_query(served, "SELECT * FROM read_csv('/etc/passwd')")
    processes.stop(served, services.SERVING)
    try:
        assert client.query(served, sql) is None  # not running: not asked
        assert _cli_query(served, sql).stdout == through_api.stdout and "(5 rows)" in through_api.stdout
    finally:
        services.start_serving(served)
    assert refused.returncode == 1 and refused.stderr.splitlines() == [
        "lambdalake: error: table function read_csv() is not allowed; only generate_series, range, unnest"
    ]


def test_health_reports_days_dead_letters_freshness_and_the_engines(served):
    health = _get(served, "/health").json()
    limit = sandbox.memory_limit_of(sandbox.connect(served.query_memory_limit, 1))
    assert health["query_engine"]["memory_limit"] == limit
    assert 0 < health["query_engine"]["memory_mb"] < 1024  # the views' copies, read for /health itself
    assert health["batch_engine"] == {
        "running": False,
        "healthy": False,
        "url": served.batch_engine_url,
        "master": served.spark_master_url,
        "rss_mb": None,
    }  # none in its home
    [(dead,)] = engine.query(served, "SELECT count(*) FROM dead_letters")[1]
    assert dead > 0 and health["dead_letters"] == dead
    assert health["speed_layer"]["running"] is False and health["speed_rows_age_seconds"] >= 0
    page_views = health["views"]["page_views_per_minute"]
    assert (page_views["final_days"], page_views["provisional_days"]) == (
        str(DAY.date()),
        str((DAY + timedelta(days=1)).date()),
    )


def test_openapi_describes_every_route(served):
    paths = _get(served, "/openapi.json").json()["paths"]
    assert {"/views", "/views/{name}", "/query", "/health"} <= set(paths)


def test_a_set_token_is_required_by_every_route_of_the_deployment_s_data(served, tmp_path_factory, deployment):
    settings = _home(tmp_path_factory, deployment, "token", serve_port=free_port(), serve_token="s3cret")
    settings.data.mkdir(parents=True)
    services.start_serving(settings)
    try:
        assert [_get(settings, path).status_code for path in ("/views", "/views/page_views_per_minute", "/health")] == [
            401
        ] * 3
        assert requests.post(settings.serve_url + "query", json={"sql": "SELECT 1"}, timeout=30).status_code == 401
        assert [_get(settings, path).status_code for path in ("/openapi.json", "/")] == [200, 200]
        ok = requests.get(settings.serve_url + "views", headers={"Authorization": "Bearer s3cret"}, timeout=30)
        assert ok.status_code == 200
    finally:
        processes.stop(settings, services.SERVING)


def test_dashboard_charts_final_and_provisional_rows_and_runs_a_query(served):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium() as browser:
        browser.get(served.serve_url)
        wait = WebDriverWait(browser, 60)
        points = lambda trace: browser.find_elements(  # noqa: E731
            By.CSS_SELECTOR, f"#chart g.trace.scatter:nth-of-type({trace}) path.point"
        )
        wait.until(lambda _: points(1) and points(2))  # final (batch) and provisional (speed) rows
        legend = browser.find_element(By.CSS_SELECTOR, "#chart .legend").text
        assert "final (batch)" in legend and "provisional (speed)" in legend
        assert "dead letters" in browser.find_element(By.ID, "health").text
        sql = browser.find_element(By.ID, "sql")
        first = browser.find_element(By.ID, "view").get_attribute("value")  # the example query reads the first view
        assert sql.get_attribute("value") == f"SELECT * FROM {first} ORDER BY window_start DESC LIMIT 20"
        sql.clear()
        sql.send_keys("SELECT page, sum(views) AS views FROM page_views_per_minute GROUP BY page ORDER BY page")
        browser.find_element(By.ID, "run").click()
        wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#result tr")) > 1)
        pages = engine.query(served, "SELECT count(DISTINCT page) FROM page_views_per_minute")[1][0][0]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#result tr")) == pages + 1
        screenshot(browser, "dashboard.png")
