"""Compile a :class:`~views.model.View` into Spark transformations, the same ones for batch and speed.

A view is computed in three steps, each a pure ``DataFrame -> DataFrame`` function:

1. :func:`prepare`: the view's events, from each event_id's first received copy (:func:`first_copies`,
   taken once for every view), flagged by its FollowedBy joins and grouped into sessions if its window is one.
   The speed layer folds each micro-batch with the same steps compiled to DuckDB SQL (:mod:`views.sql`).
2. :func:`enrich`: dimension columns; batch as of the event's time, speed as the dimension is now.
3. :func:`aggregate`: measures per window and key. Each measure is kept as mergeable *states*: batch
   computes them exactly from all rows; speed appends each micro-batch's states as *partials*, which
   readers combine with :func:`merged` (sums add, sketches union) and turn into values with
   :func:`finals`. A prepared row carries a weight (``_weight``, +1, or -1 to retract a row the speed
   layer counted before, e.g. a session that grew), so counts, sums and means stay mergeable.

The merge SQL is plain enough for both Spark SQL and the serving layer's DuckDB (which registers
``hll_union_agg`` and ``hll_sketch_estimate`` over the same sketch bytes).
"""

from __future__ import annotations

from functools import cache, lru_cache

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from views.model import Dimension, FollowedBy, Measure, Session, View, interval

#: Order in which copies of an event were received; the first one counts.
RECEIPT_ORDER = ("ingested_at", "kafka_timestamp", "partition", "offset")
#: Which measures a prepared row feeds: "event" (the view's own rows) or a FollowedBy flag.
ROLE = "_role"
EVENT = "event"
#: +1 for a row that counts, -1 for one that retracts a row counted before (speed sessions only).
WEIGHT = "_weight"
#: log2 of the HyperLogLog sketches' buckets (Spark's default for ``hll_sketch_agg``).
SKETCH_LGK = 12
#: The hidden state every view keeps: its rows' net weight; a merged window exists while it is positive.
ROWS = "_rows"
#: A batch row's newest event of the sessions it counts (views of sessions; not a view's column): how far
#: past its day the day's sessions reach (View.open_until).
NEWEST = "_newest"


def inputs(view: View, events: DataFrame) -> DataFrame:
    """The events the view is computed from."""
    return events.where(F.col("event_type").isin(*view.event_types))


def first_copies(events: DataFrame) -> DataFrame:
    """Each event_id once: the first received copy."""
    first = Window.partitionBy("event_id").orderBy(*RECEIPT_ORDER)
    return events.withColumn("_copy", F.row_number().over(first)).where("_copy = 1").drop("_copy")


def prepare(view: View, events: DataFrame) -> DataFrame:
    """The view's rows from raw_events' first copies (:func:`first_copies`)."""
    rows = own(inputs(view, events))
    for join in view.joins:
        if isinstance(join, FollowedBy):
            rows = rows.unionByName(flagged(view, join, rows, followers(join, events)))
    if isinstance(view.window, Session):
        rows = session_rows(view, sessions(view, spans(view, rows)))
    return rows


def own(rows: DataFrame) -> DataFrame:
    """Rows that count as the view's own, once each."""
    return rows.select("*", *_own_columns())


@lru_cache(maxsize=1)
def _own_columns() -> tuple[Column, ...]:
    return F.lit(EVENT).alias(ROLE), F.lit(1).alias(WEIGHT)


def followers(join: FollowedBy, events: DataFrame) -> DataFrame:
    """The events that may follow a row of ``join``."""
    return events.where(F.col("event_type") == join.event_type)


def flagged(view: View, join: FollowedBy, rows: DataFrame, later: DataFrame, how: str = "left_semi") -> DataFrame:
    """The rows that an event of ``later`` follows (``how="left_anti"``: that none follows), as
    copies whose role is ``join``'s flag."""
    time = view.event_time
    condition = [F.col(f"row.{c}") == F.col(f"later.{c}") for c in join.on] + [
        F.col(f"later.{time}") >= F.col(f"row.{time}"),
        F.col(f"later.{time}") <= F.col(f"row.{time}") + F.expr(f"INTERVAL {interval(join.within)}"),
    ]
    return rows.alias("row").join(later.alias("later"), condition, how).withColumn(ROLE, F.lit(join.flag))


