"""A replay's corrections: the JSONL file naming dead letters and their corrected values, and the plan
of what to send for them (pure: no Kafka, no tables)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

LINE_FORMAT = '{"partition": p, "offset": o, "value": <the corrected event, a JSON object or string>}'


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


def parse_requests(lines: Iterable[str], default_topic: str, source: str) -> list[Request]:
    """The corrections of a replay file (one JSON object per non-blank line), each naming its dead
    letter once; ``source`` names the file in errors."""
    requests: list[Request] = []
    seen: dict[Coordinates, int] = {}  # dead letter -> the line that named it
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
            letter, value = found[request.at], request.value
            send.append(Replay(letter, letter.raw if value is None else value, value is not None))
    return Plan(send, already, missing)


def read_requests(path: Path, default_topic: str) -> list[Request]:
    """The corrections in the JSONL file ``path``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; --from-file expects one {LINE_FORMAT} per line")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_requests(text.splitlines(), default_topic, str(path))
