"""Great Expectations checks at the engine's cost, on real Spark: a view's suite in one Spark job over its
rows, raw_events' in a few over its records, failing rows named by their keys, and the suites written to
the GX project only when their definition changes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
from pyspark.sql import functions as F

from batch_layer import quality
from batch_layer.quality import QualityFailed
from domains.clickstream.generator import generate
from domains.sample import Mix
from infra.deployment import REPO
from tests.integration.records import land
from views import compile, get, timebase

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 20, tzinfo=timebase.UTC)
END = DAY + timedelta(days=1)
VIEW = get("page_views_per_minute")
PASSED = {
    "every row: views > 0",
    "every row: unique_users BETWEEN 1 AND views",
    "views sums to the days' valid unique page_view events in raw_events",
}
RAW_EVENTS = [
    "every event has event_id",
    "every event has event_time",
    "every event has event_type",
    "every event has user_id",
    "every event has session_id",
    "every event type is known",
    "every event is in its own day's partition",
    "at most 20% of the records are resent copies",
    "the days have events",
]


@pytest.fixture
def landed(spark, tables):
    """Two days of messy records (late, resent, malformed) landed in raw_events."""
    land(
        spark,
        tables,
        generate(DAY - timedelta(days=1), END, 3000, seed=11, mix=Mix(late=0.05, duplicate=0.05, malformed=0.03)),
    )


@pytest.fixture
def numbered(spark, tables, landed):
    """raw_events' records, each told whether it is its event_id's first copy, cached as a recompute
    caches them."""
    records = quality.with_first_copy(spark.read.format("delta").load(tables.table("raw_events"))).persist()
    records.count()
    yield records
    records.unpersist()


def _rows(numbered, view=VIEW, start=DAY, end=END):
    """``view``'s rows of ``[start, end)`` from the first copies, cached and computed."""
    events = numbered.where(quality.FIRST_COPY).drop(quality.FIRST_COPY)
    rows = (
        compile.batch(view, events, {})
        .where((F.col("window_start") >= F.lit(start)) & (F.col("window_start") < F.lit(end)))
        .persist()
    )
    rows.count()
    return rows


@contextmanager
def counted(spark):
    """The Spark jobs run in the block (a job group of the classic session): a list that holds their
    number once the block ends."""
    context, group, found = spark.sparkContext, f"quality-{uuid.uuid4()}", []
    context.setJobGroup(group, "counted by the test")
    try:
        yield found
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
        found.append(len(context.statusTracker().getJobIdsForGroup(group)))


def test_a_views_suite_is_one_spark_job_that_tells_its_rows_per_day(spark, tables, numbered):
    start = DAY - timedelta(days=1)
    rows = _rows(numbered, start=start)
    events = numbered.where(quality.FIRST_COPY).drop(quality.FIRST_COPY)
    unique = quality.unique_events(events, start, END)
    assert unique == {
        r.event_type: r["count"]
        for r in compile.first_copies(spark.read.format("delta").load(tables.table("raw_events")))
        .where((F.col("event_time") >= F.lit(start)) & (F.col("event_time") < F.lit(END)))
        .groupBy("event_type")
        .count()
        .collect()
    }

    with counted(spark) as jobs:
        done = quality.check_view(tables, VIEW, rows, unique, start, END)
    assert jobs == [1]
    assert {(e, severity, ok) for e, severity, ok, _ in done.results} == {(e, "critical", True) for e in PASSED}
    assert dict((e, observed) for e, _, _, observed in done.results)[
        "views sums to the days' valid unique page_view events in raw_events"
    ] == str(unique["page_view"])
    assert done.per_day == {
        r.day: r["count"] for r in rows.groupBy(F.to_date("window_start").alias("day")).count().collect()
    }
    assert set(done.per_day) == {start.date(), DAY.date()} and done.failing == {}

    with counted(spark) as jobs:  # given the first copies instead, it counts them itself
        again = quality.check_view(tables, VIEW, rows, events, start, END)
    assert again.results == done.results and again.per_day == done.per_day and jobs[0] > 1
    rows.unpersist()


