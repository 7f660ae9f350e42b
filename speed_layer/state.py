"""What the speed layer remembers between micro-batches, bounded by its watermark, in a DuckDB of the
driver's (the fold's own database: :mod:`views.sql` names its tables).

- the **watermark**: the newest event time landed in earlier micro-batches, minus the ``watermark``
  setting. An event older than it is *late*: landed, counted in late_events, left to batch.
- **recent events** (:data:`views.sql.RECENT`): the first copy of each event that was not late and
  is of a type a FollowedBy join reads (:attr:`State.followed`), as long as its time is at or after the
  watermark minus the longest FollowedBy bound: later events may still follow them. Each with the hash
  of its values of each join's ``on`` columns (:func:`views.sql.on_key`), which a micro-batch probes.
- **seen events** (:data:`views.sql.SEEN`): the :func:`key` and time of the first copy of every event
  that was not late, as long as its time is at or after the watermark: later copies of these are
  duplicates (a copy of an older one is late, whether or not it is still kept whole). A
  micro-batch's ids probe every key here: as numbers, they are hashed and compared at the speed of
  memory, where as text their probe grew with the state to most of a micro-batch (0.1 s with 1.6
  million events held, after 5 minutes at 6,750 events/s).
- **open sessions** per session view (:func:`views.sql.open_sessions`): (per, start, last, events) of
  sessions that a new event could still extend.

All of it is a function of raw_events, so a restart (even after ``kill -9``) rebuilds it from the table
(:func:`restore`): the speed layer commits raw_events last in each micro-batch, so raw_events holds
exactly the micro-batches whose speed partials are committed, or one more, which the replay then finds
already known.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
import pyarrow.compute as pc
import pyarrow.dataset as ds

from views import compile, sql, tables
from views.model import FollowedBy, Session, View
from views.timebase import UTC


def key(event_id: str) -> str:
    """SQL: the state's key of an event id (a column or expression): the 128 bits of its MD5, as a number
    (two ids share one by chance with odds of 1 in 10^38 for each pair held)."""
    return f"md5_number({event_id})"


def duration(text: str) -> timedelta:
    """``"10 minutes"`` (the ``watermark`` setting) as a timedelta."""
    amount, unit = text.split()
    return timedelta(**{unit if unit.endswith("s") else unit + "s": float(amount)})


@dataclass
class State:
    db: duckdb.DuckDBPyConnection
    views: list[View]
    delay: timedelta
    newest: datetime | None = None

    @property
    def watermark(self) -> datetime | None:
        return None if self.newest is None else self.newest - self.delay

    @property
    def follow(self) -> timedelta:
        return max((v.follow for v in self.views), default=timedelta())

    @property
    def horizon(self) -> datetime | None:
        """The oldest event time still worth remembering."""
        return None if self.watermark is None else self.watermark - self.follow

    @property
    def followed(self) -> str:
        """SQL: whether an event is of a type a FollowedBy join reads (its view's own or its followers')."""
        types = sorted({t for v in self.views if any(isinstance(j, FollowedBy) for j in v.joins) for t in v.reads})
        return f"event_type IN ({', '.join(map(sql.text, types))})" if types else "FALSE"

    def remember(self) -> None:
        """Keep a micro-batch's new events (once its views are computed)."""
        self.db.execute(f"INSERT INTO {sql.RECENT} {self.recent(sql.NEW)}")
        self.db.execute(f"INSERT INTO {sql.SEEN} {self.seen(sql.NEW)}")

    def recent(self, events: str) -> str:
        """SQL: the rows of :data:`views.sql.RECENT` for ``events``."""
        ons = dict(sql.on_key(j) for v in self.views for j in v.joins if isinstance(j, FollowedBy))
        columns = ", ".join(["*", *(f"{value} AS {column}" for column, value in ons.items())])
        return f"SELECT {columns} FROM {events} WHERE {self.followed}"

    def seen(self, events: str) -> str:
        """SQL: the rows of :data:`views.sql.SEEN` for ``events``."""
        return f"SELECT {key('event_id')} AS event_key, event_time FROM {events}"

    def grow_sessions(self, view: View) -> None:
        """Replace the micro-batch's touched sessions of ``view`` with its grown ones."""
        per, opened = view.session.per, sql.open_sessions(view)
        self.db.execute(f"DELETE FROM {opened} WHERE {per} IN (SELECT {per} FROM {sql.touched(view)})")
        self.db.execute(f"INSERT INTO {opened} SELECT * FROM {sql.grown(view)}")

    def held(self) -> dict[str, int]:
        """What it holds: events remembered (by key at or after the watermark, whole if a FollowedBy join
        reads them, both for some), open sessions, and the bytes its tables take in the fold's database."""
        sessions = [sql.open_sessions(v) for v in self.views if isinstance(v.window, Session)]
        counts = [
            f"(SELECT count(*) FROM {sql.SEEN})",
            f"(SELECT count(*) FROM {sql.RECENT} WHERE event_time < ?)",  # kept whole only
            *(f"(SELECT count(*) FROM {table})" for table in sessions),
        ]
        [(seen, whole, *opened)] = self.db.execute(f"SELECT {', '.join(counts)}", [self.watermark]).fetchall()
        [(taken,)] = self.db.execute(
            "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'IN_MEMORY_TABLE'"
        ).fetchall()
        return {"events": seen + whole, "sessions": sum(opened), "bytes": int(taken)}

    def advance(self, newest: datetime | None) -> None:
        """Move the watermark past a micro-batch's newest event time; forget what it makes useless: events
        before the horizon, sessions no event at or after the watermark can extend."""
        newest = newest and newest.astimezone(UTC)  # Spark collects a time as local and naive
        self.newest = max(filter(None, (self.newest, newest)), default=None)
        if self.watermark is None:
            return
        self.db.execute(f"DELETE FROM {sql.RECENT} WHERE event_time < ?", [self.horizon])
        self.db.execute(f"DELETE FROM {sql.SEEN} WHERE event_time < ?", [self.watermark])
        for view in self.views:
            if isinstance(view.window, Session):
                self.db.execute(
                    f"DELETE FROM {sql.open_sessions(view)} WHERE last < ?", [self.watermark - view.session.gap]
                )


