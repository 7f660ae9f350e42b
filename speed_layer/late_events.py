"""Late events: those the speed layer's rows cannot show, which it leaves to batch.

An event is late for a view when it is behind the speed layer's watermark (the speed views drop it),
or when it can change a day that batch has made final for the view (the merged view serves batch rows
there, whatever the speed layer adds). They are in raw_events all the same; late_events counts them
per view and event day, with the time they arrived, so that the batch layer recomputes exactly the
final days they change (batch_layer.stale).
"""

from __future__ import annotations

import math
from datetime import date, datetime
from functools import reduce

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from infra.settings import Settings
from views import compile
from views.model import View
from views.timebase import DAY

SCHEMA = T.StructType([
    T.StructField("view", T.StringType(), False),
    T.StructField("day", T.DateType(), False),
    T.StructField("events", T.LongType(), False),
    T.StructField("received_at", T.TimestampType(), False),
    T.StructField("batch_id", T.LongType(), False),
])


def final_through(settings: Settings, views: list[View]) -> dict[str, date]:
    """Per view with final days, the newest day whose events can change one of them (its newest final
    day and as many days after as its windows reach past midnight); read from the ledger."""
    try:
        ledger = DeltaTable(settings.table("serving_state")).to_pyarrow_table(columns=["view", "day"]).to_pylist()
    except TableNotFoundError:
        return {}
    newest: dict[str, date] = {}
    for row in ledger:
        newest[row["view"]] = max(newest.get(row["view"], row["day"]), row["day"])
    return {v.name: newest[v.name] + math.ceil(v.reach / DAY) * DAY for v in views if v.name in newest}


def behind(watermark: datetime | None) -> Column:
    """Whether an event is behind ``watermark``."""
    return F.coalesce(F.col("event_time") < F.lit(watermark), F.lit(False))


def late(watermark: datetime | None, finals: dict[str, date]) -> Column:
    """Whether an event may be late for some view (:func:`count` tells for which)."""
    newest = max(finals.values(), default=None)
    return behind(watermark) | F.coalesce(F.to_date("event_time") <= F.lit(newest), F.lit(False))


def count(landed: DataFrame, views: list[View], watermark: datetime | None, finals: dict[str, date],
          batch_id: int) -> DataFrame:
    """Per view and day, how many of ``landed``'s events are late for the view: behind the speed
    layer's watermark, or on a day at or before the view's :func:`final_through` day (``finals``)."""
    late_rows = (landed.where(late(watermark, finals))
                 .groupBy("event_type", F.to_date("event_time").alias("day"), behind(watermark).alias("behind"))
                 .agg(F.count(F.lit(1)).alias("events"))
                 .localCheckpoint(eager=True))  # a few rows: the views below count from them, not from landed
    parts = [compile.inputs(view, late_rows)
             .where(F.col("behind") | F.coalesce(F.col("day") <= F.lit(finals.get(view.name)), F.lit(False)))
             .groupBy(F.lit(view.name).alias("view"), "day").agg(F.sum("events").cast("long").alias("events"))
             for view in views]
    return reduce(DataFrame.unionByName, parts).select(
        "view", "day", "events", F.current_timestamp().alias("received_at"), F.lit(batch_id).cast("long").alias("batch_id"))
