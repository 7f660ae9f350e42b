"""Recompute batch views exactly from raw_events for whole UTC days, then advance the boundary.

Each view's days are replaced atomically (Delta ``replaceWhere``), so reruns and backfills converge;
a day enters the ledger (serving_state) only after its rows are committed.
"""

from __future__ import annotations

import logging
from datetime import datetime

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from infra import delta
from infra import spark as sparks
from infra.settings import Settings
from views import all_views, compile, timebase
from views.model import View

log = logging.getLogger(__name__)

LEDGER = T.StructType([
    T.StructField("view", T.StringType(), False),
    T.StructField("day", T.DateType(), False),
    T.StructField("rows", T.LongType(), False),
    T.StructField("computed_at", T.TimestampType(), False),
])


def _literal(moment: datetime) -> str:
    return f"TIMESTAMP'{timebase.utc(moment):%Y-%m-%d %H:%M:%S}'"


def _raw_events(spark: SparkSession, settings: Settings):
    path = settings.table("raw_events")
    if not DeltaTable.isDeltaTable(spark, path):
        raise FileNotFoundError(f"no raw_events table at {path}: start the speed layer (`lambdalake up`) "
                                f"so that events land before recomputing")
    return spark.read.format("delta").load(path)


def recompute_view(spark: SparkSession, settings: Settings, view: View, start: datetime, end: datetime) -> dict:
    """Replace ``view``'s batch rows for the days of ``[start, end)`` and record those days complete."""
    start, end = timebase.utc(start), timebase.utc(end)
    days = timebase.days_between(start, end)
    events = _raw_events(spark, settings).where(F.col("event_date").isin(days))
    window = f"window_start >= {_literal(start)} AND window_start < {_literal(end)}"
    rows = compile.batch(view, events).where(window).persist()
    per_day = {r.day: r["count"] for r in rows.groupBy(F.to_date("window_start").alias("day")).count().collect()}
    (rows.write.format("delta").mode("overwrite").option("replaceWhere", window)
     .save(settings.table(f"batch/{view.name}")))
    rows.unpersist()
    ledger = settings.table("serving_state")
    delta.ensure(spark, ledger, LEDGER)
    now = datetime.now(timebase.UTC)
    done = spark.createDataFrame([(view.name, day, per_day.get(day, 0), now) for day in days], LEDGER)
    delta.upsert(done, ledger, ("view", "day"))
    boundary = timebase.boundary(r.day for r in spark.read.format("delta").load(ledger)
                                 .where(F.col("view") == view.name).select("day").collect())
    count = sum(per_day.values())
    log.info("batch %s: %d rows for %s..%s; boundary %s", view.name, count, days[0], days[-1], boundary)
    return {"rows": count, "days": [d.isoformat() for d in days], "boundary": boundary.isoformat()}


def recompute_day(settings: Settings, start: datetime, end: datetime) -> dict:
    """Recompute every view for ``[start, end)`` (whole UTC days); the summary per view."""
    spark = sparks.session(settings, "lambdalake-batch")
    return {name: recompute_view(spark, settings, view, start, end) for name, view in all_views().items()}
