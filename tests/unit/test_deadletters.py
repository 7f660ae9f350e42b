"""Dead letters without Kafka: the replay file, what a replay sends, the summary and its rendering."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import duckdb
import pyarrow as pa
import pytest

from lambdalake import deadletters as dl
from lambdalake.deadletters import corrections, queries
from lambdalake.deadletters.corrections import Coordinates, DeadLetter, Request
from lambdalake.deadletters.replay import Replayed
from tests import dead_letter_rows
from tests.dead_letter_rows import FUTURE, T0
from views import tables

LETTERS = dead_letter_rows.sample("events")


def _at(partition: int, offset: int) -> Coordinates:
    return Coordinates("events", partition, offset)


def _connect(replayed: Sequence[Coordinates] = ()) -> queries.Rows:
    """The queries' ``rows`` over a DuckDB database holding the sample dead letters and ``replayed``."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("dead_letters", dead_letter_rows.table(LETTERS))
    con.register(
        "dead_letter_replays",
        pa.Table.from_pylist(
            [{**at._asdict(), "replayed_at": T0, "corrected": False} for at in replayed],
            tables.DEAD_LETTER_REPLAYS.schema,
        ),
    )

    def rows(sql: str, params: dict) -> list[dict]:
        result = con.execute(sql, params)
        return [dict(zip([d[0] for d in result.description], row, strict=True)) for row in result.fetchall()]

    return rows


def test_replay_file_lines_name_a_dead_letter_and_its_corrected_value():
    lines = [
        '{"partition": 0, "offset": 3, "value": {"event_id": "e1", "amount": 2.5, "page": "/é"}}',
        "",
        '{"topic": "old", "partition": 1, "offset": 7, "value": "{\\"event_id\\": \\"e2\\"}"}',
    ]
    assert corrections.parse_requests(lines, "events", "F") == [
        Request(_at(0, 3), '{"event_id":"e1","amount":2.5,"page":"/é"}'.encode()),
        Request(Coordinates("old", 1, 7), b'{"event_id": "e2"}'),
    ]


@pytest.mark.parametrize(
    "lines,error",
    [
        (['{"partition": 0, "offset": 3'], "F line 1: Expecting"),
        (["[0, 3]"], "F line 1: not a JSON object"),
        (['{"partition": 0, "value": {}}'], "F line 1: missing offset"),
        (
            ['{"partition": "0", "offset": 3, "value": {}}'],
            'F line 1: partition must be a non-negative integer, got "0"',
        ),
        (['{"partition": true, "offset": 3, "value": {}}'], "partition must be a non-negative integer, got true"),
        (['{"partition": 0, "offset": -1, "value": {}}'], "offset must be a non-negative integer, got -1"),
        (['{"partition": 0, "offset": 3, "value": 5}'], "value must be a JSON object or string, got 5"),
        (['{"partition": 0, "offset": 3, "value": {}, "key": "u1"}'], "unknown field(s) key"),
        (['{"topic": "", "partition": 0, "offset": 3, "value": {}}'], "topic must be a non-empty string"),
        (
            ['{"partition": 0, "offset": 3, "value": {}}', "", '{"partition": 0, "offset": 3, "value": "x"}'],
            "F line 3: dead letter events/0/3 was already named on line 1",
        ),
        (["", "  "], "F has no records"),
    ],
)
def test_a_bad_replay_file_is_one_error_naming_the_line(lines, error):
    with pytest.raises(ValueError) as raised:
        corrections.parse_requests(lines, "events", "F")
    assert error in str(raised.value) and "\n" not in str(raised.value)


def test_plan_sends_found_dead_letters_not_replayed_before_with_their_corrections():
    found = {at: DeadLetter(at, "u", b"raw") for at in (_at(0, 1), _at(0, 2), _at(0, 3))}
    plan = corrections.plan(
        [Request(_at(0, 1), b"fixed"), Request(_at(0, 2)), Request(_at(0, 3)), Request(_at(1, 1))],
        found,
        replayed={_at(0, 3)},
    )
    assert [(r.letter.at, r.value, r.corrected) for r in plan.send] == [
        (_at(0, 1), b"fixed", True),
        (_at(0, 2), b"raw", False),
    ]
    assert (plan.already_replayed, plan.not_found) == ([_at(0, 3)], [_at(1, 1)])


def test_summary_counts_each_reason_and_its_replays_between_first_and_last():
    summary = queries.summary(_connect(replayed=[_at(0, 9)]))
    assert [(r["reason"], r["count"], r["replayed"]) for r in summary] == [
        (FUTURE, 2, 1),
        ("amount '1.999' is not a decimal with at most 2 places", 1, 0),
        ("malformed JSON: not a JSON object", 1, 0),
        ("unknown event_type 'teleport'", 1, 0),
    ]
    assert (summary[0]["first"], summary[0]["last"]) == (T0 + timedelta(minutes=2), T0 + timedelta(minutes=3))
    assert [r["reason"] for r in queries.summary(_connect(), reason="ThE FuTuRe")] == [FUTURE]


def test_latest_lists_the_newest_first_with_the_payload_on_one_short_line():
    latest = queries.latest(_connect(), limit=2, reason="future")
    assert [(r["topic"], r["partition"], r["offset"], r["key"]) for r in latest] == [
        ("events", 0, 9, "u3"),
        ("events", 2, 4, None),
    ]
    assert latest[0]["payload"] == '{"event_id": "e4", "event_time": "2099-01-02T00:00:00Z"}'
    assert queries.shorten(b"x" * 150, width=10) == "x" * 9 + "…" and queries.shorten(b"\xff a\n\tb") == "\ufffd a b"


def test_dead_letters_are_found_by_reason_or_by_coordinates():
    rows = _connect()
    assert list(queries.dead_letters(rows, reason="future")) == [_at(0, 9), _at(2, 4)]
    found = queries.dead_letters(rows, at=[_at(1, 7), _at(1, 8)])
    assert found == {_at(1, 7): DeadLetter(_at(1, 7), "u2", LETTERS[1]["raw"])}


def test_renderings():
    listing = dl.Listing(None, queries.summary(_connect()), queries.latest(_connect(), limit=1))
    text = dl.render_listing(listing)
    assert text.startswith("5 dead letters by reason") and "2026-11-20 09:02:00" in text and "latest 1:" in text
    assert dl.render_listing(dl.Listing("x", [], [])) == "no dead letters whose reason contains 'x'"
    result = Replayed("events", [_at(0, 1)], [_at(0, i) for i in range(7)], [])
    assert dl.render_replay(result) == (
        "sent 1 to events; skipped 7 already replayed (events/0/0, events/0/1, "
        "events/0/2, events/0/3, events/0/4, and 2 more); 0 not found"
    )
