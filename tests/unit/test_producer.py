"""``lambdalake produce --from-file``: blank lines are skipped, lines that are not JSON objects are sent (the
speed layer dead-letters them), and both are reported by line number. Records Kafka did not acknowledge
are an error that says how many."""

from datetime import datetime

import pytest

from infra.deployment import load
from infra.producer import acknowledged, parse_lines, read_file
from views.timebase import UTC

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_blank_and_malformed_lines_are_reported():
    lines = [b'{"user_id": "u1"}', b"", b"   ", b"not json", b"[1]", b'{"event_type": "search"}']
    read = parse_lines(lines, NOW)
    assert [r.value for r in read.records] == [lines[0], *lines[3:]]
    assert [r.key for r in read.records] == [b"u1", None, None, None]
    assert (read.blank, read.not_objects) == ([2, 3], [4, 5])
    assert read.report() == (
        "skipped 2 blank lines (lines 2, 3); 2 lines are not JSON objects and will be dead-lettered (lines 4, 5)"
    )


def test_report_wording():
    assert parse_lines([b'{"a": 1}'], NOW).report() == ""
    assert parse_lines([b"", b"{"], NOW).report() == (
        "skipped 1 blank line (line 1); 1 line is not a JSON object and will be dead-lettered (line 2)"
    )
    assert parse_lines([b""] * 12, NOW).report() == (
        "skipped 12 blank lines (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, and 2 more)"
    )


def test_read_file(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"user_id": 7}\n\n')
    read = read_file(path, NOW)
    assert [r.key for r in read.records] == [b"7"] and read.blank == [2]
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_file(tmp_path / "missing.jsonl", NOW)


def test_a_changelog_file_is_keyed_by_product_and_its_deletions_are_tombstones(tmp_path):
    path = tmp_path / "changes.jsonl"
    change = b'{"product_id": "p1", "category": "shoes", "price": 9.99, "updated_at": "2026-01-01T00:00:00Z"}'
    path.write_bytes(b"\n".join([change, b'{"product_id": "p1", "deleted": true}', b"", b'{"deleted": true}', b"[]"]))
    read = read_file(path, NOW, key="product_id", changelog=True)
    assert [(r.key, r.value, r.kind) for r in read.records] == [
        (b"p1", change, "from_file"),
        (b"p1", None, "deletion"),
        (None, None, "deletion"),
        (None, b"[]", "from_file"),
    ]
    assert (read.blank, read.not_objects) == ([3], [5])
    assert read_file(path, NOW).records[1].value == b'{"product_id": "p1", "deleted": true}'  # events: as is


def test_records_not_acknowledged_are_an_error_that_says_how_many_and_why(tmp_path):
    from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

    settings = load(tmp_path)
    assert acknowledged(settings, [None, None], "events") == 2
    errors = [None, MessageSizeTooLargeError("The message is 2000000 bytes"), KafkaTimeoutError("Batch expired"), None]
    with pytest.raises(
        ValueError,
        match=r"^Kafka at 127.0.0.1:9092 did not acknowledge 2 of 4 records sent to events "
        r"\(the first: \[Error 10\] MessageSizeTooLargeError: The message is 2000000 "
        r"bytes\)$",
    ):
        acknowledged(settings, errors, "events")
