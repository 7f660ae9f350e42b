"""Compile a :class:`~views.model.View` into Spark transformations, the same ones for batch and speed.

A view is computed in three steps, each a pure ``DataFrame -> DataFrame`` function:

1. :func:`prepare`: the view's events, each event_id once, flagged by its FollowedBy joins and grouped
   into sessions if its window is one. Batch keeps the first received copy; speed (given a watermark)
   the first copy within the watermark, with Structured Streaming's stateful operators.
2. :func:`enrich`: dimension columns; batch as of the event's time, speed as the dimension is now.
3. :func:`aggregate`: measures per window and key. Each measure is kept as mergeable *states*: batch
   computes them exactly from all rows; speed computes them per micro-batch and merges them into its
   table (:func:`merge_updates`), with a HyperLogLog sketch for distinct counts.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from views.model import Dimension, FollowedBy, Measure, Session, View, interval

#: Order in which copies of an event were received; the first one counts.
RECEIPT_ORDER = ("ingested_at", "kafka_timestamp", "partition", "offset")
#: Which measures a prepared row feeds: "event" (the view's own rows) or a FollowedBy flag.
ROLE = "_role"
EVENT = "event"


def inputs(view: View, events: DataFrame) -> DataFrame:
    """The events the view is computed from."""
    return events.where(F.col("event_type").isin(*view.event_types))


def first_copies(events: DataFrame) -> DataFrame:
    """Each event_id once: the first received copy."""
    first = Window.partitionBy("event_id").orderBy(*RECEIPT_ORDER)
    return events.withColumn("_copy", F.row_number().over(first)).where("_copy = 1").drop("_copy")


def prepare(view: View, events: DataFrame, watermark: str | None = None) -> DataFrame:
    """The view's rows from raw_events rows (a stream of them when ``watermark`` is given)."""
    if watermark:
        events = events.withWatermark(view.event_time, watermark)
        rows = inputs(view, events).dropDuplicatesWithinWatermark(["event_id"])
    else:
        rows = first_copies(inputs(view, events))
    rows = rows.withColumn(ROLE, F.lit(EVENT))
    for join in view.joins:
        if isinstance(join, FollowedBy):
            rows = _followed(view, rows, events, join)
    if isinstance(view.window, Session):
        rows = _sessions(view, rows)
    return rows


def _followed(view: View, rows: DataFrame, events: DataFrame, join: FollowedBy) -> DataFrame:
    """``rows`` plus, for each row that ``join``'s events follow, a copy whose role is its flag."""
    time = view.event_time
    later = events.where(F.col("event_type") == join.event_type).alias("later")
    condition = [F.col(f"row.{c}") == F.col(f"later.{c}") for c in join.on] + [
        F.col(f"later.{time}") >= F.col(f"row.{time}"),
        F.col(f"later.{time}") <= F.col(f"row.{time}") + F.expr(f"INTERVAL {interval(join.within)}"),
    ]
    followed = rows.alias("row").join(later, condition, "left_semi").withColumn(ROLE, F.lit(join.flag))
    return rows.unionByName(followed)


def _sessions(view: View, rows: DataFrame) -> DataFrame:
    """One row per session: its start (as the event time), duration_s and events."""
    window, time = view.window, F.col(view.event_time)
    sessions = rows.groupBy(F.session_window(time, interval(window.gap)), window.per).agg(
        F.min(time).alias("start"), F.max(time).alias("last"), F.count(F.lit(1)).alias("events"))
    return sessions.select(
        F.col("start").alias(view.event_time), window.per,
        ((F.unix_micros("last") - F.unix_micros("start")) / 1e6).alias("duration_s"),
        "events", F.lit(EVENT).alias(ROLE))


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


def _window(view: View) -> Column:
    return F.window(F.col(view.event_time), *view.windows.spark()).alias("window")


def _states(measure: Measure, exact: bool) -> dict[str, tuple[str, str | None]]:
    """The columns ``measure`` is kept as: name -> (SQL aggregate over rows, SQL merging a stored value
    ``t`` with a micro-batch's ``s``; None in exact mode, which never merges)."""
    name, kind = measure.name, measure.kind
    own = f"`{ROLE}` = '{EVENT}'"
    value = f"CASE WHEN {own} THEN `{measure.column}` END"

    def added(column: str) -> str:
        return f"coalesce(t.`{column}`, 0) + coalesce(s.`{column}`, 0)"

    if kind == "count":
        flagged = f"`{ROLE}` = '{measure.column}'" if measure.column else own
        return {name: (f"CAST(count_if({flagged}) AS BIGINT)", added(name))}
    if kind == "sum":
        return {name: (f"sum({value})", added(name))}
    if kind in ("min", "max"):
        merge = "least" if kind == "min" else "greatest"
        return {name: (f"{kind}({value})", f"{merge}(t.`{name}`, s.`{name}`)")}
    if kind == "mean":
        return {f"{name}_sum": (f"CAST(sum({value}) AS DOUBLE)", added(f"{name}_sum")),
                f"{name}_count": (f"count({value})", added(f"{name}_count"))}
    if kind == "distinct" and exact:
        return {name: (f"CAST(count(DISTINCT {value}) AS BIGINT)", None)}
    if kind == "distinct":
        return {f"{name}_sketch": (f"hll_sketch_agg({value})", f"hll_union(t.`{name}_sketch`, s.`{name}_sketch`, true)")}
    if kind == "ratio":
        return {}
    raise ValueError(f"measure {name}: unknown kind {kind!r}")


def _final(measure: Measure, exact: bool, ref) -> str:
    """SQL for ``measure``'s value from its states, each state column written as ``ref(column)``."""
    name, kind = measure.name, measure.kind
    if kind == "mean":
        return f"CAST({ref(f'{name}_sum')} / nullif({ref(f'{name}_count')}, 0) AS DOUBLE)"
    if kind == "distinct" and not exact:
        return f"CAST(hll_sketch_estimate({ref(f'{name}_sketch')}) AS BIGINT)"
    if kind == "ratio":
        return f"CAST({ref(measure.column)} AS DOUBLE) / nullif({ref(measure.over)}, 0)"
    return ref(name)


def state_columns(view: View) -> tuple[str, ...]:
    """Columns the speed table keeps beside the view's own: sums and counts of means, sketches."""
    return tuple(c for m in view.measures for c in _states(m, exact=False) if c not in view.columns)


def aggregate(view: View, rows: DataFrame, exact: bool) -> DataFrame:
    """View rows from prepared, enriched rows: the view's columns, then (speed) its state columns."""
    states = {c: agg for m in view.measures for c, (agg, _) in _states(m, exact).items()}
    grouped = rows.groupBy(_window(view), *view.keys).agg(*(F.expr(agg).alias(c) for c, agg in states.items()))
    measures = [F.expr(_final(m, exact, lambda c: f"`{c}`")).alias(m.name) for m in view.measures]
    return grouped.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                          *view.keys, *measures, *(() if exact else state_columns(view)))


def merge_updates(view: View) -> dict[str, str]:
    """SQL, per column of the speed table, for a stored row ``t`` merged with a micro-batch's row ``s``."""
    merged = {c: sql for m in view.measures for c, (_, sql) in _states(m, exact=False).items()}
    finals = {m.name: _final(m, False, lambda c: f"({merged[c]})") for m in view.measures}
    return {**merged, **finals}


def batch(view: View, events: DataFrame, dimensions: dict[str, DataFrame]) -> DataFrame:
    """Exact view rows from raw_events rows, dimensions as of each event's time."""
    rows = enrich(view, prepare(view, events), dimensions, as_of=True)
    return aggregate(view, rows, exact=True)
