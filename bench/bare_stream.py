"""The baseline: a bare Structured Streaming job, as a data engineer would write it by hand.

It reads the same topic with the same Kafka options, trigger and ``maxOffsetsPerTrigger`` as the speed
layer, parses the same JSON into the event's typed columns with ``from_json``, and appends the rows to
one Delta table partitioned by event day. No validation, dead letters, dedupe or views.

It runs in a process of its own (``python -m bench.bare_stream HOME TOTAL``), as the speed layer
does: both start with a cold JVM, whose JIT has compiled nothing yet. It prints its drain as JSON.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bench.throughput import TIMEOUT, batch_end
from infra import processes
from infra import spark as sparks
from infra.settings import Settings, load

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


def drain(settings: Settings, total: int) -> dict:
    """Run the job until it has read ``total`` records; its first micro-batch's start to the end of
    the one that read the last record (Spark's own progress reports), and the micro-batches."""
    spark = sparks.session(settings, "lambdalake-bench-bare")
    query = start(spark, settings)
    try:
        deadline, first = time.monotonic() + TIMEOUT, None
        while time.monotonic() < deadline:
            if query.exception():
                raise RuntimeError(f"the bare stream failed: {query.exception()}")
            progress = [json.loads(p.json) for p in query.recentProgress]
            if progress:
                first, last = first or progress[0], progress[-1]
                done = sum(o for topic in (last["sources"][0]["endOffset"] or {}).values() for o in topic.values())
                if done >= total:
                    seconds = batch_end(last["timestamp"], last["durationMs"]) - processes.parse_utc(first["timestamp"])
                    return {"seconds": seconds, "batches": last["batchId"] + 1}
            time.sleep(0.2)
        raise TimeoutError(f"the bare stream did not drain {total:,} records in {TIMEOUT}s")
    finally:
        query.stop()
        spark.stop()


if __name__ == "__main__":
    home, total = sys.argv[1:]
    print(json.dumps(drain(load(home), int(total))))
