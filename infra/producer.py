"""Publish records to Kafka: from a JSONL file, or from the generator (history at once, live paced)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from infra.deployment import Deployment


@dataclass(frozen=True)
class Record:
    """A Kafka record to send at ``send_at``, and what it is (a generator's kind: valid, late, ...)."""

    send_at: datetime
    key: bytes | None
    value: bytes | None  # None: a tombstone (a changelog's deletion)
    kind: str

    def event(self) -> dict:
        """The value as JSON: an event's (or a change's) fields; a tombstone has none (TypeError)."""
        if self.value is None:
            raise TypeError(f"a tombstone has no value: {self}")
        return json.loads(self.value)


#: How long to wait for the broker to answer at first (it runs on this machine: if it does not answer
#: within seconds, it is down).
BOOTSTRAP_TIMEOUT_MS = 10_000
#: How long a record may take to be acknowledged, retries included (kafka-python wants more than its
#: request timeout, 30 s): far longer than a cluster takes to move a killed broker's partitions to the
#: others (its session timeout, 9 s).
DELIVERY_TIMEOUT_MS = 60_000
#: Records sent before waiting for them all to be acknowledged: kafka-python's sender thread can fall
#: behind a sending loop that holds the interpreter, and a record left in its buffer past the delivery
#: timeout expires unsent (a million records at once: 40% of them, on a slow machine).
FLUSH_EVERY = 20_000


def _producer(settings: Deployment):
    """An idempotent producer that waits for every in-sync replica (``acks=all``): with a cluster's
    min.insync.replicas 2, an acknowledged record is on two brokers, and resends add no copies."""
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        max_request_size=1_048_576,
        bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
    )


def publish(
    settings: Deployment, messages: Iterable[tuple[bytes | None, bytes | None, int | None]], topic: str | None = None
) -> list[Exception | None]:
    """Send (key, value, timestamp in ms or None for now) triples to ``topic`` (default: the events
    topic); per record, in order, None if Kafka acknowledged it, else why not. A broker that cannot be
    reached raises ValueError, in one line."""
    from kafka.errors import KafkaError, MessageSizeTooLargeError

    sent = []
    try:
        producer = _producer(settings)
        try:
            for count, (key, value, timestamp_ms) in enumerate(messages, 1):
                if count % FLUSH_EVERY == 0:
                    producer.flush()
                try:
                    sent.append(producer.send(topic or settings.topic, key=key, value=value, timestamp_ms=timestamp_ms))
                except MessageSizeTooLargeError as exc:  # this record's own fault: the others go on
                    sent.append(exc)
            producer.flush()
        finally:
            producer.close()
    except KafkaError as exc:
        raise ValueError(
            f"cannot send to Kafka at {settings.kafka_bootstrap} ({exc}); is it running? (`lambdalake status`)"
        ) from None
    return [s if isinstance(s, Exception) else None if s.succeeded() else s.exception for s in sent]


def acknowledged(settings: Deployment, errors: list[Exception | None], topic: str) -> int:
    """How many records Kafka acknowledged, given :func:`publish`'s answer; if it did not acknowledge them
    all, raises ValueError saying how many it did not, and why (one line)."""
    failed = [error for error in errors if error is not None]
    if failed:
        raise ValueError(
            f"Kafka at {settings.kafka_bootstrap} did not acknowledge {len(failed):,} of {len(errors):,} "
            f"records sent to {topic} (the first: {' '.join(str(failed[0]).split())})"
        )
    return len(errors)


def send(settings: Deployment, records: Iterable[Record], paced_from: datetime | None = None) -> int:
    """Send ``records`` to the events topic; with ``paced_from``, each at its ``send_at`` in real time
    (``paced_from`` maps to now). Returns how many Kafka acknowledged: all (:func:`acknowledged`)."""

    def paced():
        started = time.monotonic()
        for record in records:
            if paced_from is not None:
                due = (record.send_at - paced_from).total_seconds() - (time.monotonic() - started)
                if due > 0:
                    time.sleep(due)
            yield record.key, record.value, None

    return acknowledged(settings, publish(settings, paced()), settings.topic)


def send_changelog(settings: Deployment, records: Iterable[Record], topic: str) -> int:
    """Send a dimension's changelog records to its ``topic``, stamped with their ``send_at`` (a
    deletion takes effect then). Returns how many Kafka acknowledged: all (:func:`acknowledged`)."""
    messages = ((r.key, r.value, int(r.send_at.timestamp() * 1000)) for r in records)
    return acknowledged(settings, publish(settings, messages, topic), topic)


@dataclass(frozen=True)
class FileRecords:
    """A JSONL file's records, and the numbers (from 1) of its blank lines, which are skipped, and of its
    lines that are not JSON objects, which are sent all the same (the speed layer dead-letters them)."""

    records: list[Record]
    blank: list[int]
    not_objects: list[int]

    def report(self) -> str:
        """One line on the skipped and the malformed lines; empty if there are none."""
        parts = []
        if self.blank:
            parts.append(f"skipped {_count(self.blank, 'blank line')} ({_numbers(self.blank)})")
        if self.not_objects:
            verb = "is not a JSON object" if len(self.not_objects) == 1 else "are not JSON objects"
            parts.append(
                f"{_count(self.not_objects, 'line')} {verb} and will be dead-lettered ({_numbers(self.not_objects)})"
            )
        return "; ".join(parts)


def _count(numbers: list[int], noun: str) -> str:
    return f"{len(numbers)} {noun}{'s' * (len(numbers) != 1)}"


def _numbers(numbers: list[int], most: int = 10) -> str:
    more = f", and {len(numbers) - most} more" if len(numbers) > most else ""
    return f"line{'s' * (len(numbers) != 1)} {', '.join(map(str, numbers[:most]))}{more}"


def parse_lines(lines: list[bytes], now: datetime, key: str = "user_id", changelog: bool = False) -> FileRecords:
    """Records from JSONL lines: one per line, sent as is (its Kafka key: its field ``key`` when it has
    one). In a ``changelog``, a line ``{"<key>": K, "deleted": true}`` is sent as the tombstone of K."""
    records, blank, not_objects = [], [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            blank.append(number)
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            event = {}
            not_objects.append(number)
        deleted = changelog and event.get("deleted") is True
        records.append(
            Record(
                now + timedelta(microseconds=number),
                str(event[key]).encode() if event.get(key) else None,
                None if deleted else line,
                "deletion" if deleted else "from_file",
            )
        )
    return FileRecords(records, blank, not_objects)


def read_file(path: Path, now: datetime, key: str = "user_id", changelog: bool = False) -> FileRecords:
    """The records of the JSONL file ``path`` (see :func:`parse_lines`)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file; --from-file expects a JSONL file of events (with --changelog, of changes)"
        )
    return parse_lines(path.read_bytes().splitlines(), now, key, changelog)
