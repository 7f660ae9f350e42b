"""The batch layer on real Spark and Delta: exact against the oracle, idempotent, atomic on failure."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from pyspark.sql import functions as F

from batch_layer import quality
from batch_layer.quality import QualityFailed
from batch_layer.recompute import recompute_day, recompute_view
from domains.clickstream.generator import generate
from domains.sample import Mix
from infra import storage
from lake import ledger, versions
from speed_layer.queries import ensure_tables
from tests import oracle
from tests.integration.records import land
from views import compile, get, timebase
from views.tables import QUALITY_RESULTS

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 20, tzinfo=timebase.UTC)
VIEW = get("page_views_per_minute")


@pytest.fixture
def landed(spark, tables):
    """Two days of messy records (late, resent, malformed) parsed and landed in raw_events."""
    records = generate(
        DAY - timedelta(days=1),
        DAY + timedelta(days=1),
        3000,
        seed=11,
        mix=Mix(late=0.05, duplicate=0.05, malformed=0.03),
    )
    land(spark, tables, records)
    return records


def _batch_rows(spark, tables) -> dict:
    rows = spark.read.format("delta").load(versions.current(tables, VIEW.name)).collect()
    for row in rows:
        assert row.window_end - row.window_start == timedelta(minutes=1)
    return {(timebase.utc(r.window_start), r.page): (r.views, r.unique_users) for r in rows}


def test_batch_day_equals_oracle_and_rerun_converges(spark, tables, landed):
    expected = {k: v for k, v in oracle.views(landed)[VIEW.name].items() if DAY <= k[0] < DAY + timedelta(days=1)}
    summary = recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    assert _batch_rows(spark, tables) == expected
    assert (summary.rows, summary.days, summary.final_days) == (len(expected), (str(DAY.date()),), str(DAY.date()))

    recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    assert _batch_rows(spark, tables) == expected


def test_recompute_replaces_only_its_day(spark, tables, landed):
    everything = oracle.views(landed)[VIEW.name]
    before, day = DAY - timedelta(days=1), timedelta(days=1)
    recompute_view(spark, tables, VIEW, before, DAY)
    summary = recompute_view(spark, tables, VIEW, DAY, DAY + day)
    assert _batch_rows(spark, tables) == {k: v for k, v in everything.items() if before <= k[0] < DAY + day}
    assert summary.final_days == f"{before.date()}..{DAY.date()}"


def test_days_are_final_in_whatever_order_they_were_computed(spark, tables, landed):
    recompute_view(spark, tables, VIEW, DAY + timedelta(days=1), DAY + timedelta(days=2))
    summary = recompute_view(spark, tables, VIEW, DAY - timedelta(days=1), DAY)
    assert summary.final_days == f"{(DAY - timedelta(days=1)).date()}, {(DAY + timedelta(days=1)).date()}"


def test_the_ledger_records_how_far_a_days_sessions_reach(spark, tables, landed):
    """sessions_hourly's day stays open to later events until 30 minutes after the newest event of a
    session that began on it (the oracle's sessions); page_views_per_minute's until its end."""
    for name in ("sessions_hourly", VIEW.name, "search_ctr_hourly"):
        recompute_view(spark, tables, get(name), DAY, DAY + timedelta(days=1))
    recorded = {entry.view: entry.open_until for entry in ledger.entries(tables) if entry.day == DAY.date()}
    newest = max(last for first, last, _ in oracle.sessions(oracle.events(landed)) if first.date() == DAY.date())
    assert recorded["sessions_hourly"] == max(DAY + timedelta(days=1), newest + timedelta(minutes=30))
    assert recorded[VIEW.name] == DAY + timedelta(days=1)
    assert recorded["search_ctr_hourly"] == DAY + timedelta(days=1, minutes=30)


def test_without_raw_events_nothing_is_written(spark, tables):
    with pytest.raises(FileNotFoundError, match="no raw_events table"):
        recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    assert storage.delta_tables(tables.storage_root) == []


def test_a_failing_raw_events_check_stops_every_view_before_it_writes(spark, tables, landed):
    ensure_tables(spark, tables)  # the dimensions some views join (empty)
    raw_events = tables.table("raw_events")
    moved = (
        spark.read.format("delta")
        .load(raw_events)
        .where(F.col("event_date") == DAY.date())
        .limit(1)
        .withColumn("event_time", F.col("event_time") + F.expr("INTERVAL 1 DAY"))
    )  # out of its day's partition
    moved.write.format("delta").mode("append").save(raw_events)
    before = storage.delta_tables(tables.storage_root)
    with pytest.raises(
        QualityFailed,
        match=r"raw_events for 2026-11-20..2026-11-20: failed every event is in its "
        r"own day's partition; nothing was written",
    ):
        recompute_day(spark, tables, DAY, DAY + timedelta(days=1))
    created = [t for t in storage.delta_tables(tables.storage_root) if t not in before]
    assert [t.rsplit("/", 1)[-1] for t in created] == ["quality_results"]  # no view's rows, no ledger
    failed = [r for r in _results(spark, tables, "raw_events") if not r.success]
    assert [r.expectation for r in failed] == ["every event is in its own day's partition"]


def test_interval_must_be_whole_days(spark, tables, landed):
    with pytest.raises(ValueError, match="whole UTC days"):
        recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(hours=5))
    assert storage.folders(tables.table("batch")) == []


def _results(spark, tables, suite: str) -> list:
    return (
        spark.read.format("delta")
        .load(tables.table("quality_results"))
        .where(f"suite = '{suite}'")
        .orderBy("checked_at", "expectation")
        .collect()
    )


def test_a_broken_expectation_writes_nothing_and_is_reported(spark, tables, landed):
    recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    before = _batch_rows(spark, tables)
    passed = _results(spark, tables, f"view.{VIEW.name}")
    assert {(r.expectation, r.success) for r in passed} == {
        ("every row: views > 0", True),
        ("every row: unique_users BETWEEN 1 AND views", True),
        ("views sums to the days' valid unique page_view events in raw_events", True),
    }

    strict = dataclasses.replace(VIEW, expectations=("views > 0", "views > 1000"))
    with pytest.raises(
        QualityFailed,
        match=r"view.page_views_per_minute for 2026-11-19..2026-11-20: failed "
        r"every row: views > 1000; nothing was written",
    ):
        recompute_view(spark, tables, strict, DAY - timedelta(days=1), DAY + timedelta(days=1))
    assert _batch_rows(spark, tables) == before
    ledger = spark.read.format("delta").load(tables.table("serving_state")).select("day").collect()
    assert [r.day for r in ledger] == [DAY.date()]  # the 19th stays provisional
    failed = [r for r in _results(spark, tables, f"view.{VIEW.name}") if not r.success]
    assert [(r.expectation, r.severity, str(r.first_day), str(r.last_day)) for r in failed] == [
        ("every row: views > 1000", "critical", "2026-11-19", "2026-11-20")
    ]
    docs = tables.data_docs
    assert "view.page_views_per_minute" in docs.read_text()


def test_reconciliation_catches_a_lost_window(spark, tables, landed):
    start, end = DAY, DAY + timedelta(days=1)
    events = compile.first_copies(spark.read.format("delta").load(tables.table("raw_events")))
    rows = compile.batch(VIEW, events, {}).where(
        f"window_start >= '{start:%Y-%m-%d}' AND window_start < '{end:%Y-%m-%d}'"
    )
    quality.check_view(tables, VIEW, rows, events, start, end)
    lost = rows.orderBy("window_start", "page").offset(1)
    with pytest.raises(QualityFailed, match="failed views sums to the days' valid unique page_view events"):
        quality.check_view(tables, VIEW, lost, events, start, end)


def test_raw_events_warnings_do_not_block(spark, tables, landed):
    events = spark.read.format("delta").load(tables.table("raw_events"))
    resent = events.unionByName(events).unionByName(events)  # two thirds of the records are copies
    done = quality.check_raw_events(tables, resent, DAY, DAY + timedelta(days=1))
    assert done.failed == []
    assert [(e, s) for e, s, ok, _ in done.results if not ok] == [
        (f"at most {quality.MOST_RESENT:.0%} of the records are resent copies", "warning")
    ]


def test_checks_in_a_block_update_the_data_docs_once_when_it_ends_even_by_a_failure(spark, tables, landed):
    start, end = DAY, DAY + timedelta(days=1)
    records = spark.read.format("delta").load(tables.table("raw_events"))
    events = compile.first_copies(records)
    rows = compile.batch(VIEW, events, {}).where(
        f"window_start >= '{start:%Y-%m-%d}' AND window_start < '{end:%Y-%m-%d}'"
    )
    strict = dataclasses.replace(VIEW, expectations=("views > 1000",))
    with pytest.raises(QualityFailed), quality.docs_once(tables):
        quality.check_raw_events(tables, records, start, end)
        assert not tables.data_docs.exists()  # not after each check
        quality.check_view(tables, strict, rows, events, start, end)
    docs = tables.data_docs.read_text()
    assert "raw_events" in docs and f"view.{VIEW.name}" in docs


def test_the_benchs_unchecked_recompute_writes_the_rows_and_checks_nothing(spark, tables, landed):
    """What `make bench` times as the batch layer without its quality checks and corrections."""
    from bench.batch import unchecked

    ensure_tables(spark, tables)  # the dimensions some views join (empty)
    unchecked(spark, tables, DAY, DAY + timedelta(days=1))
    expected = {k: v for k, v in oracle.views(landed)[VIEW.name].items() if DAY <= k[0] < DAY + timedelta(days=1)}
    assert _batch_rows(spark, tables) == expected
    assert not QUALITY_RESULTS.exists(tables)  # no check recorded a result
