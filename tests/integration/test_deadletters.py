"""`lambdalake deadletters` on a real broker: replay sends exactly the corrected and the re-sent records
to the events topic, once; the summary counts them; bad input is one line and a non-zero exit."""

from __future__ import annotations

import json
import time

import pytest
from deltalake import DeltaTable

from infra import kafka
from tests import dead_letter_rows
from tests.dead_letter_rows import FUTURE
from tests.unit.test_cli import run as cli

pytestmark = pytest.mark.integration

#: Not the deployment's events topic, whose end offsets the end-to-end test counts.
PREFIX = "replayed_"
TOPIC = PREFIX + "events"
LETTERS = dead_letter_rows.sample(TOPIC)


@pytest.fixture
def home(tables):
    """The test's settings with its dead letters written and its own events topic."""
    settings = tables.save(topic_prefix=PREFIX)
    dead_letter_rows.write(settings.table("dead_letters"), LETTERS)
    return settings


def _read(settings, since: dict[int, int], timeout: float = 30) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of every record of the events topic from the offsets ``since`` to its end."""
    from kafka import KafkaConsumer, TopicPartition

    end = kafka.end_offsets(settings, TOPIC)
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(TOPIC, p) for p in since]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, since[tp.partition])
        records, deadline = [], time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp.partition] for tp in partitions) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                records += [(r.key, r.value) for r in batch]
        return records
    finally:
        consumer.close()


def _ok(home, *args) -> str:
    done = cli(home, "deadletters", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_replay_sends_each_dead_letter_once_and_the_summary_counts_it(broker, home, tmp_path):
    kafka.ensure_topics(home)
    before = kafka.end_offsets(home, TOPIC)
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text(
        "\n".join(
            [
                json.dumps({"partition": 0, "offset": 3, "value": {"event_id": "e1", "event_type": "page_view"}}),
                json.dumps(
                    {"topic": TOPIC, "partition": 1, "offset": 7, "value": '{"event_id": "e2", "amount": 2.00}'}
                ),
                json.dumps({"partition": 2, "offset": 99, "value": {}}),
            ]
        )
        + "\n"
    )

    assert _ok(home.home, "replay", "--from-file", str(fixed)) == (
        f"sent 2 to {TOPIC}; skipped 0 already replayed; 1 not found ({TOPIC}/2/99)"
    )
    assert json.loads(_ok(home.home, "replay", "--reason", "FUTURE", "--json")) == {
        "topic": TOPIC,
        "sent": [{"topic": TOPIC, "partition": 0, "offset": 9}, {"topic": TOPIC, "partition": 2, "offset": 4}],
        "already_replayed": [],
        "not_found": [],
    }
    assert sorted(_read(home, before), key=repr) == sorted(
        [
            (b"u1", b'{"event_id":"e1","event_type":"page_view"}'),
            (b"u2", b'{"event_id": "e2", "amount": 2.00}'),
            (b"u3", LETTERS[3]["raw"]),
            (None, LETTERS[2]["raw"]),
        ],
        key=repr,
    )

    after = kafka.end_offsets(home, TOPIC)
    assert _ok(home.home, "replay", "--from-file", str(fixed)) == (
        f"sent 0 to {TOPIC}; skipped 2 already replayed ({TOPIC}/0/3, {TOPIC}/1/7); 1 not found ({TOPIC}/2/99)"
    )
    assert _ok(home.home, "replay", "--reason", "future").startswith(f"sent 0 to {TOPIC}; skipped 2 already")
    assert kafka.end_offsets(home, TOPIC) == after
    replays = DeltaTable(home.table("dead_letter_replays")).to_pyarrow_table().to_pylist()
    assert sorted((r["partition"], r["offset"], r["corrected"]) for r in replays) == [
        (0, 3, True),
        (0, 9, False),
        (1, 7, True),
        (2, 4, False),
    ]

    listing = json.loads(_ok(home.home, "--json", "--limit", "2"))
    assert [(r["reason"], r["count"], r["replayed"]) for r in listing["by_reason"]] == [
        (FUTURE, 2, 2),
        ("amount '1.999' is not a decimal with at most 2 places", 1, 1),
        ("malformed JSON: not a JSON object", 1, 1),
        ("unknown event_type 'teleport'", 1, 0),
    ]
    assert [(r["partition"], r["offset"], r["payload"]) for r in listing["latest"]] == [
        (2, 5, LETTERS[4]["raw"].decode()),
        (0, 9, '{"event_id": "e4", "event_time": "2099-01-02T00:00:00Z"}'),
    ]
    assert listing["by_reason"][0]["last"] == LETTERS[3]["dead_lettered_at"].isoformat()
    text = _ok(home.home, "--reason", "teleport")
    assert text.startswith("1 dead letter by reason")
    assert [line.split()[:3] for line in text.splitlines()][-1] == [TOPIC, "2", "5"]


@pytest.mark.parametrize(
    "args,error",
    [
        (("replay", "--from-file", "missing.jsonl"), "missing.jsonl: no such file"),
        (("replay", "--from-file", "bad.jsonl"), "bad.jsonl line 2: missing value"),
        (("replay", "--reason", "no such reason"), "no dead letter's reason contains 'no such reason'"),
        (("replay", "--from-file", "unknown.jsonl"), "unknown.jsonl is in dead_letters"),
        (("replay",), "needs either --from-file F or --reason TEXT"),
        (("--from-file", "bad.jsonl"), "--from-file goes with `deadletters replay`"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(home, args, error):
    (home.home / "bad.jsonl").write_text('{"partition": 0, "offset": 3, "value": {}}\n{"partition": 1, "offset": 7}\n')
    (home.home / "unknown.jsonl").write_text('{"partition": 5, "offset": 3, "value": {}}\n')
    done = cli(home.home, "deadletters", *[str(home.home / a) if a.endswith(".jsonl") else a for a in args])
    assert done.returncode == 1 and error in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_no_dead_letters_table_yet_is_one_line_and_exit_1(tables):
    done = cli(tables.home, "deadletters")
    assert done.returncode == 1 and "no dead_letters table at" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
