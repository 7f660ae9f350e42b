"""Finality per day, as a property: whatever order batch computes days in (backfills, gaps, reruns) and
whenever late events arrive, the merged view shows each window once; on the days the ledger names
final it equals the reference exactly, on the others it is the speed layer's view of what it saw."""

from collections import Counter
from datetime import date, datetime, timedelta

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.merge import merged_sql
from views.model import Tumbling, View, count
from views.timebase import UTC, day_start

VIEW = View(
    name="views_per_hour",
    description="page views per page and hour",
    event_types=("page_view",),
    window=Tumbling(timedelta(hours=1)),
    keys=("page",),
    measures=(count("views"),),
)
FIRST = date(2026, 11, 18)
DAYS = 4
HOUR = timedelta(hours=1)

event = st.tuples(st.just("event"), st.integers(0, DAYS - 1), st.integers(0, 2), st.sampled_from("ab"), st.booleans())
batch = st.tuples(st.just("batch"), st.integers(0, DAYS - 1))


def _window(day: int, hour: int) -> datetime:
    return day_start(FIRST + timedelta(days=day)) + hour * HOUR


def _connection() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE b (window_start TIMESTAMPTZ, window_end TIMESTAMPTZ, page VARCHAR, views BIGINT)")
    con.execute(
        "CREATE TABLE p (view VARCHAR, views_per_hour STRUCT(window_start TIMESTAMPTZ, "
        "window_end TIMESTAMPTZ, page VARCHAR, _rows BIGINT, views BIGINT))"
    )
    con.execute("CREATE TABLE ledger (view VARCHAR, day DATE)")
    return con


def _recompute(con: duckdb.DuckDBPyConnection, events: list[tuple], day: int) -> None:
    """What the batch layer does for one day: replace its rows by exact ones, record it final."""
    start = _window(day, 0)
    con.execute("DELETE FROM b WHERE window_start >= ? AND window_start < ?", [start, start + timedelta(days=1)])
    for (d, hour, page), views in Counter((d, h, p) for d, h, p, _ in events if d == day).items():
        con.execute("INSERT INTO b VALUES (?, ?, ?, ?)", [_window(d, hour), _window(d, hour) + HOUR, page, views])
    if not con.execute("SELECT 1 FROM ledger WHERE day = ?", [FIRST + timedelta(days=day)]).fetchall():
        con.execute("INSERT INTO ledger VALUES ('views_per_hour', ?)", [FIRST + timedelta(days=day)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(event, batch), max_size=25))
def test_merged_view_is_exact_on_final_days_and_never_counts_a_window_twice(operations):
    con, events, batched, stale = _connection(), [], set(), set()
    for operation in operations:
        if operation[0] == "batch":
            _recompute(con, events, operation[1])
            batched.add(operation[1])
            stale.discard(operation[1])
            continue
        _, day, hour, page, late = operation
        events.append((day, hour, page, late))
        stale |= {day} & batched  # an event for a final day is late by then: its day is recomputed
        if not late:  # an event behind the speed layer's watermark is landed and left to batch
            con.execute(
                "INSERT INTO p VALUES ('views_per_hour', {'window_start': ?, 'window_end': ?, 'page': ?, "
                "'_rows': 1, 'views': 1})",
                [_window(day, hour), _window(day, hour) + HOUR, page],
            )
    for day in stale:  # the late-data recompute of the days that received late events
        _recompute(con, events, day)

    rows = con.execute(merged_sql(VIEW, batch="b", partials="p", ledger="ledger")).fetchall()
    keys = [(r[0], r[2]) for r in rows]
    assert len(keys) == len(set(keys)), "a window is counted twice"
    exact = Counter((_window(d, h), p) for d, h, p, _ in events)
    seen = Counter((_window(d, h), p) for d, h, p, late in events if not late)
    for start, page, views, source, is_final in [(r[0], r[2], r[3], r[4], r[5]) for r in rows]:
        day = (start.astimezone(UTC).date() - FIRST).days
        assert (source, is_final) == (("batch", True) if day in batched else ("speed", False))
        assert views == (exact if day in batched else seen)[(start, page)]
    shown = set(keys)
    for start, page in exact:
        day = (start.date() - FIRST).days
        expected = day in batched or seen[(start, page)] > 0
        assert ((start, page) in shown) == expected, "a window is missing"
