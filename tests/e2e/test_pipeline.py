"""End to end on the real parts, Spark on a standalone cluster (a master and two workers), every table in
an S3 object store (s3a://): Kafka (events
and the products changelog) -> speed layer ->
raw_events/dead_letters, the products dimension and the speed views; the past days are backfilled from
Airflow's own UI in headless Chromium (the "Trigger -> Backfill" dialog of batch_recompute) and run by
its scheduler, which also catches up the nightly runs due since the DAG's start date (yesterday as the
test session began: the days since then are caught up, the days before it backfilled, at any hour); every
view's merged rows equal the oracle, including the view declared only in the test suite."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta

import pytest

from domains.clickstream import PRODUCTS, generator
from domains.sample import Mix, counts
from infra import kafka, processes, producer, services, spark_cluster
from serving_layer import engine
from tests import browser, oracle
from tests.compare import assert_final_and_exact, merged_rows, within_sketch_error
from tests.conftest import HISTORY_DAYS
from tests.extra_view import VIEW as EXTRA
from views import timebase

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXTRA_VIEW = EXTRA.name


def _merged(settings, name: str = "page_views_per_minute") -> dict:
    return merged_rows(settings, settings.views[name])


def _count(settings, table: str) -> int:
    _, [(count,)] = engine.query(settings, f"SELECT count(*) FROM {table}")
    return count


def _settled(settings, views: dict, since: datetime, timeout: float = 300) -> dict:
    """The merged page views from ``since`` once their view counts equal ``views`` (the speed views
    may trail landing), or as they are after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        merged = {key: row for key, row in _merged(settings).items() if key[0] >= since}
        if {key: row["views"] for key, row in merged.items()} == views or time.monotonic() > deadline:
            return merged
        time.sleep(2)


def test_merged_view_equals_oracle_after_speed_and_airflow_batch(broker, airflow_service, on_cluster_and_object_store):
    settings = on_cluster_and_object_store
    now = datetime.now(timebase.UTC)
    today = timebase.day_start(now.date())
    start = timebase.day_start(date.fromisoformat(settings.batch_start_date))
    first = start - timedelta(days=HISTORY_DAYS - 1)
    history = generator.generate(
        first, today, 1200 * HISTORY_DAYS, seed=3, mix=Mix(late=0.05, duplicate=0.05, malformed=0.03)
    )
    recent = generator.generate(
        max(today, now - timedelta(minutes=30)),
        now,
        400,
        seed=4,
        shaped=False,
        mix=Mix(late=0, duplicate=0.05, malformed=0.03),
    )
    records = history + recent
    kinds = counts(records)
    assert kinds["late"] and kinds["duplicate"] and kinds["malformed"]

    changes = generator.products(first, now, seed=3)
    assert producer.send_changelog(settings, changes, settings.topic_of(PRODUCTS.topic)) == len(changes)
    assert producer.send(settings, records) == len(records)
    # all in Kafka before the first micro-batch: one that read part of today's events would move the
    # watermark past the rest, and the speed views would rightly leave those to batch as late
    services.start_speed(settings)
    try:
        services.wait_for_landing(settings)
        processes.wait_until(lambda: _count(settings, "product_changes") == len(changes), 120, "products landing")

        past = [first + timedelta(days=d) for d in range((today - first).days)]
        with browser.chromium() as chromium:  # the dialog unpauses the DAG: its scheduler catches up from start
            browser.backfill(chromium, settings, "batch_recompute", [day for day in past if day < start])
        _assert_caught_up(airflow_service.client, [day for day in past if day >= start])
        assert all(days["final"] == {day.date() for day in past} for days in engine.finality(settings).values())

        category = oracle.category_as_of(changes)
        expected = oracle.views(records, category)
        page_views = {k: v for k, v in expected["page_views_per_minute"].items() if k[0] >= first}
        merged = _settled(settings, {key: views for key, (views, _) in page_views.items()}, first)
        assert services.speed_health(settings).error is None  # bad records did not stop it

        assert_final_and_exact(settings, expected, first, today)
        assert set(merged) == set(page_views)
        for key, row in merged.items():
            if key[0] >= today:
                exact_views, exact_users = page_views[key]
                assert (row["source"], row["is_final"], row["views"]) == ("speed", False, exact_views), key
                assert within_sketch_error(row["unique_users"], exact_users), key
        extra = {k for k, r in _merged(settings, EXTRA_VIEW).items() if r["source"] == "speed" and k[0] >= first}
        assert extra == {k for k in expected[EXTRA_VIEW] if k[0] >= today}  # the test-only view, in speed too
        before = [
            r
            for name in ("page_views_per_minute", EXTRA_VIEW)
            for k, r in _merged(settings, name).items()
            if k[0] < first
        ]
        assert all((r["source"], r["is_final"]) == ("speed", False) for r in before)  # no batch day: provisional

        records = records + _late_events_reach_the_merged_view(
            settings, airflow_service.client, records, category, today
        )
        ran = spark_cluster.applications(settings)  # the speed layer and the batch engine ran on the cluster
        assert "lambdalake-speed" in ran and "lambdalake-batch-engine" in ran, ran
    finally:
        services.stop_speed(settings)

    produced = sum(kafka.end_offsets(settings, settings.topic).values())
    _, [(landed, dead, reasonless)] = engine.query(
        settings,
        (
            "SELECT (SELECT count(*) FROM raw_events), (SELECT count(*) FROM dead_letters), "
            "(SELECT count(*) FROM dead_letters WHERE reason IS NULL OR raw IS NULL)"
        ),
    )
    assert produced == len(records) == landed + dead
    assert dead == kinds["malformed"] and reasonless == 0


def _assert_caught_up(client, days: list[datetime]) -> None:
    """The scheduler ran batch_recompute for ``days``, those since its start date, on its own."""

    def scheduled() -> list | None:
        runs = [r for r in client.dag_runs("batch_recompute") if r.run_type == "scheduled"]
        return runs if len(runs) >= len(days) else None

    runs = processes.poll(
        scheduled, 120, 2, lambda: AssertionError("the scheduler did not catch up batch_recompute's days")
    )
    assert sorted(r.logical_date for r in runs) == days
    client.wait_for_runs("batch_recompute", [r.run_id for r in runs], timeout=600)


def _late_events_reach_the_merged_view(settings, client, records: list, category, today: datetime) -> list:
    """Events for an already batched day, far behind the speed watermark: the speed layer (running)
    counts them in late_events and late_data_recompute (through Airflow) recomputes exactly that day. Returns them."""
    yesterday = today - timedelta(days=1)
    late = generator.generate(
        yesterday + timedelta(hours=12),
        yesterday + timedelta(hours=13),
        200,
        seed=5,
        shaped=False,
        mix=Mix(late=0, duplicate=0, malformed=0),
    )

    def counted() -> int:  # history sent in one go may have been counted late too, when partitions ran apart
        _, [(events,)] = engine.query(
            settings,
            (
                "SELECT coalesce(sum(events), 0) FROM late_events "
                f"WHERE view = 'page_views_per_minute' AND day = DATE '{yesterday:%Y-%m-%d}'"
            ),
        )
        return events

    before = counted()
    producer.send(settings, late)
    services.wait_for_landing(settings)
    assert counted() - before == sum(r.event()["event_type"] == "page_view" for r in late)

    client.unpause("late_data_recompute")
    run = client.trigger("late_data_recompute", datetime.now(timebase.UTC))
    client.wait_for_runs("late_data_recompute", [run], timeout=600)
    assert_final_and_exact(settings, oracle.views(records + late, category), yesterday, today)
    return late
