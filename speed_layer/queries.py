"""The speed layer's streaming queries: Kafka -> raw_events + dead_letters, and raw_events -> speed views."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from infra.settings import Settings
from infra import delta as tables
from speed_layer import late_events
from views import all_views, compile, events
from views.model import View

LANDING = "landing"


def _kafka(spark: SparkSession, settings: Settings, starting_offsets: str) -> DataFrame:
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
            .option("subscribe", settings.events_topic)
            .option("startingOffsets", starting_offsets)
            .option("failOnDataLoss", "true")
            .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
            .load())


def _parse(records: DataFrame, settings: Settings) -> DataFrame:
    return events.parse(records, settings.max_payload_bytes, settings.future_horizon_seconds)


def ensure_tables(spark: SparkSession, settings: Settings) -> None:
    """Create raw_events, dead_letters and late_events (empty) so that readers never find them missing."""
    empty = _parse(spark.createDataFrame([], events.KAFKA_RECORD), settings)
    tables.ensure(spark, settings.table("raw_events"), events.landed(empty).schema, ("event_date",))
    tables.ensure(spark, settings.table("dead_letters"), events.dead_letters(empty).schema,
                  ("dead_letter_date",))
    tables.ensure(spark, settings.table("late_events"), late_events.SCHEMA)


def start_landing(spark: SparkSession, settings: Settings, start: tuple[str, str],
                  watermarks: Callable[[], dict]) -> StreamingQuery:
    """Land every Kafka record exactly once: valid ones in raw_events, the rest in dead_letters.

    ``start`` is the (txnAppId, startingOffsets) pair from :func:`speed_layer.resume.plan`.
    ``watermarks()`` gives each view's current speed watermark; events behind it are counted, per view
    and day, in late_events: the speed views will drop them, the batch layer recomputes their days.
    """
    raw_events, dead_letters, late = (settings.table(t) for t in ("raw_events", "dead_letters", "late_events"))
    views = list(all_views().values())
    app_id, starting_offsets = start

    def land(records: DataFrame, batch_id: int) -> None:
        parsed = _parse(records, settings).persist()
        valid = events.landed(parsed)
        tables.append_once(valid, raw_events, app_id, batch_id, ("event_date",))
        for rows, path, partition_by in ((events.dead_letters(parsed), dead_letters, ("dead_letter_date",)),
                                         (late_events.count(valid, views, watermarks(), batch_id), late, ())):
            if not rows.isEmpty():  # most batches have neither: skip a whole Delta commit
                tables.append_once(rows, path, app_id, batch_id, partition_by)
        parsed.unpersist()

    return (_kafka(spark, settings, starting_offsets).writeStream.queryName(LANDING).foreachBatch(land)
            .option("checkpointLocation", str(settings.checkpoints / LANDING))
            .trigger(processingTime=f"{settings.trigger_seconds} seconds").start())


def view_checkpoint(settings: Settings, name: str) -> Path:
    return settings.checkpoints / "views" / name


def start_view(spark: SparkSession, settings: Settings, view: View) -> StreamingQuery:
    """Keep speed/<view> up to date from the raw_events stream (update mode, upsert per window)."""
    path = settings.table(f"speed/{view.name}")
    rows = compile.speed(view, spark.readStream.format("delta").load(settings.table("raw_events")),
                         view.watermark or settings.watermark)
    tables.ensure(spark, path, rows.schema)

    def upsert(batch: DataFrame, batch_id: int) -> None:
        tables.upsert(batch, path, ("window_start", *view.keys))

    return (rows.writeStream.queryName(view.name).outputMode("update").foreachBatch(upsert)
            .option("checkpointLocation", str(view_checkpoint(settings, view.name)))
            .trigger(processingTime=f"{settings.trigger_seconds} seconds").start())