def spans(view: View, rows: DataFrame) -> DataFrame:
    """Each row as a one-event span of its session key: (per, start, last, events)."""
    time = F.col(view.event_time)
    return rows.select(view.session.per, time.alias("start"), time.alias("last"), F.lit(1).cast("long").alias("events"))


def sessions(view: View, spans: DataFrame) -> DataFrame:
    """Merge spans (per, start, last, events) into sessions: the next span of the same ``per`` value
    joins a session while it starts less than the gap after the session's last event so far."""
    per, gap = view.session.per, F.expr(f"INTERVAL {interval(view.session.gap)}")
    order = Window.partitionBy(per).orderBy("start", "last")
    last_so_far = F.max("last").over(order.rowsBetween(Window.unboundedPreceding, -1))
    starts = (last_so_far.isNull() | (F.col("start") >= last_so_far + gap)).cast("int")
    numbered = spans.withColumn("_starts", starts).withColumn(
        "_session", F.sum("_starts").over(order.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    )
    return (
        numbered.groupBy(per, "_session")
        .agg(F.min("start").alias("start"), F.max("last").alias("last"), F.sum("events").alias("events"))
        .drop("_session")
    )


def session_rows(view: View, sessions: DataFrame, weight: int = 1) -> DataFrame:
    """One prepared row per session: its start (as the event time), duration_s and events."""
    return sessions.select(
        F.col("start").alias(view.event_time),
        view.session.per,
        ((F.unix_micros("last") - F.unix_micros("start")) / 1e6).alias("duration_s"),
        "events",
        F.lit(EVENT).alias(ROLE),
        F.lit(weight).alias(WEIGHT),
        F.col("last").alias(NEWEST),
    )


def dimension_tables(view: View) -> tuple[str, ...]:
    """The dimension tables the view joins, by name."""
    return tuple(j.table for j in view.joins if isinstance(j, Dimension))


def enrich(view: View, rows: DataFrame, dimensions: dict[str, DataFrame], as_of: bool) -> DataFrame:
    """Add each Dimension join's column: the dimension row valid at the event's time (``as_of``) or
    the current one; its default where there is none."""
    for join in view.joins:
        if not isinstance(join, Dimension):
            continue
        table = dimensions[join.table].alias("dim")
        on = F.col(f"row.{join.key}") == F.col(f"dim.{join.key}")
        time = F.col(f"row.{view.event_time}")
        if as_of:
            on &= (F.col("dim.valid_from") <= time) & (F.col("dim.valid_to").isNull() | (time < F.col("dim.valid_to")))
        else:
            on &= F.col("dim.valid_to").isNull()
        value = F.coalesce(F.col(f"dim.{join.column}"), F.lit(join.default)).alias(join.column)
        rows = rows.alias("row").join(table, on, "left").select("row.*", value)
    return rows


@cache
def _grouping(view: View, exact: bool) -> tuple[tuple[Column, ...], tuple[Column, ...], tuple[Column, ...]]:
    """The Columns :func:`aggregate` groups by, aggregates and selects, built once per view."""
    states = _all_states(view, exact)
    keys = (F.window(F.col(view.event_time), *view.windows.spark()).alias("window"), *map(F.col, view.keys))
    partials = (
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *map(F.col, (*view.keys, *states)),
    )
    aggregates = tuple(F.expr(agg).alias(c) for c, (agg, _) in states.items())
    if exact:
        partials = (
            *partials[: 2 + len(view.keys)],
            *(F.expr(sql).alias(name) for name, sql in finals(view, exact=True).items()),
        )
        if isinstance(view.window, Session):
            aggregates, partials = (*aggregates, F.max(NEWEST).alias(NEWEST)), (*partials, F.col(NEWEST))
    return keys, aggregates, partials


def _states(measure: Measure, exact: bool) -> dict[str, tuple[str, str]]:
    """The columns ``measure`` is kept as: name -> (SQL aggregate over prepared rows, SQL aggregate
    merging partials of that column); both plain enough for Spark SQL and DuckDB (plain identifiers)."""
    name, kind = measure.name, measure.kind
    own = f"{ROLE} = '{EVENT}'"
    signed = f"CASE WHEN {own} THEN if({WEIGHT} > 0, {measure.column}, -{measure.column}) END"

    def weights(condition: str) -> str:
        return f"CAST(coalesce(sum(CASE WHEN {condition} THEN {WEIGHT} END), 0) AS BIGINT)"

    if kind == "count":
        flagged = f"{ROLE} = '{measure.column}'" if measure.column else own
        return {name: (weights(flagged), f"CAST(sum({name}) AS BIGINT)")}
    if kind == "sum":
        return {name: (f"sum({signed})", f"sum({name})")}
    if kind in ("min", "max"):
        return {name: (f"{kind}(CASE WHEN {own} THEN {measure.column} END)", f"{kind}({name})")}
    if kind == "mean":
        return {
            f"{name}_sum": (f"CAST(sum({signed}) AS DOUBLE)", f"sum({name}_sum)"),
            f"{name}_count": (weights(f"{own} AND {measure.column} IS NOT NULL"), f"CAST(sum({name}_count) AS BIGINT)"),
        }
    value = f"CASE WHEN {own} THEN {measure.column} END"
    if kind == "distinct" and exact:
        return {name: (f"CAST(count(DISTINCT {value}) AS BIGINT)", "")}
    if kind == "distinct":
        return {f"{name}_sketch": (f"hll_sketch_agg({value}, {SKETCH_LGK})", f"hll_union_agg({name}_sketch)")}
    if kind == "ratio":
        return {}
    raise ValueError(f"measure {name}: unknown kind {kind!r}")


def _all_states(view: View, exact: bool) -> dict[str, tuple[str, str]]:
    rows = {
        ROWS: (
            f"CAST(coalesce(sum(CASE WHEN {ROLE} = '{EVENT}' THEN {WEIGHT} END), 0) AS BIGINT)",
            f"CAST(sum({ROWS}) AS BIGINT)",
        )
    }
    return {**rows, **{c: sql for m in view.measures for c, sql in _states(m, exact).items()}}


def _final(measure: Measure, exact: bool) -> str:
    """SQL for ``measure``'s value from its state columns."""
    name, kind = measure.name, measure.kind
    if kind == "mean":
        return f"CAST({name}_sum / nullif({name}_count, 0) AS DOUBLE)"
    if kind == "distinct" and not exact:
        return f"CAST(hll_sketch_estimate({name}_sketch) AS BIGINT)"
    if kind == "ratio":
        return f"CAST({measure.column} AS DOUBLE) / nullif({measure.over}, 0)"
    return name


def state_columns(view: View) -> tuple[str, ...]:
    """The columns of a speed partial beside its window and keys: the mergeable states."""
    return tuple(_all_states(view, exact=False))


def partial_states(view: View) -> dict[str, str]:
    """SQL aggregates, per state column, over a batch of prepared rows: a speed partial's states."""
    return {c: agg for c, (agg, _) in _all_states(view, exact=False).items()}


def merged(view: View) -> dict[str, str]:
    """SQL aggregates, per state column, that combine partials of one window and key."""
    return {c: merge for c, (_, merge) in _all_states(view, exact=False).items()}


def finals(view: View, exact: bool = False) -> dict[str, str]:
    """SQL, per measure, for its value from (merged) state columns."""
    return {m.name: _final(m, exact) for m in view.measures}


def aggregate(view: View, rows: DataFrame, exact: bool) -> DataFrame:
    """Per window and key of prepared, enriched rows: the view's columns (``exact``, batch), or the
    speed partial's state columns."""
    keys, aggregates, columns = _grouping(view, exact)
    return rows.groupBy(*keys).agg(*aggregates).select(*columns)


def packed(view: View, partials: DataFrame) -> DataFrame:
    """Speed partials of ``view`` as rows of the shared partials table."""
    return partials.select(*_packing(view))


@cache
def _packing(view: View) -> tuple[Column, ...]:
    columns = ("window_start", "window_end", *view.keys, *state_columns(view))
    return (
        F.lit(view.name).alias("view"),
        F.date_trunc("hour", "window_start").alias("window_hour"),
        F.struct(*columns).alias(view.name),
    )


def batch(view: View, events: DataFrame, dimensions: dict[str, DataFrame], newest: bool = False) -> DataFrame:
    """Exact view rows from raw_events' first copies (:func:`first_copies`), dimensions as of each
    event's time; with ``newest``, a view of sessions' rows have the column :data:`NEWEST` too."""
    rows = aggregate(view, enrich(view, prepare(view, events), dimensions, as_of=True), exact=True)
    return rows.drop(NEWEST) if isinstance(view.window, Session) and not newest else rows
