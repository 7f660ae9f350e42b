"""Compaction of the speed layer's partials, off the hot path (the ``maintenance`` DAG, or
``lambdalake speed compact``): each hour of a view's windows that no new event can change any more is
folded into one row per window and key, with the view's own merge.

Every micro-batch appends a partial for each window its events touch, so a busy hour holds one partial
per micro-batch. An hour is closed when all its windows end before the watermark minus how far the view
reaches back (a click may still flag a search 30 minutes old, a session may still grow from a day
ago). Its partition (``view``, ``window_hour``) is then replaced in one Delta commit (``replaceWhere``):
readers see the partials or their fold, never both, and the stream, which no longer appends there,
never conflicts with it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra.settings import Settings
from speed_layer import state
from views import all_views, compile, tables
from views.model import View

HOUR = timedelta(hours=1)


def last_closed_hour(view: View, watermark: datetime) -> datetime:
    """The start of the latest hour whose windows no event at or after ``watermark`` can change."""
    closed = watermark - view.follow - view.lookback - view.windows.size - HOUR
    return closed.replace(minute=0, second=0, microsecond=0)


def _fold(view: View, partials: DataFrame) -> DataFrame:
    """One row per window and key of ``partials`` (rows of the partials table), with their types."""
    fields = partials.schema[view.name].dataType
    groups = ("window_start", "window_end", *view.keys)
    states = compile.merged(view)
    folded = (partials.select(f"`{view.name}`.*").groupBy(*groups)
              .agg(*(F.expr(sql).alias(c) for c, sql in states.items()))
              .where(F.col(compile.ROWS) > 0))
    typed = folded.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in fields.fields))
    return compile.packed(view, typed)


def compact(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """Fold every closed hour that holds more than one partial per window and key; the hours folded per view."""
    path = tables.SPEED_PARTIALS.path(settings)
    newest = state.newest_event(spark.read.format("delta").load(tables.RAW_EVENTS.path(settings)))
    if newest is None or not DeltaTable.isDeltaTable(spark, path):
        return {}
    watermark = newest - state.duration(settings.watermark)
    table = spark.read.format("delta").load(path)
    done = {}
    for view in all_views(settings.view_modules, settings.domain).values():
        if view.name not in table.columns:
            continue
        closed = table.where((F.col("view") == view.name) & (F.col("window_hour") <= F.lit(last_closed_hour(view, watermark))))
        windows = F.struct(*(F.col(f"`{view.name}`.{c}") for c in ("window_start", *view.keys)))
        hours = [r.hour for r in closed.groupBy(F.date_format("window_hour", "yyyy-MM-dd HH:mm:ss").alias("hour"))
                 .agg(F.count(F.lit(1)).alias("rows"), F.count_distinct(windows).alias("windows"))
                 .where("rows > windows").collect()]
        if not hours:
            continue
        where = f"view = '{view.name}' AND window_hour IN ({', '.join(f'TIMESTAMP {h!r}' for h in hours)})"
        (_fold(view, table.where(where)).unionByName(table.limit(0), allowMissingColumns=True).select(*table.columns)
         .write.format("delta").mode("overwrite").option("replaceWhere", where).save(path))
        done[view.name] = len(hours)
    return done
