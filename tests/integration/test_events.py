"""Parsing and validation on real Spark: each kind of bad record gets its reason; good ones parse exactly."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pytest

from domains.clickstream import EVENTS
from views import events

pytestmark = pytest.mark.integration

GOOD = {
    "event_id": "e1",
    "event_time": "2026-11-20T10:15:30.250+01:00",
    "event_type": "purchase",
    "user_id": "u1",
    "session_id": "s1",
    "product_id": "p1",
    "quantity": 2,
    "amount": 19.99,
}


def _with(**changes) -> bytes:
    event = {**GOOD, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not None}).encode()


CASES = [
    (b'{"event_id": "e1", "event_time"', "malformed JSON"),
    (b"[1, 2, 3]", "malformed JSON"),
    (_with(event_type="teleport"), "unknown event_type 'teleport'"),
    (_with(user_id=None), "missing field user_id"),
    (_with(session_id="  "), "missing field session_id"),
    (_with(event_id=7), "field event_id has the wrong type: BIGINT, expected a string"),
    (_with(user_id=["u1"]), "field user_id has the wrong type: ARRAY<STRING>, expected a string"),
    (_with(product_id={"id": 1}), "field product_id has the wrong type: OBJECT<id: BIGINT>"),
    (_with(product_id=None), "missing field product_id for purchase"),
    (_with(quantity="two"), "field quantity has the wrong type: 'two'"),
    (_with(quantity=0), "quantity must be positive"),
    (_with(amount=1.999), "amount '1.999' is not a decimal with at most 2 places"),
    (_with(event_time="2026-11-20 10:15:30"), "is not RFC 3339 with an offset"),
    (_with(event_time="2026-13-45T99:00:00Z"), "is not RFC 3339 with an offset"),
    (_with(event_time="2099-01-01T00:00:00Z"), "in the future"),
    (_with(event_type="page_view", page="x" * 5000), "oversized payload"),
]


def _parse(spark, values: list[bytes]):
    rows = [(b"k", v, "events", 0, i, datetime(2026, 11, 20, 9), 0) for i, v in enumerate(values)]
    return events.parse(
        spark.createDataFrame(rows, events.KAFKA_RECORD), EVENTS, max_payload_bytes=4096, future_horizon_seconds=3600
    )


def test_every_bad_record_is_dead_lettered_with_its_reason(spark):
    parsed = _parse(spark, [raw for raw, _ in CASES] + [_with()])
    dead = {r.offset: r for r in events.dead_letters(parsed).collect()}
    assert len(dead) == len(CASES)
    for offset, (raw, reason) in enumerate(CASES):
        assert reason in dead[offset].reason, (raw[:80], dead[offset].reason)
        assert bytes(dead[offset].raw) == raw and dead[offset].topic == "events"
    assert [r.offset for r in events.landed(parsed, EVENTS).collect()] == [len(CASES)]


def test_a_good_event_lands_with_every_field_in_utc(spark):
    [row] = events.landed(_parse(spark, [_with()]), EVENTS).collect()
    assert row.event_time == datetime(2026, 11, 20, 9, 15, 30, 250000)  # session time zone is UTC
    assert str(row.event_date) == "2026-11-20"
    assert (row.quantity, row.amount, row.product_id) == (2, Decimal("19.99"), "p1")
    assert (row.topic, row.partition, row.offset, row.key) == ("events", 0, 0, "k")
