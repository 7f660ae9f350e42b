"""One pass per micro-batch of the events topic: parse once, dedupe once, land, fold into every view.

The speed layer's one streaming query (Kafka ``events`` -> ``foreachBatch``) calls a :class:`Fold`
with each micro-batch ``n``:

1. every record is parsed and validated once;
2. the *new* events: the first copy of each valid event that is not late (older than the watermark)
   and not seen in an earlier micro-batch (speed_layer.state);
3. each speed view's partial aggregates of the new events, with the state the view needs (the events
   a click may still follow, the sessions a new event may extend or join: a grown session is
   retracted and added again, so open sessions show and grow);
4. the commits, each skipped if micro-batch ``n`` of this query was committed there before
   (:class:`infra.delta.BatchAppends`): dead_letters and late_events (when the batch has any, from
   the parse on, while the dedupe runs) and the partials of every view in one commit to
   speed_partials, side by side; then raw_events, last. A small micro-batch's rows, and a large
   one's partials (one row per view, window and key), are collected and committed by delta-rs, which
   commits in milliseconds where Spark's Delta writer takes a second per commit.

Landing alone (no speed views) needs no dedupe and no cache: raw_events is written straight from the
parse, counted as it goes, and the dead records are parsed again from their own Kafka records.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import reduce

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra import delta
from infra.settings import Settings
from speed_layer import late_events, state
from views import compile, events, tables
from views.model import FollowedBy, Session, View

#: A micro-batch of up to this many bytes (its dead letters alone, likewise) is collected and written
#: from the driver by delta-rs, not by Spark's Delta writer (by default; ``Fold(driver_bytes=...)``).
DRIVER_BYTES = 16 * 2**20
#: A larger micro-batch's partials are collected too, if they are at most this many rows (a few hundred
#: bytes to a few kilobytes each: one per view, window and key).
DRIVER_PARTIALS = 50_000
#: Per session view: its open sessions after a micro-batch, and the sessions the batch changed (cached).
Grown = dict[str, tuple[DataFrame, DataFrame]]


class Fold:
    """The speed layer's work on one micro-batch, and the state it keeps between them."""

    def __init__(self, spark: SparkSession, settings: Settings, views: list[View], app_id: str,
                 profile: bool = False, driver_bytes: int = DRIVER_BYTES) -> None:
        self.settings, self.views, self.profile, self.driver_bytes = settings, views, profile, driver_bytes
        self.appends = delta.BatchAppends(app_id)
        # a micro-batch's cache lives for that micro-batch only: uncompressed, it costs the parse a fifth
        # less (warm 200k micro-batches: 3.0 -> 2.5 s)
        spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
        self.source = settings.source
        self.state = state.restore(spark, tables.RAW_EVENTS.read(spark, settings), self.source.columns, views,
                                   state.duration(settings.watermark))
        #: Seconds per step of the last micro-batch; counts of records, dead letters and late events so far.
        self.timings: dict[str, float] = {}
        self.totals = {"records": 0, "dead_letters": 0, "late_events": 0}

    def __call__(self, records: DataFrame, batch_id: int) -> None:
        steps: dict[str, float] = {}
        grown: Grown = {}
        if self.views:
            counted = self._fold(self._parse(records), batch_id, grown, steps)
        else:
            counted = self._land(records, batch_id, steps)
        with _timed(steps, "keep state"):
            self.state.advance(counted.newest)
            for view in self.views:
                if view.name in grown:
                    open_sessions, changed = grown[view.name]
                    self.state.close_sessions(view, open_sessions)
                    changed.unpersist()
        self.timings = steps
        for name, count in (("records", counted.total), ("dead_letters", counted.dead),
                            ("late_events", counted.behind)):
            self.totals[name] += count

    def _parse(self, records: DataFrame) -> DataFrame:
        return late_events.flag_behind(events.parse(records, self.source, self.settings.max_payload_bytes,
                                                    self.settings.future_horizon_seconds), self.state.watermark)

    def _fold(self, parsed: DataFrame, batch_id: int, grown: Grown,
              steps: dict[str, float]) -> late_events.Tally:
        """Land ``parsed`` and fold its new events into every view (``grown``: the open sessions after)."""
        with _timed(steps, "ledger"):
            finals = late_events.final_through(self.settings, self.views)
        with _timed(steps, "parse"):
            counted = late_events.tally(parsed.persist())
            late = late_events.count(counted, self.views, finals, batch_id)
        small, few_dead = counted.bytes <= self.driver_bytes, counted.dead_bytes <= self.driver_bytes
        # a small micro-batch is planned without adaptive execution: each adaptive stage is a Spark job of
        # its own, and stages this small leave it nothing to adapt (1,000 events: 30 jobs -> 17, 2.1 -> 1.4 s)
        parsed.sparkSession.conf.set("spark.sql.adaptive.enabled", str(not small).lower())
        side = [(events.dead_letters(parsed), tables.DEAD_LETTERS, few_dead) if counted.dead else None,
                (late, tables.LATE_EVENTS, True) if late.num_rows else None]
        with ThreadPoolExecutor(3) as pool:  # independent commits overlap the dedupe, the views' plans
            # and one another; raw_events goes last
            done: list[Future[object]] = [pool.submit(self._commit, steps, batch_id, *write)
                                          for write in filter(None, side)]
            with _timed(steps, "dedupe"):
                new = self._new(events.landed(parsed.where(~F.col(late_events.BEHIND)), self.source))
            partials = self._partials(parsed.sparkSession, new, grown, steps)
            self.state.remember(new)  # after the views' plans took the state before this batch
            done.append(pool.submit(self._commit_partials, steps, batch_id, partials, small))
            for commit in done:
                commit.result()
        self._commit(steps, batch_id, events.landed(parsed, self.source), tables.RAW_EVENTS, small)
        parsed.unpersist()  # what the state keeps of it is checkpointed
        return counted

    def _land(self, records: DataFrame, batch_id: int, steps: dict[str, float]) -> late_events.Tally:
        """Landing alone, which needs no dedupe: raw_events written straight from the parse and counted
        as it goes (no cache, no Spark job of its own), then the dead letters it found, parsed again
        from their own Kafka records."""
        parsed = self._parse(records)
        observed, seen = late_events.observe(parsed)
        dead = events.dead_letters(parsed)
        if self._commit(steps, batch_id, events.landed(observed, self.source), tables.RAW_EVENTS, False, "parse + "):
            counted, dead_at = late_events.observed(seen)
            if dead_at:  # parsed again: the dead records alone
                place = list(late_events.KAFKA_PLACE)
                at = records.sparkSession.createDataFrame(dead_at, records.select(*place).schema)
                dead = events.dead_letters(self._parse(records.join(F.broadcast(at), place, "left_semi")))
        else:  # committed before this (replayed) micro-batch: counted again
            counted = late_events.tally(parsed)
        if counted.dead:
            self._commit(steps, batch_id, dead, tables.DEAD_LETTERS, counted.dead_bytes <= self.driver_bytes)
        return counted

    def _commit(self, steps: dict[str, float], batch_id: int, rows: DataFrame | pa.Table, table: tables.Table,
                from_driver: bool, doing: str = "") -> bool:
        """Append ``rows`` to ``table`` unless this micro-batch was committed there (then False);
        ``from_driver``: collected first and written by delta-rs (for a small micro-batch, a Delta
        commit without Spark's per-commit cost). Timed as ``doing`` and the commit."""
        with _timed(steps, f"{doing}commit {table.name}"):
            if from_driver and isinstance(rows, DataFrame):
                rows = delta.to_arrow(rows)
            return self.appends.append(rows, table.path(self.settings), batch_id, table.partition_by)

    def _commit_partials(self, steps: dict[str, float], batch_id: int, partials: DataFrame, small: bool) -> None:
        """Commit the views' partials: from the driver if the micro-batch is small or they are few rows
        (a large micro-batch's are computed first, timed as ``views``, and counted)."""
        if not small:
            with _timed(steps, "views"):
                partials = state.checkpoint(partials)
                small = partials.count() <= DRIVER_PARTIALS
        self._commit(steps, batch_id, partials, tables.SPEED_PARTIALS, small)

    def _partials(self, spark: SparkSession, new: DataFrame, grown: Grown,
                  steps: dict[str, float]) -> DataFrame:
        """Every view's partials of the new events as rows of the partials table (computed as the
        table is written; with ``profile``, each view computed apart first, to time it)."""
        with _timed(steps, "plan views"):
            dimensions = {name: spark.read.format("delta").load(self.settings.table(name))
                          for view in self.views for name in compile.dimension_tables(view)}
            partials = {view.name: compile.packed(view, compile.aggregate(view, compile.enrich(
                view, self._rows(view, new, grown), dimensions, as_of=False), exact=False)) for view in self.views}
        if self.profile:
            for name, packed in partials.items():
                with _timed(steps, f"view {name}"):
                    partials[name] = state.checkpoint(packed)
        with _timed(steps, "plan views"):
            return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), partials.values())

    def _new(self, fresh: DataFrame) -> DataFrame:
        """The first copy of each event of ``fresh`` (valid, not late) that was not seen before."""
        firsts = compile.first_copies(fresh).select(*self.source.columns)
        recent = self.state.recent()  # a resent copy has its event's time: only ids need comparing
        if recent is not None:  # an inner join: a semi join would be pushed into every piece, each its own job
            seen = recent.select("event_id").join(F.broadcast(fresh.select("event_id")), "event_id")
            firsts = firsts.join(F.broadcast(seen), "event_id", "left_anti")
        return state.checkpoint(firsts)

    def _rows(self, view: View, new: DataFrame, grown: Grown) -> DataFrame:
        """The prepared rows the new events add to ``view`` (and take back from it)."""
        rows = compile.own(compile.inputs(view, new))
        for join in view.joins:
            if isinstance(join, FollowedBy):
                rows = rows.unionByName(self._flagged(view, join, rows, new))
        if isinstance(view.window, Session):
            rows = self._sessions(view, rows, grown)
        return rows

    def _flagged(self, view: View, join: FollowedBy, rows: DataFrame, new: DataFrame) -> DataFrame:
        """Flagged copies of the rows that a follower now follows for the first time: new rows that an
        earlier or new follower follows, and earlier rows that only a new follower follows."""
        followers = compile.followers(join, new)
        earlier = self.state.recent()  # the join's time bounds pick the rows and followers that can meet
        if earlier is None:
            return compile.flagged(view, join, rows, followers)
        known = compile.followers(join, earlier)
        flagged_new = compile.flagged(view, join, rows, known.unionByName(followers))
        candidates = compile.own(compile.inputs(view, earlier))
        newly = compile.flagged(view, join, compile.flagged(view, join, candidates, followers), known, how="left_anti")
        return flagged_new.unionByName(newly)

    def _sessions(self, view: View, rows: DataFrame, grown: Grown) -> DataFrame:
        """Session rows: the sessions the new events start or change (+1) and, taken back (-1), the
        open sessions they changed. ``grown[view]`` gets the open sessions after the batch, and the
        changed sessions, kept from the views' job for the state's (unpersisted once it is kept)."""
        per = view.session.per
        spans = compile.spans(view, rows)
        keys = spans.select(per).distinct()
        open_sessions = self.state.sessions[view.name]
        touched = open_sessions.join(keys, per, "left_semi")
        after = compile.sessions(view, touched.unionByName(spans)).persist()
        grown[view.name] = open_sessions.join(keys, per, "left_anti").unionByName(after), after
        return compile.session_rows(view, after).unionByName(compile.session_rows(view, touched, weight=-1))


@contextmanager
def _timed(steps: dict[str, float], step: str):
    """Add the block's seconds to ``steps[step]``."""
    began = time.perf_counter()
    yield
    steps[step] = round(steps.get(step, 0) + time.perf_counter() - began, 3)