def test_a_failing_expectation_stops_the_check_and_names_the_failing_rows(spark, tables, numbered):
    rows = _rows(numbered)
    failing = {(timebase.utc(r.window_start).isoformat(), r.page) for r in rows.where("NOT (views < 2)").collect()}
    assert 0 < len(failing) < rows.count()
    strict = dataclasses.replace(VIEW, expectations=("views > 0", "views < 2", "IF(views >= 2, NULL, true)"))
    unique = quality.unique_events(numbered.where(quality.FIRST_COPY), DAY, END)

    with pytest.raises(
        QualityFailed,
        match=r"view.page_views_per_minute for 2026-11-20..2026-11-20: failed every "
        r"row: views < 2; every row: IF\(views >= 2, NULL, true\); nothing was "
        r"written .* \(failing rows: every row: views < 2: "
        r"\(window_start=2026-11-20T",
    ) as stopped:
        quality.check_view(tables, strict, rows, unique, DAY, END)
    check = stopped.value.check
    for expectation in ("every row: views < 2", "every row: IF(views >= 2, NULL, true)"):  # a null fails too
        listed = check.failing[expectation]
        assert len(listed) == min(quality.SHOWN, len(failing))
        assert {(keys["window_start"], keys["page"]) for keys in listed} <= failing
        assert dict((e, observed) for e, _, _, observed in check.results)[expectation] == str(len(failing))
    assert check.failed == ["every row: views < 2", "every row: IF(views >= 2, NULL, true)"]

    # the COMPLETE result kept for the Data Docs lists every failing row's window and key
    [stored] = (tables.gx / "uncommitted" / "validations" / "view" / "page_views_per_minute").rglob("*.json")
    results = {r["expectation_config"]["description"]: r["result"] for r in json.loads(stored.read_text())["results"]}
    listed = results["every row: views < 2"]["unexpected_index_list"]
    pages = [p for row in listed for p in (row["page"] if isinstance(row["page"], list) else [row["page"]])]
    assert Counter(pages) == Counter(page for _, page in failing)
    [page] = (tables.data_docs.parent / "validations" / "view" / "page_views_per_minute").rglob("*.html")
    first = check.failing["every row: views < 2"][0]
    assert first["window_start"] in page.read_text() and first["page"] in page.read_text()  # and in the Data Docs
    rows.unpersist()


def test_the_reconciliation_compares_with_the_days_unique_events(spark, tables, numbered):
    rows = _rows(numbered)
    unique = quality.unique_events(numbered.where(quality.FIRST_COPY), DAY, END)
    quality.check_view(tables, VIEW, rows, unique, DAY, END)
    with pytest.raises(
        QualityFailed,
        match="failed views sums to the days' valid unique page_view events in raw_events; nothing was written",
    ) as stopped:
        quality.check_view(tables, VIEW, rows, {**unique, "page_view": unique["page_view"] + 1}, DAY, END)
    assert stopped.value.check.failing == {}  # a sum has no failing rows
    rows.unpersist()


def test_raw_events_are_checked_in_a_few_spark_jobs_and_failing_records_named(spark, tables, numbered):
    with counted(spark) as jobs:
        done = quality.check_raw_events(tables, numbered, DAY, END)
    assert jobs[0] <= 4  # GX's bundled aggregations; 23 when its lists of unexpected values were kept
    assert sorted(e for e, _, _, _ in done.results) == sorted(RAW_EVENTS) and done.failed == []
    day = numbered.where(F.col("event_date") == F.lit(DAY.date()))
    observed = dict((e, o) for e, _, _, o in done.results)
    assert observed["the days have events"] == str(day.count())
    assert observed["at most 20% of the records are resent copies"] == str(
        day.where(~F.col(quality.FIRST_COPY)).count()
    )

    plain = numbered.drop(quality.FIRST_COPY)  # records not numbered: the check numbers them itself
    assert quality.check_raw_events(tables, plain, DAY, END).results == done.results

    # purchases of the day moved a day on: no longer in their own day's partition
    moved = F.col("event_type") == "purchase"
    broken = numbered.withColumn(
        "event_time", F.when(moved, F.col("event_time") + F.expr("INTERVAL 1 DAY")).otherwise(F.col("event_time"))
    )
    failing = {(r.event_id, str(r.partition), str(r.offset)) for r in day.where(moved).collect()}
    with pytest.raises(
        QualityFailed,
        match=r"raw_events for 2026-11-20..2026-11-20: failed every event is in its "
        r"own day's partition; nothing was written .* \(failing rows: every event "
        r"is in its own day's partition: \(event_id=",
    ) as stopped:
        quality.check_raw_events(tables, broken, DAY, END)
    listed = stopped.value.check.failing["every event is in its own day's partition"]
    assert len(listed) == quality.SHOWN and {(k["event_id"], k["partition"], k["offset"]) for k in listed} <= failing
    assert dict((e, o) for e, _, _, o in stopped.value.check.results)[
        "every event is in its own day's partition"
    ] == str(len(failing))


def test_first_copies_and_unique_events_from_the_numbered_records(spark, tables, numbered):
    first = compile.first_copies(spark.read.format("delta").load(tables.table("raw_events")))
    ours = numbered.where(quality.FIRST_COPY).drop(quality.FIRST_COPY)
    assert sorted(ours.collect()) == sorted(first.collect())
    within = first.where((F.col("event_time") >= F.lit(DAY)) & (F.col("event_time") < F.lit(END)))
    assert quality.unique_events(ours, DAY, END) == dict(Counter(r.event_type for r in within.collect()))


def _definitions(tables) -> dict:
    """Every file of the GX project but its results and Data Docs, with its time of last change."""
    return {p: p.stat().st_mtime_ns for p in tables.gx.rglob("*") if p.is_file() and "uncommitted" not in p.parts}


