"""Generator records as Spark's Kafka source would read them, for tests that skip the broker."""

from __future__ import annotations

from infra.generator import Record
from views import events


def kafka_frame(spark, records: list[Record], partitions: int = 3):
    """A DataFrame of Kafka records: ``records`` spread over ``partitions`` by position, offsets in order."""
    offsets = [0] * partitions
    rows = []
    for i, record in enumerate(records):
        partition = i % partitions
        rows.append((record.key, record.value, "events", partition, offsets[partition],
                     record.send_at.replace(tzinfo=None), 0))
        offsets[partition] += 1
    return spark.createDataFrame(rows, events.KAFKA_RECORD)
