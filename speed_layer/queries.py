"""The speed layer's streaming queries: the domain's events -> raw_events, dead_letters, late_events and
every speed view in one pass (speed_layer.fold); each dimension's changelog -> its changes and the
dimension."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from infra import delta
from infra.deployment import Deployment
from speed_layer import resume
from speed_layer.fold import Fold
from views import changelog, events, tables
from views.model import View
from views.source import Changelog

LANDING = tables.RAW_EVENTS.stream_checkpoint
#: The Kafka consumer's settings of every stream. A micro-batch's task reads offsets the broker already
#: has, but the consumer Spark keeps between micro-batches has a fetch of the next records waiting at
#: the broker, which holds it up to ``fetch.max.wait.ms`` (500 ms by default) when no record came
#: meanwhile: a task of a small micro-batch then waited for it (at 1,000 records/s, a bare stream's
#: micro-batch took 0.70 s, 0.20 s with this; the speed layer's 0.58 s, 0.49 s). A fetch with nothing to
#: return costs the broker a reply.
CONSUMER = {"kafka.fetch.max.wait.ms": "10"}


def kafka_source(spark: SparkSession, settings: Deployment, topic: str, starting_offsets: str) -> DataFrame:
    """The records of ``topic`` as they come, from ``starting_offsets``, at most ``max_offsets_per_trigger``
    a micro-batch."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .options(**CONSUMER)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
        .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
        .load()
    )


def _start(rows: DataFrame, name: str, checkpoint: Path, each_batch, seconds: float) -> StreamingQuery:
    """A micro-batch at most every ``seconds``: back to back while a backlog lasts."""
    return (
        rows.writeStream.queryName(name)
        .outputMode("append")
        .foreachBatch(each_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{int(seconds * 1000)} milliseconds")
        .start()
    )


def ensure_tables(spark: SparkSession, settings: Deployment) -> None:
    """Create the landed tables and the dimensions (empty) so that readers never find them missing."""
    empty = spark.createDataFrame([], events.KAFKA_RECORD)
    retention = delta.retention_properties(settings)  # set now: a later change would race the stream's commits
    parsed = events.parse(empty, settings.source, settings.max_payload_bytes, settings.future_horizon_seconds)
    for table, schema in (
        (tables.RAW_EVENTS, events.landed(parsed, settings.source).schema),
        (tables.DEAD_LETTERS, events.dead_letters(parsed).schema),
        (tables.LATE_EVENTS, tables.LATE_EVENTS.schema),
    ):
        delta.ensure(table.path(settings), schema, table.partition_by, {**dict(table.properties), **retention})
    for dimension in settings.dimensions:
        changes = changelog.changes(changelog.parse(empty, dimension), dimension)
        delta.ensure(tables.changes(dimension).path(settings), changes.schema, properties=retention)
        delta.ensure(
            tables.dimension(dimension).path(settings),
            changelog.dimension(changes, dimension).schema,
            properties=retention,
        )


def speed_views(settings: Deployment) -> list[View]:
    """The views the speed layer keeps (setting ``speed_views``; all by default)."""
    views = settings.views
    chosen = views if settings.speed_views is None else settings.speed_views
    unknown = sorted(set(chosen) - set(views))
    if unknown:
        raise ValueError(f"setting speed_views names unknown views {', '.join(unknown)}; known: {', '.join(views)}")
    return [views[name] for name in chosen]


def start_events(spark: SparkSession, settings: Deployment, start: tuple[str, str]) -> tuple[StreamingQuery, Fold]:
    """The speed layer's one query over the events topic: each micro-batch is folded once into
    raw_events, dead_letters, late_events and every speed view (:mod:`speed_layer.fold`).

    ``start`` is the (txnAppId, startingOffsets) pair from :func:`speed_layer.resume.plan`.
    """
    app_id, starting_offsets = start
    fold = Fold(spark, settings, speed_views(settings), app_id)
    query = _start(
        kafka_source(spark, settings, settings.topic, starting_offsets),
        LANDING,
        settings.checkpoints / LANDING,
        fold,
        settings.trigger_seconds,
    )
    return query, fold


def start_dimension(spark: SparkSession, settings: Deployment, dimension: Changelog) -> StreamingQuery:
    """Land a dimension's changelog exactly once in its changes table (bad records in dead_letters) and
    rebuild the dimension from it after each micro-batch with changes."""
    changes_table, dimension_table = tables.changes(dimension), tables.dimension(dimension)
    checkpoint = settings.checkpoints / changes_table.stream_checkpoint
    app_id, _ = resume.app_id(checkpoint)
    appends = delta.BatchAppends(app_id)

    def land(records: DataFrame, batch_id: int) -> None:
        parsed = changelog.parse(records, dimension).persist()
        changes, dead = changelog.changes(parsed, dimension), events.dead_letters(parsed)
        if not dead.isEmpty():
            appends.append(dead, tables.DEAD_LETTERS.path(settings), batch_id, tables.DEAD_LETTERS.partition_by)
        if not changes.isEmpty():
            appends.append(changes, changes_table.path(settings), batch_id)
            landed = changes_table.read(records.sparkSession, settings)
            tables.retried(
                lambda: (
                    changelog.dimension(landed, dimension)
                    .write.format("delta")
                    .mode("overwrite")
                    .save(dimension_table.path(settings))
                )
            )  # again if it lost a race to maintenance's properties
        parsed.unpersist()

    return _start(
        kafka_source(spark, settings, settings.topic_of(dimension.topic), "earliest"),
        dimension.name,
        checkpoint,
        land,
        settings.dimension_trigger_seconds,
    )
