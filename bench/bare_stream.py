"""The baseline: a bare Structured Streaming job, as a data engineer would write it by hand.

It reads the same topic with the same Kafka options, trigger and ``maxOffsetsPerTrigger`` as the speed
layer, parses the same JSON with ``from_json`` into raw_events' typed columns (the Kafka record's too:
the payload as text, its topic, partition, offset, key and timestamp, when it was ingested) and appends
them to a raw_events table made as the speed layer makes its own (same columns, partitioning and table
properties, created before the query starts). No validation, dead letters, dedupe or views.

It runs in a process of its own, as the speed layer does, so both start with a cold JVM whose JIT has
compiled nothing yet: ``python -m bench.bare_stream HOME TOTAL`` drains ``TOTAL`` records and prints
the drain as JSON; ``python -m bench.bare_stream HOME`` runs until it is terminated.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import StreamingQuery

from bench.throughput import TIMEOUT, batch_end
from infra import processes
from infra import spark as sparks
from infra.deployment import Deployment, load
from speed_layer.queries import ensure_tables, kafka_source
from views import tables


def as_raw_events(records: DataFrame, settings: Deployment) -> DataFrame:
    """Kafka records (Spark's Kafka source's columns) as rows of ``settings``' raw_events, which must
    exist: its columns and their types are read from it."""
    source = settings.source
    schema = records.sparkSession.read.format("delta").load(tables.RAW_EVENTS.path(settings)).schema
    typed = {field.name: field.dataType for field in schema}
    is_time = {name: typed[source.column(name)] == T.TimestampType() for name in source.fields}
    event = F.from_json(
        F.col("value").cast("string"),
        T.StructType(
            [
                T.StructField(name, T.StringType() if is_time[name] else typed[source.column(name)])
                for name in source.fields
            ]
        ),
    )
    columns = {
        source.column(name): F.try_to_timestamp(event[name]) if is_time[name] else event[name] for name in source.fields
    }
    columns |= {
        "event_date": F.to_date(columns[source.column(source.time)]),
        "topic": F.col("topic"),
        "partition": F.col("partition"),
        "offset": F.col("offset"),
        "kafka_timestamp": F.col("timestamp"),
        "key": F.col("key"),
        "payload": F.col("value"),
        "ingested_at": F.current_timestamp(),
    }
    return records.select(*(columns[name].cast(kind).alias(name) for name, kind in typed.items()))


def rows(spark: SparkSession, settings: Deployment) -> DataFrame:
    """The events topic's records as raw_events rows, as they come."""
    return as_raw_events(kafka_source(spark, settings, settings.topic, "earliest"), settings)


def start(settings: Deployment) -> tuple[SparkSession, StreamingQuery]:
    """A session, and the job started in it; its table and checkpoint live in ``settings``' home."""
    spark = sparks.session(settings, "lambdalake-bench-bare")
    ensure_tables(spark, settings)
    query = (
        rows(spark, settings)
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy(*tables.RAW_EVENTS.partition_by)
        .option("checkpointLocation", str(settings.checkpoints / "bare"))
        .trigger(processingTime=f"{int(settings.trigger_seconds * 1000)} milliseconds")
        .start(tables.RAW_EVENTS.path(settings))
    )
    return spark, query


def drain(settings: Deployment, total: int) -> dict:
    """Run the job until it has read ``total`` records; its first micro-batch's start to the end of
    the one that read the last record (Spark's own progress reports), and the micro-batches."""
    spark, query = start(settings)
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


def run(settings: Deployment) -> None:
    """Run the job until SIGTERM; say "running" once it has started."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    spark, query = start(settings)
    print("running", flush=True)
    try:
        while query.isActive:
            query.awaitTermination(1)
        raise RuntimeError(f"the bare stream failed: {query.exception()}")
    finally:
        query.stop()
        spark.stop()


@contextmanager
def running(settings: Deployment) -> Iterator[None]:
    """The job running in a process of its own while the block runs (its log in ``settings``' home)."""
    log = settings.home / "bare_stream.log"
    with log.open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.bare_stream", str(settings.home)],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    try:
        assert proc.stdout is not None  # stdout=PIPE
        if proc.stdout.readline().strip() != "running":
            raise RuntimeError(f"the bare stream did not start:\n{log.read_text()[-3000:]}")
        yield
        if proc.poll() is not None:
            raise RuntimeError(f"the bare stream stopped:\n{log.read_text()[-3000:]}")
    finally:
        proc.terminate()
        proc.wait(120)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(drain(load(sys.argv[1]), int(sys.argv[2]))))
    else:
        run(load(sys.argv[1]))
