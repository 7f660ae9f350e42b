"""The command line's contract: wrong arguments and bad queries exit non-zero with one line."""

import json
import subprocess
import sys

import pytest

from infra.deployment import REPO
from tests.ports import free_port

pytestmark = pytest.mark.processes


def run(home, *args):
    return subprocess.run(
        [sys.executable, "-m", "lambdalake.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"LAMBDALAKE_HOME": str(home), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("frobnicate",),
        ("query",),
        ("produce", "--rate", "-3"),
        ("query", "SELECT 1", "--format", "xml"),
        ("speed", "pause"),
        ("reprocess",),
        ("reprocess", "--label", "v2", "--switch-back"),
        ("reprocess", "--label", "v2", "--from", "2026-11-31", "--to", "2026-12-01"),
        ("reprocess", "--switch-back", "--all"),
    ],
)
def test_wrong_arguments_get_one_line_and_exit_2(tmp_path, args):
    done = run(tmp_path, *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "error:" in done.stderr


@pytest.mark.parametrize("sql,needle", [("SELECT * FROM no_such_view", "no_such_view"), ("SELEC 1", "syntax error")])
def test_bad_queries_exit_1_with_one_line(tmp_path, sql, needle):
    done = run(tmp_path, "query", sql)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--label", "V2", "--all"), "label 'V2': use 1 to 40 lowercase letters"),
        (("--label", "v2", "--views", "page_views_per_minute,nope", "--all"), "unknown view(s) nope; known views:"),
        (("--label", "v2", "--from", "2026-11-01"), "give the days to reprocess"),
        (("--label", "v2", "--from", "2026-11-01", "--to", "2999-01-01"), "2999-01-01 has not ended yet"),
        (("--label", "v2", "--all"), "no raw_events table"),
        (("--switch-back", "--views", "sessions_hourly"), "no previous version to switch back to for sessions_hourly"),
    ],
)
def test_reprocess_mistakes_exit_1_with_one_line(tmp_path, args, needle):
    done = run(tmp_path, "reprocess", *args)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--changelog", "shoes", "--days", "1"), "domain clickstream has no dimension 'shoes'; it has products"),
    ],
)
def test_produce_mistakes_exit_1_with_one_line(tmp_path, args, needle):
    done = run(tmp_path, "produce", *args)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr


def test_produce_to_a_stopped_broker_exits_1_with_one_line(tmp_path):
    port = free_port()
    (tmp_path / "settings.json").write_text(json.dumps({"kafka_port": port}))
    done = run(tmp_path, "produce", "--days", "1", "--per-day", "10")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"lambdalake: error: cannot send to Kafka at 127.0.0.1:{port} (KafkaTimeoutError: Unable "
        f"to bootstrap from 127.0.0.1:{port}); is it running? (`lambdalake status`)\n"
    )


def test_an_unknown_domain_is_named_with_the_known_ones(tmp_path):
    (tmp_path / "settings.json").write_text(json.dumps({"domain": "shop"}))
    done = run(tmp_path, "views")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and "unknown domain 'shop'" in done.stderr
    assert "ads" in done.stderr and "clickstream" in done.stderr


def test_query_formats(tmp_path):
    assert run(tmp_path, "query", "SELECT 1 AS a, 'x' AS b", "--format", "csv").stdout.splitlines() == ["a,b", "1,x"]
    assert json.loads(run(tmp_path, "query", "SELECT 1 AS a", "--format", "json").stdout) == [{"a": 1}]
    assert "(1 row)" in run(tmp_path, "query", "SELECT 1 AS a").stdout


def test_views_lists_every_declared_view(tmp_path):
    from views import all_views

    listing = {v["name"]: v for v in json.loads(run(tmp_path, "views", "--json").stdout)}
    assert list(listing) == list(all_views()) and len(listing) == 6
    pvpm = listing["page_views_per_minute"]
    assert pvpm["approximate_in_speed"] == ["unique_users"] and pvpm["keys"] == ["page"]
    assert (pvpm["final_days"], pvpm["provisional_days"]) == ("none", "none")
    assert pvpm["speed_states"] == ["_rows", "views", "unique_users_sketch"]
    assert listing["trending_products"]["window"] == "hopping 0:10:00 every 0:01:00"
    assert listing["sessions_hourly"]["speed_states"] == [
        "_rows",
        "sessions",
        "avg_duration_s_sum",
        "avg_duration_s_count",
        "avg_events_sum",
        "avg_events_count",
    ]
    assert "products.category by product_id" in listing["revenue_by_category_hourly"]["joins"][0]


def test_a_view_declared_outside_the_package_is_listed(tmp_path):
    (tmp_path / "settings.json").write_text('{"view_modules": ["tests.extra_view"]}')
    listing = {v["name"]: v for v in json.loads(run(tmp_path, "views", "--json").stdout)}
    assert listing["purchases_per_product_hourly"]["measures"] == ["purchases", "buyers", "fewest_items", "most_items"]
    assert "purchases_per_product_hourly" in run(tmp_path, "views").stdout


def test_a_view_module_without_a_view_is_reported(tmp_path):
    (tmp_path / "settings.json").write_text('{"view_modules": ["tests.oracle"]}')
    done = run(tmp_path, "views")
    assert done.returncode == 1 and "module tests.oracle (setting view_modules) declares no VIEW" in done.stderr


def test_unknown_setting_is_reported(tmp_path):
    (tmp_path / "settings.json").write_text('{"kafka_prot": 1}')
    done = run(tmp_path, "views")
    assert done.returncode == 1 and "unknown setting(s) kafka_prot" in done.stderr
