"""Which days the late-data DAG recomputes: batched days that received late events since."""

from datetime import date, datetime

import pyarrow as pa
from deltalake import write_deltalake

from batch_layer.stale import stale_days
from infra.settings import load
from views.timebase import UTC


def _table(settings, name, rows):
    write_deltalake(settings.table(name), pa.Table.from_pylist(rows))


def at(hour):
    return datetime(2026, 11, 21, hour, tzinfo=UTC)


def test_only_batched_days_with_later_late_events_are_stale(tmp_path):
    settings = load(tmp_path)
    d18, d19, d20, d21 = (date(2026, 11, d) for d in (18, 19, 20, 21))
    _table(settings, "serving_state", [
        {"view": "v", "day": d18, "rows": 1, "computed_at": at(1)},
        {"view": "v", "day": d19, "rows": 1, "computed_at": at(1)},
        {"view": "v", "day": d20, "rows": 1, "computed_at": at(5)},
    ])
    _table(settings, "late_events", [
        {"view": "v", "day": d18, "events": 2, "received_at": at(3), "batch_id": 1},  # after: stale
        {"view": "v", "day": d19, "events": 2, "received_at": at(0), "batch_id": 0},  # before: counted
        {"view": "v", "day": d20, "events": 2, "received_at": at(3), "batch_id": 1},  # recomputed since
        {"view": "w", "day": d19, "events": 2, "received_at": at(3), "batch_id": 1},  # w never batched d19
        {"view": "v", "day": d21, "events": 2, "received_at": at(3), "batch_id": 1},  # not batched yet
    ])
    assert stale_days(settings) == [d18]


def test_nothing_is_stale_before_any_table_exists(tmp_path):
    assert stale_days(load(tmp_path)) == []
