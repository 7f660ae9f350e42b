"""Compile a :class:`~views.model.View` into Spark transformations, for batch and for speed.

Both paths share the filter, the window and the key; they differ only where the design allows:
batch dedupes exactly (the first received copy of each event_id) and counts distinct values exactly;
speed dedupes within the watermark and keeps a mergeable HyperLogLog sketch for distinct counts.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from views.model import Measure, View

#: Order in which copies of an event were received; the first one counts.
RECEIPT_ORDER = ("ingested_at", "kafka_timestamp", "partition", "offset")


def _inputs(view: View, events: DataFrame) -> DataFrame:
    return events.where(F.col("event_type").isin(*view.event_types))


def _window(view: View) -> Column:
    return F.window(F.col(view.event_time), view.window.spark).alias("window")


def _exact(measure: Measure) -> Column:
    if measure.kind == "count":
        return F.count(F.lit(1)).cast("long").alias(measure.name)
    return F.count_distinct(F.col(measure.column)).cast("long").alias(measure.name)


def _sketched(measure: Measure) -> Column:
    if measure.kind == "count":
        return _exact(measure)
    return F.hll_sketch_agg(F.col(measure.column)).alias(f"{measure.name}_sketch")


def _output(grouped: DataFrame, view: View, measures: list[Column]) -> DataFrame:
    return grouped.select(F.col("window.start").alias("window_start"),
                          F.col("window.end").alias("window_end"), *view.keys, *measures)


def _estimate(measure: Measure) -> Column:
    if measure.kind == "count":
        return F.col(measure.name)
    return F.hll_sketch_estimate(F.col(f"{measure.name}_sketch")).cast("long").alias(measure.name)


def sketch_columns(view: View) -> tuple[str, ...]:
    """Columns the speed table keeps beside the view's own: the sketches of distinct measures."""
    return tuple(f"{m.name}_sketch" for m in view.measures if m.approximate_in_speed)


def first_copies(events: DataFrame) -> DataFrame:
    """Each event_id once: the first received copy."""
    first = Window.partitionBy("event_id").orderBy(*RECEIPT_ORDER)
    return events.withColumn("_copy", F.row_number().over(first)).where("_copy = 1").drop("_copy")


def batch(view: View, events: DataFrame) -> DataFrame:
    """Exact view rows from raw_events rows."""
    grouped = first_copies(_inputs(view, events)).groupBy(_window(view), *view.keys)
    return _output(grouped.agg(*(_exact(m) for m in view.measures)), view,
                   [F.col(m.name) for m in view.measures])


def speed(view: View, events: DataFrame, watermark: str) -> DataFrame:
    """Streaming view rows (update mode) from a stream of raw_events rows."""
    deduped = (_inputs(view, events).withWatermark(view.event_time, watermark)
               .dropDuplicatesWithinWatermark(["event_id"]))
    grouped = deduped.groupBy(_window(view), *view.keys)
    aggregated = grouped.agg(*(_sketched(m) for m in view.measures))
    return _output(aggregated, view, [*(_estimate(m) for m in view.measures),
                                      *(F.col(c) for c in sketch_columns(view))])
