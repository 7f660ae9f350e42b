"""The baseline: a bare Structured Streaming job, as a data engineer would write it by hand.

It reads the same topic with the same Kafka options, trigger and ``maxOffsetsPerTrigger`` as the speed
layer, parses the same JSON into the event's typed columns with ``from_json``, and appends the rows to
one Delta table partitioned by event day. No validation, dead letters, dedupe or views.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from infra.settings import Settings

SCHEMA = T.StructType([
    *(T.StructField(name, T.StringType()) for name in (
        "event_id", "event_time", "event_type", "user_id", "session_id", "page", "query", "product_id")),
    T.StructField("quantity", T.IntegerType()),
    T.StructField("amount", T.DecimalType(12, 2)),
])


def rows(spark: SparkSession, settings: Settings) -> DataFrame:
    records = (spark.readStream.format("kafka")
               .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
               .option("subscribe", settings.topic)
               .option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
               .load())
    event = F.from_json(F.col("value").cast("string"), SCHEMA)
    parsed = records.select(event.alias("e"), "partition", "offset").select("e.*", "partition", "offset")
    return parsed.withColumn("event_time", F.try_to_timestamp("event_time")).withColumn(
        "event_date", F.to_date("event_time"))


def start(spark: SparkSession, settings: Settings):
    """Start the job; its output and checkpoint live in ``settings``' home."""
    return (rows(spark, settings).writeStream.format("delta").outputMode("append")
            .partitionBy("event_date")
            .option("checkpointLocation", str(settings.checkpoints / "bare"))
            .trigger(processingTime=f"{int(settings.trigger_seconds * 1000)} milliseconds")
            .start(settings.table("bare_events")))
