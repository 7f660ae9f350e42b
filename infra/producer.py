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


def publish(settings: Settings, messages: Iterable[tuple[bytes | None, bytes]]) -> list[bool]:
    """Send (key, value) pairs to the events topic; whether Kafka acknowledged each, in order."""
    producer, futures = _producer(settings), []
    try:
        for key, value in messages:
            futures.append(producer.send(settings.events_topic, key=key, value=value))
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
            yield record.key, record.value

    return sum(publish(settings, paced()))


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