def test_suites_and_checkpoints_are_written_only_when_their_definition_changes(spark, tables, numbered, monkeypatch):
    rows = _rows(numbered)
    unique = quality.unique_events(numbered.where(quality.FIRST_COPY), DAY, END)
    quality.check_view(tables, VIEW, rows, unique, DAY, END)
    quality.check_raw_events(tables, numbered, DAY, END)
    written = _definitions(tables)
    assert {p.relative_to(tables.gx).as_posix() for p in written} >= {
        "expectations/view/page_views_per_minute.json",
        "checkpoints/view.page_views_per_minute.json",
        "expectations/raw_events.json",
        "checkpoints/raw_events.json",
        "great_expectations.yml",
    }

    monkeypatch.setattr(quality, "_checkpoints", {})  # as a new process finds them
    monkeypatch.setattr(quality, "_contexts", {})
    quality.check_view(tables, VIEW, rows, unique, DAY, END)
    quality.check_raw_events(tables, numbered, DAY, END)
    assert _definitions(tables) == written

    wider = dataclasses.replace(VIEW, expectations=(*VIEW.expectations, "views < 100000"))
    done = quality.check_view(tables, wider, rows, unique, DAY, END)
    assert "every row: views < 100000" in [e for e, _, _, _ in done.results]
    changed = {p.relative_to(tables.gx).as_posix() for p, t in _definitions(tables).items() if written.get(p) != t}
    assert changed == {
        "expectations/view/page_views_per_minute.json",
        "checkpoints/view.page_views_per_minute.json",
        "validation_definitions/view.page_views_per_minute.json",
    }
    assert "views < 100000" in (tables.gx / "expectations" / "view" / "page_views_per_minute.json").read_text()
    rows.unpersist()


def test_a_project_the_previous_checks_wrote_is_taken_over(spark, tables, numbered, monkeypatch):
    """The previous version checked a view's rows through the Spark data source (which persisted them):
    its suite, asset, validation definition and checkpoint are replaced, not left to fail."""
    import great_expectations as gx
    from great_expectations.expectations import UnexpectedRowsExpectation

    name = f"view.{VIEW.name}"
    old = gx.get_context(mode="file", project_root_dir=str(tables.home))
    suite = old.suites.add_or_update(
        gx.ExpectationSuite(
            name=name,
            expectations=[
                UnexpectedRowsExpectation(
                    unexpected_rows_query="SELECT * FROM {batch} WHERE NOT coalesce(views > 0, false)"
                )
            ],
        )
    )
    batch = (
        old.data_sources.add_or_update_spark(name="lambdalake")
        .add_dataframe_asset(name=name)
        .add_batch_definition_whole_dataframe(name)
    )
    validation = old.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    old.checkpoints.add_or_update(gx.Checkpoint(name=name, validation_definitions=[validation], actions=[]))
    monkeypatch.setattr(quality, "_checkpoints", {})  # a new process
    monkeypatch.setattr(quality, "_contexts", {})

    rows = _rows(numbered)
    unique = quality.unique_events(numbered.where(quality.FIRST_COPY), DAY, END)
    done = quality.check_view(tables, VIEW, rows, unique, DAY, END)
    assert {e for e, _, ok, _ in done.results if ok} == PASSED
    quality.check_raw_events(tables, numbered, DAY, END)  # its suite (new to this project) on the Spark source
    context = quality._context(tables)
    assert context.data_sources.get("lambdalake").persist is False
    [validation] = context.checkpoints.get(name).validation_definitions
    assert validation.data.data_asset.datasource.name == "lambdalake_rows"
    rows.unpersist()


#: One process of a backfill's runs in flight: once ``go`` exists, it checks rows of two views that
#: pass their suites, each view's first (the GX project is new to all of them).
CHECKER = """
import os, sys, time
from datetime import datetime, timedelta
import pandas as pd
from batch_layer import quality
from infra import deployment as config
from views import get, timebase
day = datetime(2026, 11, 20, tzinfo=timebase.UTC)
deployment = config.load()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
for name in sys.argv[2:]:
    view = get(name)
    row = {"window_start": pd.Timestamp(day), **{k: "k" for k in view.keys},
           **{m: 1 for m in quality.reconciled(view)}, **{c: True for c in quality.conditions(view).values()}}
    done = quality.check(deployment, quality.view_suite(view), pd.DataFrame([row]), day, day + timedelta(days=1),
                         {quality.UNIQUE_EVENTS: 1})
    assert not done.failed, done
"""


def test_runs_in_flight_on_a_new_gx_project_all_pass_their_checks(tables):
    """Processes that check at once, as a backfill's runs do on a deployment's first night, each write
    or take over the suites without invalidating one another's (GX refuses a checkpoint whose suite
    was saved again since it was loaded)."""
    go = tables.home / "go"
    env = {**os.environ, "LAMBDALAKE_HOME": str(tables.home), "PYTHONPATH": str(REPO)}
    order = ["page_views_per_minute", "sessions_hourly"]
    checkers = [
        subprocess.Popen(
            [sys.executable, "-c", CHECKER, str(go), *(order if i % 2 else order[::-1])],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    time.sleep(8)  # all of them have imported GX and loaded the (empty) project
    go.touch()
    errors = [checker.communicate(timeout=300)[1] for checker in checkers]
    assert [checker.returncode for checker in checkers] == [0] * 4, [e.strip().splitlines()[-1:] for e in errors]
