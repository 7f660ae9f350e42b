"""Dead letters: a summary by reason, and replays that send them back through the pipeline.

The ``dead_letters`` Delta table is read with DuckDB over delta-rs (no JVM). A replay sends corrected
values (``--from-file``) or the unchanged raw payloads of the dead letters whose reason matches
(``--reason``) to the events topic, keyed as before, so the running speed layer lands them like any
record (or dead-letters them again). Each replay is recorded in the Delta table ``dead_letter_replays``
and a dead letter found there is never sent again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, NamedTuple

import duckdb
import pyarrow as pa

from infra.settings import Settings

DEAD_LETTERS, REPLAYS = "dead_letters", "dead_letter_replays"
REPLAYS_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                            ("replayed_at", pa.timestamp("us", tz="UTC")), ("corrected", pa.bool_())])
#: Characters of a payload shown in a listing.
PAYLOAD_WIDTH = 100
LINE_FORMAT = '{"partition": p, "offset": o, "value": <the corrected event, a JSON object or string>}'
_COORDINATES = 'topic, "partition", "offset"'


class Coordinates(NamedTuple):
    """Where a record was in Kafka."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"


@dataclass(frozen=True)
class Request:
    """A dead letter to replay, with its corrected value, or None to resend its raw payload unchanged."""

    at: Coordinates
    value: bytes | None = None


@dataclass(frozen=True)
class DeadLetter:
    at: Coordinates
    key: str | None
    raw: bytes


@dataclass(frozen=True)
class Replay:
    """One record a replay sends: the dead letter it replaces and the value sent in its place."""

    letter: DeadLetter
    value: bytes
    corrected: bool


@dataclass(frozen=True)
class Plan:
    send: list[Replay]
    already_replayed: list[Coordinates]
    not_found: list[Coordinates]


# -- pure parts ------------------------------------------------------------------------------------

def parse_requests(lines: Iterable[str], default_topic: str, source: str) -> list[Request]:
    """The corrections of a replay file (one JSON object per non-blank line), each naming its dead
    letter once; ``source`` names the file in errors."""
    requests, seen = [], {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            request = _request(json.loads(line), default_topic)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}; expected {LINE_FORMAT}") from None
        if request.at in seen:
            raise ValueError(f"{where}: dead letter {request.at} was already named on line {seen[request.at]}")
        seen[request.at] = number
        requests.append(request)
    if not requests:
        raise ValueError(f"{source} has no records; expected one {LINE_FORMAT} per line")
    return requests


def _request(item, default_topic: str) -> Request:
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(item) - {"topic", "partition", "offset", "value"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    for name in ("partition", "offset", "value"):
        if name not in item:
            raise ValueError(f"missing {name}")
    for name in ("partition", "offset"):
        if not isinstance(item[name], int) or isinstance(item[name], bool) or item[name] < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {json.dumps(item[name])}")
    topic = item.get("topic", default_topic)
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"topic must be a non-empty string, got {json.dumps(topic)}")
    value = item["value"]
    if isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    elif not isinstance(value, str):
        raise ValueError(f"value must be a JSON object or string, got {json.dumps(value)}")
    return Request(Coordinates(topic, item["partition"], item["offset"]), value.encode())


def plan(requests: list[Request], found: dict[Coordinates, DeadLetter], replayed: set[Coordinates]) -> Plan:
    """What to send for ``requests``: each found dead letter not replayed before, with its corrected
    value or else its raw payload."""
    send, already, missing = [], [], []
    for request in requests:
        if request.at not in found:
            missing.append(request.at)
        elif request.at in replayed:
            already.append(request.at)
        else:
            letter = found[request.at]
            corrected = request.value is not None
            send.append(Replay(letter, request.value if corrected else letter.raw, corrected))
    return Plan(send, already, missing)


def shorten(raw: bytes, width: int = PAYLOAD_WIDTH) -> str:
    """A payload as one line of at most ``width`` characters."""
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _listed(coordinates: list[Coordinates], most: int = 5) -> str:
    if not coordinates:
        return ""
    more = f", and {len(coordinates) - most} more" if len(coordinates) > most else ""
    return f" ({', '.join(map(str, coordinates[:most]))}{more})"


