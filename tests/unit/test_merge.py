"""The merge on DuckDB with tiny tables: batch rows of the days the ledger names final, and for the
other days the speed layer's partials merged per window with each view's own merge (counts add,
sketches union, rows taken back disappear)."""

from datetime import datetime, timedelta

import duckdb
import pytest
from datasketches import hll_sketch

from lake.merge import merged_sql
from lake.sketches import sketch_functions
from views import get
from views.compile import SKETCH_LGK
from views.timebase import UTC

VIEW = get("page_views_per_minute")
SESSIONS = get("sessions_hourly")
T0 = datetime(2026, 11, 20, 23, 58, tzinfo=UTC)
MIDNIGHT = datetime(2026, 11, 21, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _sketch(*users: str) -> bytes:
    sketch = hll_sketch(SKETCH_LGK)
    for user in users:
        sketch.update(user)
    return sketch.serialize_compact()


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    sketch_functions(con)
    con.execute(
        "CREATE TABLE b (window_start TIMESTAMPTZ, window_end TIMESTAMPTZ, page VARCHAR, "
        "views BIGINT, unique_users BIGINT)"
    )
    con.execute(
        "CREATE TABLE p (view VARCHAR, page_views_per_minute STRUCT(window_start TIMESTAMPTZ, "
        "window_end TIMESTAMPTZ, page VARCHAR, _rows BIGINT, views BIGINT, unique_users_sketch BLOB), "
        "sessions_hourly STRUCT(window_start TIMESTAMPTZ, window_end TIMESTAMPTZ, _rows BIGINT, "
        "sessions BIGINT, avg_duration_s_sum DOUBLE, avg_duration_s_count BIGINT, avg_events_sum DOUBLE, "
        "avg_events_count BIGINT))"
    )
    con.execute("CREATE TABLE ledger (view VARCHAR, day DATE)")
    minutes = [T0 + i * MINUTE for i in range(4)]  # 23:58, 23:59, 00:00, 00:01
    for start in minutes[:3]:  # batch knows the day before, plus a stray row of the day after (not final)
        con.execute("INSERT INTO b VALUES (?, ?, '/', 10, 5)", [start, start + MINUTE])
    for start in minutes:  # speed knows everything, provisionally, from two micro-batches each
        for users in (("u1", "u2"), ("u2", "u3")):
            con.execute(
                "INSERT INTO p (view, page_views_per_minute) VALUES ('page_views_per_minute', "
                "{'window_start': ?, 'window_end': ?, 'page': '/', '_rows': 2, 'views': 2, "
                "'unique_users_sketch': ?})",
                [start, start + MINUTE, _sketch(*users)],
            )
    return con


def _merged(con, view=VIEW, **relations):
    sql = merged_sql(view, **{"batch": "b", "partials": "p", "ledger": "ledger", **relations})
    return con.execute(f"{sql} ORDER BY window_start").fetchall()


def test_each_window_comes_once_from_the_right_side(con):
    con.execute("INSERT INTO ledger VALUES ('page_views_per_minute', DATE '2026-11-20'), ('other', DATE '2026-11-21')")
    assert [(r[0].minute, r[3], r[4], r[5], r[6]) for r in _merged(con)] == [
        (58, 10, 5, "batch", True),
        (59, 10, 5, "batch", True),
        (0, 4, 3, "speed", False),
        (1, 4, 3, "speed", False),
    ]


def test_a_day_is_final_whatever_came_before_it(con):
    con.execute("INSERT INTO ledger VALUES ('page_views_per_minute', DATE '2026-11-21')")
    assert [(r[0].minute, r[5]) for r in _merged(con)] == [(58, "speed"), (59, "speed"), (0, "batch")]


def test_a_final_day_that_batch_found_empty_shows_no_speed_rows(con):
    con.execute(
        "INSERT INTO ledger VALUES ('page_views_per_minute', DATE '2026-11-20'), "
        "('page_views_per_minute', DATE '2026-11-21')"
    )
    con.execute("DELETE FROM b WHERE window_start >= ?", [MIDNIGHT])
    assert [(r[0].minute, r[5]) for r in _merged(con)] == [(58, "batch"), (59, "batch")]


def test_speed_alone_before_any_batch(con):
    rows = _merged(con, batch=None, ledger=None)
    assert {r[5] for r in rows} == {"speed"} and len(rows) == 4


def test_a_session_taken_back_leaves_no_row_and_a_grown_one_counts_once(con):
    hour = timedelta(hours=1)
    partials = [  # a session of 2 events in hour 0; then it grows to 3 events, its start moved to hour -1
        (MIDNIGHT, 1, 1, 60.0, 1, 2.0, 1),
        (MIDNIGHT, -1, -1, -60.0, -1, -2.0, -1),
        (MIDNIGHT - hour, 1, 1, 3700.0, 1, 3.0, 1),
    ]
    for start, rows, sessions, duration, durations, events, counts in partials:
        con.execute(
            "INSERT INTO p (view, sessions_hourly) VALUES ('sessions_hourly', {'window_start': ?, "
            "'window_end': ?, '_rows': ?, 'sessions': ?, 'avg_duration_s_sum': ?, 'avg_duration_s_count': ?, "
            "'avg_events_sum': ?, 'avg_events_count': ?})",
            [start, start + hour, rows, sessions, duration, durations, events, counts],
        )
    rows = _merged(con, SESSIONS, batch=None, ledger=None)
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [(MIDNIGHT - hour, 1, 3700.0, 3.0)]


def test_no_tables_is_a_clear_error():
    with pytest.raises(LookupError, match="no data yet"):
        merged_sql(VIEW, batch=None, partials=None)
