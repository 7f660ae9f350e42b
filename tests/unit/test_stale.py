"""Which days the late-data DAG recomputes: batched days that received late events since."""

from dataclasses import replace
from datetime import date, datetime, timedelta

import pyarrow as pa
from deltalake import write_deltalake

from batch_layer.stale import settled_days, stale_days
from infra.deployment import load
from views.timebase import UTC


def _table(settings, name, rows):
    write_deltalake(settings.table(name), pa.Table.from_pylist(rows), mode="append")


V, W = "page_views_per_minute", "active_users_hourly"  # tumbling windows: a late event changes its own day


def at(hour):
    return datetime(2026, 11, 21, hour, tzinfo=UTC)


def test_only_batched_days_with_later_late_events_are_stale(tmp_path):
    settings = load(tmp_path)
    d18, d19, d20, d21 = (date(2026, 11, d) for d in (18, 19, 20, 21))
    _table(
        settings,
        "serving_state",
        [
            {"view": V, "day": d18, "rows": 1, "computed_at": at(1)},
            {"view": V, "day": d19, "rows": 1, "computed_at": at(1)},
            {"view": V, "day": d20, "rows": 1, "computed_at": at(5)},
        ],
    )
    _table(
        settings,
        "late_events",
        [
            {"view": V, "day": d18, "events": 2, "received_at": at(3), "batch_id": 1},  # after: stale
            {"view": V, "day": d19, "events": 2, "received_at": at(0), "batch_id": 0},  # before: counted
            {"view": V, "day": d20, "events": 2, "received_at": at(3), "batch_id": 1},  # recomputed since
            {"view": W, "day": d19, "events": 2, "received_at": at(3), "batch_id": 1},  # W never batched d19
            {"view": V, "day": d21, "events": 2, "received_at": at(3), "batch_id": 1},  # not batched yet
        ],
    )
    assert stale_days(settings) == [d18]


def test_nothing_is_stale_before_any_table_exists(tmp_path):
    assert stale_days(load(tmp_path)) == []


def test_late_events_make_the_days_their_windows_reach_stale(tmp_path):
    settings = load(tmp_path)
    days = [date(2026, 11, d) for d in range(17, 23)]
    _table(
        settings,
        "serving_state",
        [
            {"view": view, "day": day, "rows": 1, "computed_at": at(1)}
            for view in ("trending_products", "sessions_hourly")
            for day in days
        ],
    )
    _table(
        settings,
        "late_events",
        [
            # a purchase at 00:05 on the 18th is in windows that started at 23:56 on the 17th
            {"view": "trending_products", "day": days[1], "events": 1, "received_at": at(3), "batch_id": 1},
            # an event on the 21st can join sessions that began on the 20th, or move one of the 22nd's start
            {"view": "sessions_hourly", "day": days[4], "events": 1, "received_at": at(3), "batch_id": 1},
        ],
    )
    assert stale_days(settings) == [days[0], days[1], days[3], days[4], days[5]]


def test_a_day_before_the_late_events_is_stale_only_if_its_windows_reach_their_first(tmp_path):
    """Sessions of the 20th whose newest event batch saw at 23:50 reach 00:20 on the 21st: events of the
    21st from 07:00 on cannot change them, one at 00:10 can."""
    settings = load(tmp_path)
    d20, d21 = date(2026, 11, 20), date(2026, 11, 21)
    reach = datetime(2026, 11, 21, 0, 20, tzinfo=UTC)
    _table(
        settings,
        "serving_state",
        [
            {"view": "sessions_hourly", "day": d20, "rows": 1, "computed_at": at(1), "open_until": reach},
            {"view": "trending_products", "day": d20, "rows": 1, "computed_at": at(1), "open_until": None},
        ],
    )

    def late(view, first):
        return {"view": view, "day": d21, "events": 1, "received_at": at(8), "batch_id": 1, "first_event": first}

    _table(settings, "late_events", [late("sessions_hourly", at(7)), late("trending_products", at(7))])
    assert stale_days(settings) == []
    _table(settings, "late_events", [late("sessions_hourly", reach.replace(minute=10))])
    assert stale_days(settings) == [d20]
    settings = load(tmp_path / "other")
    _table(settings, "serving_state", [{"view": "trending_products", "day": d20, "rows": 1, "computed_at": at(1)}])
    # no open_until recorded: the day's windows reach 10 minutes past its end
    _table(settings, "late_events", [late("trending_products", reach.replace(minute=5))])
    assert stale_days(settings) == [d20]


def test_the_watchdog_announces_a_stale_day_once_its_late_events_stopped_coming(tmp_path):
    """With the default 10 quiet minutes: a day late events keep coming for waits (the hourly run
    corrects it), one whose newest late event is older is announced."""
    settings = load(tmp_path)
    d18, d19 = date(2026, 11, 18), date(2026, 11, 19)
    _table(settings, "serving_state", [{"view": V, "day": day, "rows": 1, "computed_at": at(1)} for day in (d18, d19)])

    def late(day, received):
        return {"view": V, "day": day, "events": 1, "received_at": received, "batch_id": 1}

    _table(settings, "late_events", [late(d18, at(2)), late(d19, at(2)), late(d19, at(3) - timedelta(minutes=5))])
    assert stale_days(settings) == [d18, d19]
    assert settled_days(settings, at(3)) == [d18]
    assert settled_days(settings, at(3) + timedelta(minutes=5)) == [d18, d19]
    assert settled_days(replace(settings, late_data_quiet_minutes=0), at(3)) == [d18, d19]
