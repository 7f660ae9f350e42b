"""The batch layer on real Spark and Delta: exact against the oracle, idempotent, atomic on failure."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from batch_layer.recompute import ExpectationFailed, recompute_view
from infra.generator import Mix, generate
from tests import oracle
from tests.integration.records import kafka_frame
from views import events, get, timebase

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 20, tzinfo=timebase.UTC)
VIEW = get("page_views_per_minute")


@pytest.fixture
def landed(spark, tables):
    """Two days of messy records (late, resent, malformed) parsed and landed in raw_events."""
    records = generate(DAY - timedelta(days=1), DAY + timedelta(days=1), 3000, seed=11,
                       mix=Mix(late=0.05, duplicate=0.05, malformed=0.03))
    parsed = events.parse(kafka_frame(spark, records), tables.max_payload_bytes, 10**9)
    (events.landed(parsed).write.format("delta").partitionBy("event_date")
     .save(tables.table("raw_events")))
    return records


def _batch_rows(spark, tables) -> dict:
    rows = spark.read.format("delta").load(tables.table(f"batch/{VIEW.name}")).collect()
    for row in rows:
        assert row.window_end - row.window_start == timedelta(minutes=1)
    return {(timebase.utc(r.window_start), r.page): (r.views, r.unique_users) for r in rows}


def test_batch_day_equals_oracle_and_rerun_converges(spark, tables, landed):
    expected = {k: v for k, v in oracle.views(landed)[VIEW.name].items()
                if DAY <= k[0] < DAY + timedelta(days=1)}
    summary = recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    assert _batch_rows(spark, tables) == expected
    assert summary["rows"] == len(expected)
    assert summary["final_days"] == str(DAY.date())

    recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    assert _batch_rows(spark, tables) == expected


def test_recompute_replaces_only_its_day(spark, tables, landed):
    everything = oracle.views(landed)[VIEW.name]
    before, day = DAY - timedelta(days=1), timedelta(days=1)
    recompute_view(spark, tables, VIEW, before, DAY)
    summary = recompute_view(spark, tables, VIEW, DAY, DAY + day)
    assert _batch_rows(spark, tables) == {k: v for k, v in everything.items() if before <= k[0] < DAY + day}
    assert summary["final_days"] == f"{before.date()}..{DAY.date()}"


def test_days_are_final_in_whatever_order_they_were_computed(spark, tables, landed):
    recompute_view(spark, tables, VIEW, DAY + timedelta(days=1), DAY + timedelta(days=2))
    summary = recompute_view(spark, tables, VIEW, DAY - timedelta(days=1), DAY)
    assert summary["final_days"] == f"{(DAY - timedelta(days=1)).date()}, {(DAY + timedelta(days=1)).date()}"


def test_without_raw_events_nothing_is_written(spark, tables):
    with pytest.raises(FileNotFoundError, match="no raw_events table"):
        recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    assert not (tables.data / "batch").exists() and not (tables.data / "serving_state").exists()


def test_interval_must_be_whole_days(spark, tables, landed):
    with pytest.raises(ValueError, match="whole UTC days"):
        recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(hours=5))
    assert not (tables.data / "batch").exists()


def test_a_broken_expectation_writes_nothing(spark, tables, landed):
    recompute_view(spark, tables, VIEW, DAY, DAY + timedelta(days=1))
    before = _batch_rows(spark, tables)
    strict = dataclasses.replace(VIEW, expectations=("views > 0", "views > 1000"))
    with pytest.raises(ExpectationFailed, match=r"'views > 1000' fails for \d+ rows; its batch table was left"):
        recompute_view(spark, tables, strict, DAY - timedelta(days=1), DAY + timedelta(days=1))
    assert _batch_rows(spark, tables) == before
