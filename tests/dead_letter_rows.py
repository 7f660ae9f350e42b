"""dead_letters rows as the speed layer writes them (the schema delta-rs reads from Spark's table), for
tests that skip Spark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.string()),
        ("raw", pa.binary()),
        ("reason", pa.string()),
        pa.field("dead_lettered_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("dead_letter_date", pa.date32(), nullable=False),
    ]
)
T0 = datetime(2026, 11, 20, 9, tzinfo=UTC)
FUTURE = "event_time more than 3600s in the future"


def sample(topic: str) -> list[dict]:
    """Five dead letters of ``topic``, dead-lettered a minute apart in this order."""
    letters = [
        (0, 3, "u1", b'{"event_id": "e1", "event_type": "page_view"', "malformed JSON: not a JSON object"),
        (1, 7, "u2", b'{"event_id": "e2", "amount": 1.999}', "amount '1.999' is not a decimal with at most 2 places"),
        (2, 4, None, b'{"event_id": "e3", "event_time": "2099-01-01T00:00:00Z"}', FUTURE),
        (0, 9, "u3", b'{"event_id": "e4",\n  "event_time": "2099-01-02T00:00:00Z"}', FUTURE),
        (2, 5, "u4", b'{"event_id": "e5", "event_type": "teleport"}', "unknown event_type 'teleport'"),
    ]
    return [
        {
            "topic": topic,
            "partition": p,
            "offset": o,
            "key": key,
            "raw": raw,
            "reason": reason,
            "dead_lettered_at": T0 + timedelta(minutes=i),
        }
        for i, (p, o, key, raw, reason) in enumerate(letters)
    ]


def table(letters: list[dict]) -> pa.Table:
    """``letters`` (dicts of sample's fields) as a dead_letters table."""
    return pa.Table.from_pylist(
        [
            {
                **letter,
                "kafka_timestamp": letter["dead_lettered_at"],
                "dead_letter_date": letter["dead_lettered_at"].date(),
            }
            for letter in letters
        ],
        SCHEMA,
    )


def write(path: str, letters: list[dict]) -> None:
    """Append ``letters`` to the dead_letters Delta table at ``path``, partitioned like the speed layer's."""
    from deltalake import write_deltalake

    write_deltalake(path, table(letters), partition_by=["dead_letter_date"], mode="append")
