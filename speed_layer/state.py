"""What the speed layer remembers between micro-batches, bounded by its watermark.

- the **watermark**: the newest event time landed in earlier micro-batches, minus the ``watermark``
  setting. An event older than it is *late*: landed, counted in late_events, left to batch.
- **recent events**: the first copy of each event that was not late, as long as its time is at or
  after the watermark minus the longest FollowedBy bound: later copies of these are duplicates, and
  later events may still follow them.
- **open sessions** per session view: (per, start, last, events) of sessions that a new event could
  still extend.

All of it is a function of raw_events, so a restart (even after ``kill -9``) rebuilds it from the table
(:func:`restore`): the speed layer commits raw_events last in each micro-batch, so raw_events holds
exactly the micro-batches whose speed partials are committed, or one more, which the replay then finds
already known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from views import compile
from views.model import Session, View

#: Recent events are kept in pieces, one per micro-batch; this many are folded into one.
PIECES = 16


def duration(text: str) -> timedelta:
    """``"10 minutes"`` (the ``watermark`` setting) as a timedelta."""
    amount, unit = text.split()
    return timedelta(**{unit if unit.endswith("s") else unit + "s": float(amount)})


@dataclass
class State:
    views: list[View]
    delay: timedelta
    newest: datetime | None = None
    pieces: list[DataFrame] = field(default_factory=list)
    sessions: dict[str, DataFrame] = field(default_factory=dict)

    @property
    def watermark(self) -> datetime | None:
        return None if self.newest is None else self.newest - self.delay

    @property
    def follow(self) -> timedelta:
        return max((v.follow for v in self.views), default=timedelta())

    def recent(self, since: datetime | None = None) -> DataFrame | None:
        """Recent events (at or after ``since``). The speed layer's joins take them unfiltered: a
        filter on a time that moves each micro-batch would make Spark generate and compile the code
        of every piece's scan again each micro-batch."""
        if not self.pieces:
            return None
        events = _per_core(reduce(DataFrame.unionByName, self.pieces))
        return events if since is None else events.where(F.col("event_time") >= F.lit(since))

    def remember(self, new: DataFrame) -> None:
        """Keep a micro-batch's new events (once its views are computed)."""
        self.pieces.append(new)

    def advance(self, newest: datetime | None) -> None:
        """Move the watermark past a micro-batch's newest event time; forget what it makes useless."""
        self.newest = max(filter(None, (self.newest, newest)), default=None)
        if len(self.pieces) >= PIECES:
            recent = self.recent(self.horizon)
            assert recent is not None  # there are pieces
            self.pieces = [checkpoint(recent)]

    @property
    def horizon(self) -> datetime | None:
        """The oldest event time still worth remembering."""
        return None if self.watermark is None else self.watermark - self.follow

    def close_sessions(self, view: View, open_sessions: DataFrame) -> None:
        """Keep the sessions of ``view`` that an event at or after the watermark can still extend."""
        if self.watermark is not None:
            open_sessions = open_sessions.where(F.col("last") >= F.lit(self.watermark - view.session.gap))
        self.sessions[view.name] = checkpoint(_per_core(open_sessions))


def checkpoint(frame: DataFrame) -> DataFrame:
    """``frame`` computed once and kept in the executors, its lineage cut, so that state does not grow
    a plan from batch to batch (Spark frees it once nothing refers to it)."""
    return frame.localCheckpoint(eager=True)


def _per_core(frame: DataFrame) -> DataFrame:
    """``frame`` (a union of checkpointed pieces) in as many partitions as there are cores, without a
    shuffle: unions add their pieces' partitions up, so a state rebuilt from its last version each
    micro-batch would otherwise have two more partitions, and every scan of it two more tasks, each
    micro-batch."""
    return frame.coalesce(frame.sparkSession.sparkContext.defaultParallelism)


def empty_sessions(spark: SparkSession, view: View) -> DataFrame:
    return spark.createDataFrame([], f"{view.session.per} string, start timestamp, last timestamp, events bigint")


def newest_event(raw_events: DataFrame) -> datetime | None:
    """The newest event time landed (read from the newest event_date partition only)."""
    [[newest_day]] = raw_events.agg(F.max("event_date")).collect()
    if newest_day is None:
        return None
    [[newest]] = raw_events.where(F.col("event_date") == newest_day).agg(F.max("event_time")).collect()
    return newest


def restore(spark: SparkSession, raw_events: DataFrame, columns: tuple[str, ...], views: list[View],
            delay: timedelta) -> State:
    """The state after the micro-batches landed in ``raw_events`` (its event ``columns`` kept).

    Whether a landed event was late is decided as the speed layer decided it: against the newest event
    time of the micro-batches before its own (by ``ingested_at``, one per micro-batch). Only events at
    or after the oldest time the state needs are read; older ones cannot change that verdict for them.
    """
    state = State(views, delay)
    state.sessions = {v.name: empty_sessions(spark, v) for v in views if isinstance(v.window, Session)}
    state.newest = newest_event(raw_events)
    if (watermark := state.watermark) is None:  # nothing landed
        return state
    longest = max((v.window.longest for v in views if isinstance(v.window, Session)), default=timedelta())
    oldest = watermark - max(state.follow, longest)
    rows = raw_events.where((F.col("event_date") >= oldest.date()) & (F.col("event_time") >= F.lit(oldest)))
    seen = compile.first_copies(rows)
    per_batch = rows.groupBy("ingested_at").agg(F.max("event_time").alias("_newest"))
    before = per_batch.select("ingested_at", F.max("_newest").over(
        Window.orderBy("ingested_at").rowsBetween(Window.unboundedPreceding, -1)).alias("_before"))
    counted = (seen.join(before, "ingested_at")
               .where(F.col("_before").isNull() | (F.col("event_time") >= F.col("_before") - F.lit(delay)))
               .select(*columns))
    counted = checkpoint(counted)
    state.pieces = [checkpoint(counted.where(F.col("event_time") >= F.lit(state.horizon)))]
    for view in views:
        if isinstance(view.window, Session):
            state.close_sessions(view, compile.sessions(view, compile.spans(view, compile.inputs(view, counted))))
    return state
