"""Compaction of the speed layer's partials, off the hot path (the ``maintenance`` DAG, or
``lambdalake speed compact``): each hour of a view's windows that no new event can change any more is
folded into one row per window and key, with the view's own merge.

Every micro-batch appends a partial for each window its events touch, so a busy hour holds one partial
per micro-batch. An hour is closed when all its windows end before the watermark minus how far the view
reaches back (a click may still flag a search 30 minutes old, a session may still grow from a day
ago). Its partition (``view``, ``window_hour``) is then replaced in one Delta commit (``replaceWhere``):
readers see the partials or their fold, never both, and the stream, which no longer appends there,
never conflicts with it (if the speed layer's packing commits first, the fold is made again).

Which hours may need folding is read from the Delta log with delta-rs, without a Spark job: only a
closed hour that holds more than one row can hold more than one partial per window and key, so a
deployment with none (a fresh one) costs no Spark job at all. The rest is the DataFrame API, which runs
on a classic SparkSession and on a Spark Connect session (the batch engine) alike.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import cast

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from infra.deployment import Deployment
from speed_layer import state
from views import compile, tables, timebase
from views.model import View

HOUR = timedelta(hours=1)


def last_closed_hour(view: View, watermark: datetime) -> datetime:
    """The start of the latest hour whose windows no event at or after ``watermark`` can change."""
    closed = watermark - view.follow - view.lookback - view.windows.size - HOUR
    return closed.replace(minute=0, second=0, microsecond=0)


def _fold(view: View, partials: DataFrame) -> DataFrame:
    """One row per window and key of ``partials`` (rows of the partials table), with their types."""
    fields = cast(T.StructType, partials.schema[view.name].dataType)  # a view's column is a struct
    groups = ("window_start", "window_end", *view.keys)
    states = compile.merged(view)
    folded = (
        partials.select(f"`{view.name}`.*")
        .groupBy(*groups)
        .agg(*(F.expr(sql).alias(c) for c, sql in states.items()))
        .where(F.col(compile.ROWS) > 0)
    )
    typed = folded.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in fields.fields))
    return compile.packed(view, typed)


def _crowded_hours(path: str) -> dict[str, list[datetime]]:
    """Per view, the hours of the partials table at ``path`` that hold more than one row, by the row
    counts its Delta log keeps per file."""
    files = tables.files(path)
    rows = files.append_column("rows", pc.fill_null(files["num_records"], 2))  # a file not counted may hold two
    hours = (
        rows.group_by(["partition.view", "partition.window_hour"])
        .aggregate([("rows", "sum")])
        .filter(pc.field("rows_sum") > 1)
    )
    crowded = defaultdict(list)
    for row in hours.to_pylist():
        crowded[row["partition.view"]].append(row["partition.window_hour"])
    return crowded


def _newest_event(path: str) -> datetime | None:
    """The newest event time landed in the raw_events table at ``path``, in UTC: the largest of its files'
    ``event_time`` statistics in the Delta log, or, if a file has none, read from the rows. (Delta keeps
    a time's statistics to the millisecond below: a watermark that much behind only folds an hour one
    run later.)"""
    files = tables.files(path)
    if "max.event_time" in files.column_names and files["max.event_time"].null_count == 0:
        newest = pc.max(files["max.event_time"]).as_py()
    else:
        newest = state.newest_event(path)
    return newest and newest.astimezone(timebase.UTC)


def compact(spark: SparkSession, settings: Deployment) -> dict[str, int]:
    """Fold every closed hour that holds more than one partial per window and key; the hours folded per view."""
    path, raw_events = tables.SPEED_PARTIALS.path(settings), tables.RAW_EVENTS.path(settings)
    if not (tables.exists(path) and tables.exists(raw_events)):
        return {}
    crowded = _crowded_hours(path)
    newest = _newest_event(raw_events) if crowded else None
    if newest is None:
        return {}
    watermark = newest - state.duration(settings.watermark)
    closed = {
        view: hours
        for view in settings.views.values()
        if (hours := [h for h in crowded.get(view.name, ()) if h <= last_closed_hour(view, watermark)])
    }
    if not closed:
        return {}
    table = tables.SPEED_PARTIALS.read(spark, settings)
    done = {}
    for view, candidates in closed.items():
        windows = F.struct(*(F.col(f"`{view.name}`.{c}") for c in ("window_start", *view.keys)))
        hours = [
            r.hour
            for r in table.where((F.col("view") == view.name) & F.col("window_hour").isin(candidates))
            .groupBy(F.date_format("window_hour", "yyyy-MM-dd HH:mm:ss").alias("hour"))
            .agg(F.count(F.lit(1)).alias("rows"), F.count_distinct(windows).alias("windows"))
            .where("rows > windows")
            .collect()
        ]
        if not hours:
            continue
        where = f"view = '{view.name}' AND window_hour IN ({', '.join(f'TIMESTAMP {h!r}' for h in hours)})"

        def fold(view: View = view, where: str = where) -> None:  # again on the table's newest version if the
            current = tables.SPEED_PARTIALS.read(spark, settings)  # speed layer packed these hours meanwhile
            (
                _fold(view, current.where(where))
                .unionByName(current.limit(0), allowMissingColumns=True)
                .select(*current.columns)
                .write.format("delta")
                .mode("overwrite")
                .option("replaceWhere", where)
                .save(path)
            )

        tables.retried(fold)
        done[view.name] = len(hours)
    return done
