"""Late events: those behind the speed layer's watermark, which its views leave to batch.

They are in raw_events all the same; late_events counts them per view and event day, with the time
they arrived, so that the batch layer recomputes exactly the days that received them.
"""

from __future__ import annotations

from datetime import datetime
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from views import compile
from views.model import View

SCHEMA = T.StructType([
    T.StructField("view", T.StringType(), False),
    T.StructField("day", T.DateType(), False),
    T.StructField("events", T.LongType(), False),
    T.StructField("received_at", T.TimestampType(), False),
    T.StructField("batch_id", T.LongType(), False),
])


def count(landed: DataFrame, views: list[View], watermark: datetime, batch_id: int) -> DataFrame:
    """Per view and day, how many of ``landed``'s events are older than the speed layer's watermark."""
    late = (landed.where(F.col("event_time") < F.lit(watermark))
            .groupBy("event_type", F.to_date("event_time").alias("day")).agg(F.count(F.lit(1)).alias("events"))
            .localCheckpoint(eager=True))  # a few rows: the views below count from them, not from landed
    parts = [compile.inputs(view, late).groupBy(F.lit(view.name).alias("view"), "day")
             .agg(F.sum("events").cast("long").alias("events")) for view in views]
    return reduce(DataFrame.unionByName, parts).select(
        "view", "day", "events", F.current_timestamp().alias("received_at"), F.lit(batch_id).cast("long").alias("batch_id"))
