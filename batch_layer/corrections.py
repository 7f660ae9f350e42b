"""The correction report: when batch makes days final, how far the speed layer's provisional rows for
those days were off, so that users learn how much to trust provisional numbers.

Per view and recompute, one row per measure in ``corrections``: the windows (window and key) each side
had, those batch added, those it removed (speed showed them, batch has none) and those it changed; and
the measure's absolute difference summed over the windows (a missing side counts as 0) with its size
relative to batch's own total.
"""

from __future__ import annotations

import operator
from datetime import datetime
from functools import reduce

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra.settings import Settings
from serving_layer.spark_sql import dialect, speed_rows
from views import tables, timebase
from views.model import View


def compare(view: View, batch: DataFrame, speed: DataFrame) -> dict:
    """Windows of each side, added, removed and changed ones, and per measure (difference, batch total)."""
    keys = ["window_start", "window_end", *view.keys]
    measures = [m.name for m in view.measures]
    b = batch.select(*keys, *(F.col(m).cast("double").alias(f"b_{m}") for m in measures), F.lit(True).alias("_b"))
    s = speed.select(*keys, *(F.col(m).cast("double").alias(f"s_{m}") for m in measures), F.lit(True).alias("_s"))
    both = b.join(s, keys, "full_outer")
    differs = [~F.col(f"b_{m}").eqNullSafe(F.col(f"s_{m}")) for m in measures]
    found = both.agg(
        F.count_if(F.col("_s").isNotNull()).alias("speed_windows"), F.count_if(F.col("_b").isNotNull()).alias("batch_windows"),
        F.count_if(F.col("_s").isNull()).alias("added"), F.count_if(F.col("_b").isNull()).alias("removed"),
        F.count_if(F.col("_b").isNotNull() & F.col("_s").isNotNull() & reduce(operator.or_, differs)).alias("changed"),
        *(F.sum(F.abs(F.coalesce(F.col(f"b_{m}"), F.lit(0.0)) - F.coalesce(F.col(f"s_{m}"), F.lit(0.0)))).alias(f"d_{m}")
          for m in measures),
        *(F.sum(F.abs(F.col(f"b_{m}"))).alias(f"t_{m}") for m in measures)).first().asDict()
    return {**{k: found[k] for k in ("speed_windows", "batch_windows", "added", "removed", "changed")},
            "measures": {m: (found[f"d_{m}"] or 0.0, found[f"t_{m}"] or 0.0) for m in measures}}


def record(spark: SparkSession, settings: Settings, view: View, batch: DataFrame, start: datetime,
           end: datetime) -> dict | None:
    """Compare ``batch`` (the view's exact rows of ``[start, end)``) with the speed layer's rows of
    those windows and append the report to ``corrections``; None if the speed layer has no rows there."""
    with dialect(spark):
        speed = speed_rows(spark, settings, view, start, end)
        found = None if speed is None else compare(view, batch, speed)
    if found is None or not found["speed_windows"]:
        return None
    counts = [found[k] for k in ("speed_windows", "batch_windows", "added", "removed", "changed")]
    now, days = datetime.now(timebase.UTC), (start.date(), (end - timebase.DAY).date())
    rows = [(now, view.name, *days, m, *counts, float(d), d / t if t else None) for m, (d, t) in found["measures"].items()]
    schema = tables.CORRECTIONS.schema
    write_deltalake(tables.CORRECTIONS.path(settings),
                    pa.Table.from_pylist([dict(zip(schema.names, row)) for row in rows], schema), mode="append")
    return found
