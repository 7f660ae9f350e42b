"""End to end on the real parts: Kafka -> speed layer -> raw_events/dead_letters and speed views;
Airflow's scheduler runs batch_recompute for the past days; the merged view equals the oracle."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import pytest

from infra import generator, kafka, producer, services
from serving_layer import engine
from tests import oracle
from tests.conftest import HISTORY_DAYS
from views import timebase

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: 3 sigma of a lgk-12 HyperLogLog's relative standard error (1.04 / sqrt(4096)).
SKETCH_ERROR = 3 * 1.04 / 64


def _merged(settings) -> dict:
    _, rows = engine.query(settings, "SELECT window_start, window_end, page, views, unique_users, source, "
                                     "is_final FROM page_views_per_minute")
    return {(timebase.utc(r[0]), r[2]): r for r in rows}


def _settled(settings, views: dict, timeout: float = 90) -> dict:
    """The merged view once its view counts equal ``views`` (the speed views may trail landing), or
    as it is after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        merged = _merged(settings)
        if {key: row[3] for key, row in merged.items()} == views or time.monotonic() > deadline:
            return merged
        time.sleep(2)


def test_merged_view_equals_oracle_after_speed_and_airflow_batch(broker, airflow_service):
    settings = airflow_service.settings
    now = datetime.now(timebase.UTC)
    today = timebase.day_start(now.date())
    first = today - timedelta(days=HISTORY_DAYS)
    history = generator.generate(first, today, 1200 * HISTORY_DAYS, seed=3,
                                 mix=generator.Mix(late=0.05, duplicate=0.05, malformed=0.03))
    recent = generator.generate(max(today, now - timedelta(minutes=30)), now, 400, seed=4, shaped=False,
                                mix=generator.Mix(late=0, duplicate=0.05, malformed=0.03))
    records = history + recent
    kinds = generator.counts(records)
    assert kinds["late"] and kinds["duplicate"] and kinds["malformed"]

    services.start_speed(settings)
    try:
        assert producer.send(settings, records) == len(records)
        services.wait_for_landing(settings)

        client = airflow_service.client
        client.unpause("batch_recompute")
        states = client.wait_for_runs("batch_recompute", HISTORY_DAYS, timeout=600)
        assert list(states.values()) == ["success"] * HISTORY_DAYS
        assert engine.boundaries(settings)["page_views_per_minute"] == today

        expected = {k: v for k, v in oracle.page_views_per_minute(records).items() if k[0] >= first}
        merged = _settled(settings, {key: views for key, (views, _) in expected.items()})
        assert services.speed_health(settings)["error"] is None  # bad records did not stop it
    finally:
        services.stop_speed(settings)

    assert set(merged) == set(expected)
    for key, (start, end, page, views, users, source, is_final) in merged.items():
        assert end - start == timedelta(minutes=1)
        exact_views, exact_users = expected[key]
        assert views == exact_views, key
        if start < today:
            assert (source, is_final, users) == ("batch", True, exact_users), key
        else:
            assert (source, is_final) == ("speed", False), key
            assert abs(users - exact_users) <= max(1, SKETCH_ERROR * exact_users), key
    assert {r[5] for r in merged.values()} == {"batch", "speed"}

    records = records + _late_events_reach_the_merged_view(airflow_service, records, today)

    produced = sum(kafka.end_offsets(settings, settings.events_topic).values())
    _, [(landed, dead, reasonless)] = engine.query(settings, (
        "SELECT (SELECT count(*) FROM raw_events), (SELECT count(*) FROM dead_letters), "
        "(SELECT count(*) FROM dead_letters WHERE reason IS NULL OR raw IS NULL)"))
    assert produced == len(records) == landed + dead
    assert dead == kinds["malformed"] and reasonless == 0


def _late_events_reach_the_merged_view(airflow_service, records: list, today: datetime) -> list:
    """Events for an already batched day, far behind the speed watermark: the speed layer counts them
    in late_events and late_data_recompute (through Airflow) recomputes exactly that day. Returns them."""
    settings, client = airflow_service.settings, airflow_service.client
    yesterday = today - timedelta(days=1)
    late = generator.generate(yesterday + timedelta(hours=12), yesterday + timedelta(hours=13), 200, seed=5,
                              shaped=False, mix=generator.Mix(late=0, duplicate=0, malformed=0))
    services.start_speed(settings)
    try:
        producer.send(settings, late)
        services.wait_for_landing(settings)
    finally:
        services.stop_speed(settings)
    _, [(counted,)] = engine.query(settings, (
        f"SELECT sum(events) FROM late_events WHERE view = 'page_views_per_minute' AND day = DATE '{yesterday:%Y-%m-%d}'"))
    assert counted == sum(json.loads(r.value)["event_type"] == "page_view" for r in late)

    client.unpause("late_data_recompute")
    run = client.trigger("late_data_recompute", datetime.now(timebase.UTC))
    client.wait_for_runs("late_data_recompute", [run], timeout=600)
    expected = {k: v for k, v in oracle.page_views_per_minute(records + late).items() if yesterday <= k[0] < today}
    merged = {k: (r[3], r[4]) for k, r in _merged(settings).items() if yesterday <= k[0] < today}
    assert merged == expected
    return late
