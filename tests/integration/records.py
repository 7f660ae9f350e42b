"""Generator records as Spark's Kafka source would read them, for tests that skip the broker."""

from __future__ import annotations

from domains.producer import Record
from views import domain, events


def kafka_rows(records: list[Record], topic: str = "events", partitions: int = 3) -> list[tuple]:
    """Kafka record tuples (events.KAFKA_RECORD): spread over ``partitions`` by position, offsets in order."""
    offsets = [0] * partitions
    rows = []
    for i, record in enumerate(records):
        partition = i % partitions
        rows.append((record.key, record.value, topic, partition, offsets[partition],
                     record.send_at.replace(tzinfo=None), 0))
        offsets[partition] += 1
    return rows


def kafka_frame(spark, records: list[Record], topic: str = "events", partitions: int = 3):
    """A DataFrame of Kafka records (see :func:`kafka_rows`)."""
    return spark.createDataFrame(kafka_rows(records, topic, partitions), events.KAFKA_RECORD)


def land(spark, settings, records: list[Record]) -> None:
    """Parse ``records`` as the speed layer does and append the valid ones to raw_events."""
    source = domain(settings.domain).source
    parsed = events.parse(kafka_frame(spark, records), source, settings.max_payload_bytes, 10**9)
    (events.landed(parsed, source).write.format("delta").mode("append").partitionBy("event_date")
     .save(settings.table("raw_events")))
