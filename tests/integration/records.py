"""Generator records landed as the speed layer lands them, for tests that skip the broker."""

from __future__ import annotations

from infra.producer import Record
from views import events


def land(spark, settings, records: list[Record]) -> None:
    """Parse ``records`` as the speed layer does and append the valid ones to raw_events."""
    source = settings.source
    parsed = events.parse(events.kafka_frame(spark, records), source, settings.max_payload_bytes, 10**9)
    (
        events.landed(parsed, source)
        .write.format("delta")
        .mode("append")
        .partitionBy("event_date")
        .save(settings.table("raw_events"))
    )
