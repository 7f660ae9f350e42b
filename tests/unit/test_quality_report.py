"""What status, /health and the dashboard tell about data quality: each suite's last check only."""

from datetime import date, datetime

import pyarrow as pa
from deltalake import write_deltalake

from infra.settings import load
from serving_layer import catalog
from views.timebase import UTC


def test_each_suite_is_summarised_by_its_last_check(tmp_path):
    settings = load(tmp_path)
    day = date(2026, 11, 22)

    def result(hour, suite, expectation, severity, success):
        return {"checked_at": datetime(2026, 11, 23, hour, tzinfo=UTC), "suite": suite, "first_day": day,
                "last_day": day, "expectation": expectation, "severity": severity, "success": success,
                "observed": None}

    write_deltalake(settings.table("quality_results"), pa.Table.from_pylist([
        result(1, "raw_events", "keys", "critical", False),  # an earlier check that failed
        result(2, "raw_events", "keys", "critical", True),
        result(2, "raw_events", "few copies", "warning", False),
        result(3, "view.page_views_per_minute", "every row: views > 0", "critical", False),
    ]))
    report = catalog.quality(settings)
    assert report["data_docs"] == str(tmp_path / "gx/uncommitted/data_docs/local_site/index.html")
    assert {suite: (c["failed"], c["warnings"], c["checked_at"].hour) for suite, c in report["suites"].items()} == {
        "raw_events": (0, 1, 2), "view.page_views_per_minute": (1, 0, 3)}


def test_no_checks_yet(tmp_path):
    assert catalog.quality(load(tmp_path))["suites"] == {}
