"""A status query that fails is an error, never "no rows": the catalog raises it naming the table, the
HTTP API's /health answers a one-line 500, and `lambdalake status` one line and exit 1."""

import json
import subprocess
import sys

import pyarrow as pa
import pytest
import requests
from deltalake import write_deltalake

from infra import processes, services
from infra.deployment import REPO, load
from serving_layer import catalog
from serving_layer.sandbox import QueryError
from tests.ports import free_port

FAILED = "reading dead_letters failed: Invalid Input Error: reading the stream registered as 'dead_letters' failed"


@pytest.fixture
def broken(tmp_path):
    """A deployment whose dead_letters table has lost its data file to corruption, on ports of its own."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"airflow_port": free_port(), "serve_port": free_port()}))
    settings = load(home)
    write_deltalake(settings.table("dead_letters"), pa.table({"reason": ["not JSON"], "value": [b"{"]}))
    for part in (settings.data / "dead_letters").glob("*.parquet"):
        part.write_bytes(b"not parquet")
    return settings


def test_a_missing_table_is_no_rows_and_a_failing_query_an_error(tmp_path, broken):
    count = "SELECT count(*) AS records FROM dead_letters"
    assert catalog.rows(load(tmp_path / "new"), "dead_letters", count) == []
    with pytest.raises(QueryError, match="^" + FAILED) as failed:
        catalog.rows(broken, "dead_letters", count)
    assert "\n" not in str(failed.value)


@pytest.mark.processes
def test_health_answers_a_failing_query_with_a_one_line_server_error(broken):
    services.start_serving(broken)
    try:
        response = requests.get(f"{broken.serve_url}health", timeout=30)
    finally:
        processes.stop(broken, services.SERVING)
    assert response.status_code == 500
    assert response.json()["detail"].startswith(FAILED) and "\n" not in response.json()["detail"]


@pytest.mark.processes
def test_status_reports_a_failing_query_in_one_line(broken):
    done = subprocess.run(
        [sys.executable, "-m", "lambdalake.cli", "status"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"LAMBDALAKE_HOME": str(broken.home), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"lambdalake: error: {FAILED}") and len(done.stderr.splitlines()) == 1
