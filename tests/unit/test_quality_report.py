"""What status, /health and the dashboard tell about data quality (each suite's last check only) and
about corrections (how far speed rows were off when batch made their days final)."""

import json
import threading
from datetime import date, datetime

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from infra.deployment import Deployment, load
from serving_layer import catalog
from tests.unit.test_cli import run
from views import tables
from views.timebase import UTC


def test_each_suite_is_summarised_by_its_last_check(tmp_path):
    settings = load(tmp_path)
    day = date(2026, 11, 22)

    def result(hour, suite, expectation, severity, success):
        return {
            "checked_at": datetime(2026, 11, 23, hour, tzinfo=UTC),
            "suite": suite,
            "first_day": day,
            "last_day": day,
            "expectation": expectation,
            "severity": severity,
            "success": success,
            "observed": None,
        }

    write_deltalake(
        settings.table("quality_results"),
        pa.Table.from_pylist(
            [
                result(1, "raw_events", "keys", "critical", False),  # an earlier check that failed
                result(2, "raw_events", "keys", "critical", True),
                result(2, "raw_events", "few copies", "warning", False),
                result(3, "view.page_views_per_minute", "every row: views > 0", "critical", False),
            ]
        ),
    )
    report = catalog.quality(settings)
    assert report.data_docs == str(tmp_path / "gx/uncommitted/data_docs/local_site/index.html")
    assert {suite: (c.failed, c.warnings, c.checked_at.hour, c.first_day) for suite, c in report.suites.items()} == {
        "raw_events": (0, 1, 2, day),
        "view.page_views_per_minute": (1, 0, 3, day),
    }


def test_no_checks_yet(tmp_path):
    assert catalog.quality(load(tmp_path)).suites == {}


def test_a_views_check_is_reported_and_names_its_failing_rows(tmp_path):
    """A view's suite runs on its rows brought to the driver (pandas, no Spark): each declared condition
    is a boolean column, and a failure names the rows by window and key."""
    import pandas as pd
    import pytest

    from batch_layer import quality
    from views import get

    settings, view = load(tmp_path), get("page_views_per_minute")
    start, end = datetime(2026, 11, 22, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC)
    frame = pd.DataFrame(
        {
            "window_start": pd.to_datetime(["2026-11-22 00:01", "2026-11-22 00:01", "2026-11-22 00:02"], utc=True),
            "page": ["/a", "/b", "/a"],
            "views": [3, 1, 2],
        }
    )
    holds = {"views > 0": [True, True, True], "unique_users BETWEEN 1 AND views": [True, True, True]}
    assert quality.conditions(view) == {c: c for c in holds}
    done = quality.check(
        settings, quality.view_suite(view), frame.assign(**holds), start, end, {quality.UNIQUE_EVENTS: 6}
    )
    assert done.failed == [] and done.failing == {}

    holds["unique_users BETWEEN 1 AND views"] = [True, False, True]
    with pytest.raises(
        quality.QualityFailed,
        match=r"failed every row: unique_users BETWEEN 1 AND views; views sums "
        r"to the days' valid unique page_view events in raw_events; "
        r"nothing was written .* \(failing rows: every row: unique_users "
        r"BETWEEN 1 AND views: \(window_start=2026-11-22T00:01:00\+00:00, "
        r"page=/b\)\)$",
    ) as stopped:
        quality.check(settings, quality.view_suite(view), frame.assign(**holds), start, end, {quality.UNIQUE_EVENTS: 7})
    assert stopped.value.check.failing == {
        "every row: unique_users BETWEEN 1 AND views": [{"window_start": "2026-11-22T00:01:00+00:00", "page": "/b"}]
    }
    assert {(e, observed) for e, _, ok, observed in stopped.value.check.results if not ok} == {
        ("every row: unique_users BETWEEN 1 AND views", "1"),
        ("views sums to the days' valid unique page_view events in raw_events", "6"),
    }
    assert catalog.quality(settings).suites["view.page_views_per_minute"].failed == 2


@pytest.mark.processes
def test_status_shows_each_suites_last_check_and_each_measures_corrections(tmp_path):
    settings = load(tmp_path)
    day = date(2026, 11, 22)
    write_deltalake(
        settings.table("quality_results"),
        pa.Table.from_pylist(
            [
                {
                    "checked_at": datetime(2026, 11, 23, 2, tzinfo=UTC),
                    "suite": "raw_events",
                    "first_day": day,
                    "last_day": day,
                    "expectation": "keys",
                    "severity": "critical",
                    "success": False,
                    "observed": None,
                }
            ]
        ),
    )
    write_deltalake(
        settings.table("corrections"),
        pa.Table.from_pylist(
            [
                {
                    "computed_at": datetime(2026, 11, 23, hour, tzinfo=UTC),
                    "view": "page_views_per_minute",
                    "first_day": day,
                    "last_day": day,
                    "measure": "views",
                    "speed_windows": 10,
                    "batch_windows": 11,
                    "added": 1,
                    "removed": 0,
                    "changed": hour,
                    "difference": 2.0 * hour,
                    "relative_difference": 0.01 * hour,
                }
                for hour in (1, 3)
            ],
            schema=tables.CORRECTIONS.schema,
        ),
    )

    done = run(tmp_path, "status", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["quality"]["suites"] == {
        "raw_events": {
            "checked_at": "2026-11-23 02:00:00+00:00",
            "first_day": "2026-11-22",
            "last_day": "2026-11-22",
            "failed": 1,
            "warnings": 0,
        }
    }
    [correction] = report["corrections"]
    assert correction == {
        "view": "page_views_per_minute",
        "measure": "views",
        "reports": 2,
        "mean_relative_difference": pytest.approx(0.02),
        "last": {
            "first_day": "2026-11-22",
            "last_day": "2026-11-22",
            "added": 1,
            "removed": 0,
            "changed": 3,
            "difference": 6.0,
            "relative_difference": pytest.approx(0.03),
        },
    }

    done = run(tmp_path, "status")
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert ["raw_events", "2026-11-22..2026-11-22", "1", "0", "2026-11-23", "02:00:00+00:00"] in lines
    assert ["page_views_per_minute.views", "2.00%", "2", "2026-11-22..2026-11-22", "1", "0", "3", "6", "3.00%"] in lines


def test_appends_at_once_to_a_table_not_made_yet_all_land(tmp_path):
    """A recompute's views append their results at once; the first appends make the table, and the one
    that loses that race goes again rather than failing the run."""
    settings, table = Deployment(home=tmp_path / "home"), tables.QUALITY_RESULTS
    together = threading.Barrier(8)
    failed: list[Exception] = []

    def append() -> None:
        together.wait()
        try:
            table.append(settings, [dict.fromkeys(table.schema.names)])
        except Exception as error:  # the assertion names it
            failed.append(error)

    appenders = [threading.Thread(target=append) for _ in range(8)]
    for appender in appenders:
        appender.start()
    for appender in appenders:
        appender.join()
    assert not failed and table.rows(settings).num_rows == 8
