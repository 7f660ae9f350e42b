"""Publish records to Kafka: from a JSONL file, or from the generator (history at once, live paced)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterable

from infra.generator import Record
from infra.settings import Settings


def _producer(settings: Settings):
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", linger_ms=20,
                         retries=10, max_request_size=1_048_576)


def publish(settings: Settings, messages: Iterable[tuple[bytes | None, bytes | None, int | None]],
            topic: str | None = None) -> list[bool]:
    """Send (key, value, timestamp in ms or None for now) triples to ``topic`` (default: the events
    topic); whether Kafka acknowledged each, in order."""
    producer, futures = _producer(settings), []
    try:
        for key, value, timestamp_ms in messages:
            futures.append(producer.send(topic or settings.events_topic, key=key, value=value,
                                         timestamp_ms=timestamp_ms))
        producer.flush()
    finally:
        producer.close()
    return [f.succeeded() for f in futures]


def send(settings: Settings, records: Iterable[Record], paced_from: datetime | None = None) -> int:
    """Send ``records`` to the events topic; with ``paced_from``, each at its ``send_at`` in real time
    (``paced_from`` maps to now). Returns how many were acknowledged."""
    def paced():
        started = time.monotonic()
        for record in records:
            if paced_from is not None:
                due = (record.send_at - paced_from).total_seconds() - (time.monotonic() - started)
                if due > 0:
                    time.sleep(due)
            yield record.key, record.value, None

    return sum(publish(settings, paced()))


def send_products(settings: Settings, records: Iterable[Record]) -> int:
    """Send product changelog records to the products topic, stamped with their ``send_at`` (a
    deletion takes effect then). Returns how many were acknowledged."""
    messages = ((r.key, r.value, int(r.send_at.timestamp() * 1000)) for r in records)
    return sum(publish(settings, messages, settings.products_topic))


def read_file(path: Path, now: datetime) -> list[Record]:
    """Records from a JSONL file: one event per line, sent as is (key: its user_id when it has one)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; --from-file expects a JSONL file of events")
    records = []
    for number, line in enumerate(path.read_bytes().splitlines()):
        if not line.strip():
            continue
        try:
            user = json.loads(line).get("user_id")
        except (ValueError, AttributeError):
            user = None
        records.append(Record(now + timedelta(microseconds=number), str(user).encode() if user else None,
                              line, "from_file"))
    return records
