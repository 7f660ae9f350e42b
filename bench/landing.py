"""Generated records into a deployment of the bench's own without Kafka: landed in raw_events as the
speed layer lands them, or folded by the speed layer itself, one micro-batch."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from infra.deployment import Deployment
from infra.producer import Record
from speed_layer.fold import Fold
from speed_layer.queries import speed_views
from views import events, tables


def kafka_records(spark: SparkSession, records: list[Record], path: Path, topic: str = "events") -> DataFrame:
    """``records`` as Spark's Kafka source reads them (one partition), through a Parquet file."""
    schema = pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", "UTC")),
            ("timestampType", pa.int32()),
        ]
    )
    pq.write_table(
        pa.table(
            {
                "key": [r.key for r in records],
                "value": [r.value for r in records],
                "topic": [topic] * len(records),
                "partition": [0] * len(records),
                "offset": range(len(records)),
                "timestamp": [r.send_at for r in records],
                "timestampType": [0] * len(records),
            },
            schema=schema,
        ),
        path,
    )
    return spark.read.schema(events.KAFKA_RECORD).parquet(str(path))


def land(spark: SparkSession, settings: Deployment, records: list[Record], path: Path) -> None:
    """Append the valid events of ``records`` to raw_events (``events.parse``, ``events.landed``)."""
    source = settings.source
    parsed = events.parse(
        kafka_records(spark, records, path), source, settings.max_payload_bytes, settings.future_horizon_seconds
    )
    events.landed(parsed, source).write.format("delta").mode("append").partitionBy(
        *tables.RAW_EVENTS.partition_by
    ).save(tables.RAW_EVENTS.path(settings))


def fold(spark: SparkSession, settings: Deployment, records: list[Record], path: Path, app_id: str) -> None:
    """``records`` as one micro-batch of the speed layer's fold (``speed_layer.fold``) under ``app_id``:
    raw_events, dead_letters, late_events and every speed view's partials."""
    Fold(spark, settings, speed_views(settings), app_id)(kafka_records(spark, records, path), 0)
