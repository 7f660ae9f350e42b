"""The speed layer's streaming queries: Kafka -> raw_events + dead_letters, Kafka products -> the
products dimension, and raw_events -> speed views."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from infra import delta as tables
from infra.settings import Settings
from speed_layer import late_events, resume
from views import all_views, compile, events, products
from views.model import View

LANDING = "landing"
PRODUCTS = "products"


def _kafka(spark: SparkSession, settings: Settings, topic: str, starting_offsets: str) -> DataFrame:
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets)
            .option("failOnDataLoss", "true")
            .option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
            .load())


def _parse(records: DataFrame, settings: Settings) -> DataFrame:
    return events.parse(records, settings.max_payload_bytes, settings.future_horizon_seconds)


def _start(rows: DataFrame, settings: Settings, name: str, checkpoint: Path, each_batch) -> StreamingQuery:
    return (rows.writeStream.queryName(name).outputMode("append").foreachBatch(each_batch)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{settings.trigger_seconds} seconds").start())


def ensure_tables(spark: SparkSession, settings: Settings) -> None:
    """Create the landed tables and the products dimension (empty) so that readers never find them missing."""
    empty = spark.createDataFrame([], events.KAFKA_RECORD)
    parsed = _parse(empty, settings)
    tables.ensure(spark, settings.table("raw_events"), events.landed(parsed).schema, ("event_date",))
    tables.ensure(spark, settings.table("dead_letters"), events.dead_letters(parsed).schema,
                  ("dead_letter_date",))
    tables.ensure(spark, settings.table("late_events"), late_events.SCHEMA)
    changes = products.changes(products.parse(empty))
    tables.ensure(spark, settings.table("product_changes"), changes.schema)
    tables.ensure(spark, settings.table("products"), products.dimension(changes).schema)


def speed_views(settings: Settings) -> list[View]:
    """The views the speed layer keeps (setting ``speed_views``; all by default)."""
    views = all_views(settings.view_modules)
    chosen = views if settings.speed_views is None else settings.speed_views
    unknown = sorted(set(chosen) - set(views))
    if unknown:
        raise ValueError(f"setting speed_views names unknown views {', '.join(unknown)}; known: {', '.join(views)}")
    return [views[name] for name in chosen]


def start_landing(spark: SparkSession, settings: Settings, start: tuple[str, str],
                  watermarks: Callable[[], dict]) -> StreamingQuery:
    """Land every Kafka record exactly once: valid ones in raw_events, the rest in dead_letters.

    ``start`` is the (txnAppId, startingOffsets) pair from :func:`speed_layer.resume.plan`.
    ``watermarks()`` gives each view's current speed watermark; events behind it are counted, per view
    and day, in late_events: the speed views will drop them, the batch layer recomputes their days.
    """
    raw_events, dead_letters, late = (settings.table(t) for t in ("raw_events", "dead_letters", "late_events"))
    views = speed_views(settings)
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

    return _start(_kafka(spark, settings, settings.events_topic, starting_offsets), settings, LANDING,
                  settings.checkpoints / LANDING, land)


def start_products(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Land the products changelog exactly once in product_changes (bad records in dead_letters) and
    rebuild the products dimension from it after each micro-batch with changes."""
    checkpoint = settings.checkpoints / PRODUCTS
    app_id, _ = resume.app_id(checkpoint)
    changelog, dimension = settings.table("product_changes"), settings.table("products")

    def land(records: DataFrame, batch_id: int) -> None:
        parsed = products.parse(records).persist()
        changes, dead = products.changes(parsed), events.dead_letters(parsed)
        if not dead.isEmpty():
            tables.append_once(dead, settings.table("dead_letters"), app_id, batch_id, ("dead_letter_date",))
        if not changes.isEmpty():
            tables.append_once(changes, changelog, app_id, batch_id)
            current = products.dimension(records.sparkSession.read.format("delta").load(changelog))
            current.write.format("delta").mode("overwrite").save(dimension)
        parsed.unpersist()

    return _start(_kafka(spark, settings, settings.products_topic, "earliest"), settings, PRODUCTS, checkpoint, land)


def view_checkpoint(settings: Settings, name: str) -> Path:
    return settings.checkpoints / "views" / name


def start_view(spark: SparkSession, settings: Settings, view: View) -> StreamingQuery:
    """Keep speed/<view> up to date from the raw_events stream: the view's stateful operators run in
    Structured Streaming; each micro-batch's partial aggregates are merged into the table exactly once.

    A new checkpoint starts from the beginning of raw_events, so it starts an empty table too.
    """
    path, checkpoint = settings.table(f"speed/{view.name}"), view_checkpoint(settings, view.name)
    app_id, fresh = resume.app_id(checkpoint)
    rows = compile.prepare(view, spark.readStream.format("delta").load(settings.table("raw_events")),
                           view.watermark or settings.watermark)

    def partial(batch: DataFrame) -> DataFrame:
        current = {name: batch.sparkSession.read.format("delta").load(settings.table(name))
                   for name in compile.dimension_tables(view)}
        return compile.aggregate(view, compile.enrich(view, batch, current, as_of=False), exact=False)

    schema = partial(spark.createDataFrame([], rows.schema)).schema
    if fresh and DeltaTable.isDeltaTable(spark, path):
        (spark.createDataFrame([], schema).write.format("delta").mode("overwrite")
         .option("overwriteSchema", "true").save(path))
    tables.ensure(spark, path, schema)
    keys, updates = ("window_start", *view.keys), compile.merge_updates(view)

    def merge(batch: DataFrame, batch_id: int) -> None:
        partials = partial(batch).persist()  # evaluated once: the stateful operators run once per micro-batch
        if not partials.isEmpty():  # e.g. a micro-batch that only moved the watermark: skip a Delta commit
            tables.merge_once(partials, path, keys, updates, app_id, batch_id)
        partials.unpersist()

    return _start(rows, settings, view.name, checkpoint, merge)