def render_listing(listing: dict) -> str:
    """The summary by reason and the latest dead letters, as text tables."""
    from tabulate import tabulate

    if not listing["by_reason"]:
        return "no dead letters" + (f" whose reason contains {listing['reason']!r}" if listing["reason"] else "")

    def table(rows: list[dict]) -> str:
        rows = [{k: f"{v:%Y-%m-%d %H:%M:%S}" if isinstance(v, datetime) else v for k, v in row.items()}
                for row in rows]
        return tabulate(rows, headers="keys", tablefmt="simple", disable_numparse=True)

    total = sum(r["count"] for r in listing["by_reason"])
    return "\n".join([f"{total} dead letter{'s' * (total != 1)} by reason (times in UTC):",
                      table(listing["by_reason"]), "", f"latest {len(listing['latest'])}:", table(listing["latest"])])


def render_replay(result: dict) -> str:
    """One line: how many were sent, skipped as already replayed, and not found."""
    return (f"sent {len(result['sent'])} to {result['topic']}; skipped {len(result['already_replayed'])} "
            f"already replayed{_listed(result['already_replayed'])}; "
            f"{len(result['not_found'])} not found{_listed(result['not_found'])}")


# -- queries (a DuckDB connection with dead_letters and dead_letter_replays) ----------------------

def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict) -> list[dict]:
    result = con.execute(sql, params)
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, row)) for row in result.fetchall()]


def _matching(reason: str | None) -> tuple[str, dict]:
    """A WHERE clause keeping the dead letters ``d`` whose reason contains ``reason`` (any case)."""
    return ("WHERE contains(lower(d.reason), lower($reason))", {"reason": reason}) if reason else ("", {})


def summary(con: duckdb.DuckDBPyConnection, reason: str | None = None) -> list[dict]:
    """Per reason: how many dead letters, how many of them were replayed, the first and last."""
    where, params = _matching(reason)
    return _rows(con, f"""
        SELECT d.reason, count(*) AS count, count(r."offset") AS replayed,
               min(d.dead_lettered_at) AS first, max(d.dead_lettered_at) AS last
        FROM dead_letters d LEFT JOIN (SELECT DISTINCT {_COORDINATES} FROM dead_letter_replays) r
             USING ({_COORDINATES})
        {where} GROUP BY d.reason ORDER BY count DESC, d.reason""", params)


def latest(con: duckdb.DuckDBPyConnection, limit: int, reason: str | None = None) -> list[dict]:
    """The ``limit`` newest dead letters, their payload shortened to one line."""
    where, params = _matching(reason)
    rows = _rows(con, f"""
        SELECT {_COORDINATES}, d.dead_lettered_at, d.key, d.reason, d.raw AS payload FROM dead_letters d
        {where} ORDER BY d.dead_lettered_at DESC, {_COORDINATES} DESC LIMIT $limit""", {**params, "limit": limit})
    return [{**row, "payload": shorten(row["payload"])} for row in rows]


def dead_letters(con: duckdb.DuckDBPyConnection, reason: str | None = None,
                 at: list[Coordinates] | None = None) -> dict[Coordinates, DeadLetter]:
    """The dead letters whose reason contains ``reason``, or those at the coordinates ``at``."""
    if at is None:
        where, params = _matching(reason)
    else:
        schema = pa.schema(REPLAYS_SCHEMA.field(name) for name in Coordinates._fields)
        con.register("wanted", pa.Table.from_pylist([c._asdict() for c in at], schema))
        where, params = f"SEMI JOIN wanted USING ({_COORDINATES})", {}
    rows = con.execute(f"SELECT {_COORDINATES}, d.key, d.raw FROM dead_letters d {where} "
                       f"ORDER BY {_COORDINATES}", params).fetchall()
    return {Coordinates(*row[:3]): DeadLetter(Coordinates(*row[:3]), row[3], row[4]) for row in rows}


def replayed(con: duckdb.DuckDBPyConnection) -> set[Coordinates]:
    return {Coordinates(*row) for row in con.execute(f"SELECT {_COORDINATES} FROM dead_letter_replays").fetchall()}


# -- I/O -------------------------------------------------------------------------------------------

