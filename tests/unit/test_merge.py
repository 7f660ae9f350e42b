"""The boundary merge on DuckDB with tiny tables: batch before the boundary, speed from it."""

from datetime import datetime, timedelta

import duckdb
import pytest

from serving_layer.merge import merged_sql
from views import get
from views.timebase import UTC

VIEW = get("page_views_per_minute")
T0 = datetime(2026, 11, 20, 23, 58, tzinfo=UTC)
BOUNDARY = datetime(2026, 11, 21, tzinfo=UTC)


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in ("b", "s"):
        con.execute(f"CREATE TABLE {name} (window_start TIMESTAMPTZ, window_end TIMESTAMPTZ, page VARCHAR, "
                    f"views BIGINT, unique_users BIGINT)")
    minutes = [T0 + timedelta(minutes=i) for i in range(4)]  # 23:58, 23:59, 00:00, 00:01
    for start in minutes[:3]:  # batch knows the day before, plus a stray row after the boundary
        con.execute("INSERT INTO b VALUES (?, ?, '/', 10, 5)", [start, start + timedelta(minutes=1)])
    for start in minutes:  # speed knows everything, provisionally
        con.execute("INSERT INTO s VALUES (?, ?, '/', 7, 3)", [start, start + timedelta(minutes=1)])
    return con


def test_each_window_comes_once_from_the_right_side(con):
    rows = con.execute(f"{merged_sql(VIEW, BOUNDARY, batch='b', speed='s')} ORDER BY window_start").fetchall()
    assert [(r[0].minute, r[3], r[5], r[6]) for r in rows] == [
        (58, 10, "batch", True), (59, 10, "batch", True), (0, 7, "speed", False), (1, 7, "speed", False)]


def test_speed_alone_before_any_batch(con):
    rows = con.execute(merged_sql(VIEW, BOUNDARY, batch=None, speed="s")).fetchall()
    assert {r[5] for r in rows} == {"speed"} and len(rows) == 2


def test_no_tables_is_a_clear_error():
    with pytest.raises(LookupError, match="no data yet"):
        merged_sql(VIEW, BOUNDARY, batch=None, speed=None)