def newest_event(path: str) -> datetime | None:
    """The newest event time landed in the raw_events table at ``path`` (UTC; read from its newest
    event_date partition only, with delta-rs)."""
    day = pc.max(tables.files(path)["partition.event_date"]).as_py()
    if day is None:
        return None
    newest = pc.max(tables.dataset(path, ("event_date", day)).to_table(columns=["event_time"])["event_time"]).as_py()
    return newest and newest.astimezone(UTC)


def restore(
    db: duckdb.DuckDBPyConnection, raw_events: str, columns: tuple[str, ...], views: list[View], delay: timedelta
) -> State:
    """The state after the micro-batches landed in the raw_events table at ``raw_events`` (its event
    ``columns`` kept), in ``db``'s tables.

    Whether a landed event was late is decided as the speed layer decided it: against the newest event
    time of the micro-batches before its own (by ``ingested_at``, one per micro-batch). Only events at
    or after the oldest time the state needs are read; older ones cannot change that verdict for them.
    """
    state = State(db, views, delay, newest_event(raw_events))
    landed = tables.dataset(raw_events)
    if state.watermark is not None:  # else nothing landed: the table's columns only
        longest = max((v.window.longest for v in views if isinstance(v.window, Session)), default=timedelta())
        oldest = state.watermark - max(state.follow, longest)
        landed = landed.filter((ds.field("event_date") >= oldest.date()) & (ds.field("event_time") >= oldest))
    db.register("_landed", landed)
    order = ", ".join(map(sql.quoted, compile.RECEIPT_ORDER))
    firsts = f"SELECT * FROM _landed QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {order}) = 1"
    before = (
        "SELECT ingested_at, max(max(event_time)) OVER (ORDER BY ingested_at ROWS BETWEEN UNBOUNDED "
        "PRECEDING AND 1 PRECEDING) AS _before FROM _landed GROUP BY ingested_at"
    )
    db.execute(
        f"CREATE TEMP TABLE _counted AS SELECT {', '.join(columns)} FROM ({firsts}) JOIN ({before}) "
        f"USING (ingested_at) WHERE _before IS NULL OR event_time >= _before - INTERVAL "
        f"'{delay.total_seconds()} seconds'"
    )
    db.execute(f"CREATE TABLE {sql.RECENT} AS {state.recent('_counted')}")
    db.execute(f"CREATE TABLE {sql.SEEN} AS {state.seen('_counted')}")
    for view in views:
        if isinstance(view.window, Session):
            db.execute(f"CREATE TABLE {sql.open_sessions(view)} AS {sql.sessions_of(view, '_counted')}")
    db.execute("DROP TABLE _counted")
    db.unregister("_landed")
    state.advance(None)
    return state
