"""The speed layer's streaming queries: Kafka -> raw_events + dead_letters, and raw_events -> speed views."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from infra.settings import Settings
from infra import delta as tables
from views import compile, events
from views.model import View

LANDING = "landing"


def _kafka(spark: SparkSession, settings: Settings) -> DataFrame:
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
            .option("subscribe", settings.events_topic)
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "true")
            .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
            .load())


def _parse(records: DataFrame, settings: Settings) -> DataFrame:
    return events.parse(records, settings.max_payload_bytes, settings.future_horizon_seconds)


def ensure_tables(spark: SparkSession, settings: Settings) -> None:
    """Create raw_events and dead_letters (empty) so that readers never find them missing."""
    empty = _parse(spark.createDataFrame([], events.KAFKA_RECORD), settings)
    tables.ensure(spark, settings.table("raw_events"), events.landed(empty).schema, ("event_date",))
    tables.ensure(spark, settings.table("dead_letters"), events.dead_letters(empty).schema,
                  ("dead_letter_date",))


def start_landing(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Land every Kafka record exactly once: valid ones in raw_events, the rest in dead_letters."""
    raw_events, dead_letters = settings.table("raw_events"), settings.table("dead_letters")

    def land(records: DataFrame, batch_id: int) -> None:
        parsed = _parse(records, settings).persist()
        tables.append_once(events.landed(parsed), raw_events, LANDING, batch_id, ("event_date",))
        tables.append_once(events.dead_letters(parsed), dead_letters, LANDING, batch_id, ("dead_letter_date",))
        parsed.unpersist()

    return (_kafka(spark, settings).writeStream.queryName(LANDING).foreachBatch(land)
            .option("checkpointLocation", str(settings.checkpoints / LANDING))
            .trigger(processingTime=f"{settings.trigger_seconds} seconds").start())


def start_view(spark: SparkSession, settings: Settings, view: View) -> StreamingQuery:
    """Keep speed/<view> up to date from the raw_events stream (update mode, upsert per window)."""
    path = settings.table(f"speed/{view.name}")
    rows = compile.speed(view, spark.readStream.format("delta").load(settings.table("raw_events")),
                         settings.watermark)
    tables.ensure(spark, path, rows.schema)

    def upsert(batch: DataFrame, batch_id: int) -> None:
        tables.upsert(batch, path, ("window_start", *view.keys))

    return (rows.writeStream.queryName(view.name).outputMode("update").foreachBatch(upsert)
            .option("checkpointLocation", str(settings.checkpoints / "views" / view.name))
            .trigger(processingTime=f"{settings.trigger_seconds} seconds").start())