def _connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    """DuckDB over the Delta tables; dead_letter_replays is empty before the first replay."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in (DEAD_LETTERS, REPLAYS):
        try:
            con.register(name, DeltaTable(settings.table(name)).to_pyarrow_dataset())
        except TableNotFoundError:
            if name == DEAD_LETTERS:
                con.close()
                raise ValueError(f"no dead_letters table at {settings.table(name)} yet: the speed layer "
                                 f"creates it when it starts (`lambdalake up`)") from None
            con.register(name, REPLAYS_SCHEMA.empty_table())
    return con


def read_requests(path: Path, default_topic: str) -> list[Request]:
    """The corrections in the JSONL file ``path``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; --from-file expects one {LINE_FORMAT} per line")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_requests(text.splitlines(), default_topic, str(path))


def listing(settings: Settings, limit: int, reason: str | None = None) -> dict:
    """The summary by reason and the ``limit`` latest dead letters (of those whose reason matches)."""
    con = _connect(settings)
    try:
        return {"reason": reason, "by_reason": summary(con, reason), "latest": latest(con, limit, reason)}
    finally:
        con.close()


def _send(settings: Settings, replays: list[Replay]) -> list[bool]:
    from kafka.errors import KafkaError

    from infra import producer

    try:
        return producer.publish(settings, ((None if r.letter.key is None else r.letter.key.encode(), r.value, None)
                                           for r in replays))
    except KafkaError as exc:
        raise ValueError(f"cannot send to Kafka at {settings.kafka_bootstrap} ({exc!r}); "
                         f"is it running? (`lambdalake status`)") from None


def _record(settings: Settings, replays: list[Replay]) -> None:
    from deltalake import write_deltalake

    now = datetime.now(timezone.utc)
    rows = [{**r.letter.at._asdict(), "replayed_at": now, "corrected": r.corrected} for r in replays]
    write_deltalake(settings.table(REPLAYS), pa.Table.from_pylist(rows, REPLAYS_SCHEMA), mode="append")


def replay(settings: Settings, from_file: Path | None = None, reason: str | None = None) -> dict:
    """Send the corrections in ``from_file``, or the raw payloads of the dead letters whose reason
    contains ``reason``, to the events topic, skipping dead letters already replayed; record what
    Kafka acknowledged in dead_letter_replays."""
    if (from_file is None) == (reason is None):
        raise ValueError("deadletters replay needs either --from-file F or --reason TEXT")
    requests = None if from_file is None else read_requests(from_file, settings.events_topic)
    con = _connect(settings)
    try:
        found = dead_letters(con, reason, None if requests is None else [r.at for r in requests])
        done = replayed(con)
    finally:
        con.close()
    if not found:
        raise ValueError(f"no dead letter's reason contains {reason!r} (see `lambdalake deadletters`)"
                         if requests is None else
                         f"none of the {len(requests)} dead letters named in {from_file} is in dead_letters "
                         f"(a line without \"topic\" means {settings.events_topic!r})")
    chosen = plan([Request(at) for at in found] if requests is None else requests, found, done)
    acknowledged = _send(settings, chosen.send) if chosen.send else []
    sent = [r for r, ok in zip(chosen.send, acknowledged) if ok]
    if sent:
        _record(settings, sent)
    if len(sent) < len(chosen.send):
        raise ValueError(f"Kafka acknowledged {len(sent)} of {len(chosen.send)} records (those are recorded as "
                         f"replayed); rerun to send the rest")
    return {"topic": settings.events_topic, "sent": [r.letter.at for r in sent],
            "already_replayed": chosen.already_replayed, "not_found": chosen.not_found}


def command(settings: Settings, action: str | None, *, reason: str | None, limit: int, from_file: Path | None,
            as_json: bool) -> str:
    """The output of ``lambdalake deadletters [replay]``."""
    if action == "replay":
        result = replay(settings, from_file, reason)
        if as_json:
            return json.dumps({k: v if k == "topic" else [c._asdict() for c in v] for k, v in result.items()},
                              indent=1)
        return render_replay(result)
    if from_file is not None:
        raise ValueError("--from-file goes with `deadletters replay`")
    result = listing(settings, limit, reason)
    return json.dumps(result, indent=1, default=datetime.isoformat) if as_json else render_listing(result)
