"""What the bundled domains' generators share: the mess real producers make.

A generator draws bursts of one user's events (a browsing session, a few ad impressions) at random
times, following the daily traffic pattern. :func:`sample` stamps them and spoils a share: some arrive
late (sent well after newer events), some are resent (same event_id), and some records are malformed
in the ways dead letters must catch. Each record says which of those it is, so tests and ``lambdalake
produce`` can count them.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from infra.producer import Record

KINDS = ("valid", "late", "duplicate", "malformed")
OFFSETS = (0, 0, 0, 60, -300, 330)  # minutes east of UTC that producers stamp times with


@dataclass(frozen=True)
class Mix:
    """Shares of late, resent and malformed records among those generated."""

    late: float = 0.03
    duplicate: float = 0.02
    malformed: float = 0.01
    late_by: tuple[int, int] = (20, 90)  # minutes a late event's time trails the stream


#: The generators' default mix.
MIX = Mix()


def _daily_weight(moment: datetime) -> float:
    """Traffic shape over the UTC day: quiet at night, peaking in the evening."""
    hour = moment.hour + moment.minute / 60
    return 0.25 + 0.75 * (1 + math.cos((hour - 20) / 24 * 2 * math.pi)) / 2


def stamp(moment: datetime, rng: random.Random) -> str:
    """RFC 3339, mostly in UTC, sometimes with another offset (the same instant)."""
    local = moment.astimezone(timezone(timedelta(minutes=rng.choice(OFFSETS))))
    return local.isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: One user's burst of events from a moment on: dicts with their time as ``_time``, in time order.
Burst = Callable[[datetime, random.Random], list[dict]]
#: A valid event spoiled in a way dead letters must catch, as the record's bytes.
Spoil = Callable[[dict, random.Random], bytes]


def sample(
    start: datetime,
    end: datetime,
    count: int,
    seed: int,
    mix: Mix,
    shaped: bool,
    burst: Burst,
    spoil: Spoil,
    longest: timedelta,
    key: str = "user_id",
) -> list[Record]:
    """About ``count`` records of ``burst``'s events sent over ``[start, end)``, in the order they are
    sent, keyed by their ``key`` field.

    A record's event time is when it is sent, except for late events, whose time lies
    ``mix.late_by`` minutes earlier. ``shaped`` follows the daily traffic pattern; otherwise records
    are sent at a steady rate: bursts begin uniformly from ``longest`` (as long as a burst lasts)
    before ``start``, as if users had been busy before it, and one begun before ``start`` sends only
    its events from ``start`` on (bursts that all begin at ``start`` would send ever more records as
    they pile up: a clickstream's five minutes, 0.6x the mean rate in their first half minute and 1.5x
    in their last).
    """
    rng = random.Random(seed)
    first = start if shaped else start - longest
    span = (end - first).total_seconds()
    records: list[Record] = []
    sent_valid: list[Record] = []
    while len(records) < count:
        moment = first + timedelta(seconds=rng.uniform(0, span))
        if shaped and rng.random() > _daily_weight(moment):
            continue
        for event in burst(moment, rng):
            when = event.pop("_time")
            when = when.replace(microsecond=when.microsecond // 1000 * 1000)  # as precise as the stamp
            if when >= end:
                break
            if when < start:
                continue
            roll = rng.random()
            late = mix.malformed <= roll < mix.malformed + mix.late
            delay = timedelta(minutes=rng.randint(*mix.late_by)) if late else timedelta()
            event["event_time"] = stamp(when - delay, rng)
            if roll < mix.malformed:
                records.append(Record(when, event[key].encode(), spoil(event, rng), "malformed"))
                continue
            record = Record(when, event[key].encode(), json.dumps(event).encode(), "late" if late else "valid")
            records.append(record)
            sent_valid.append(record)
            if rng.random() < mix.duplicate:
                original = rng.choice(sent_valid)
                resent = max(when, original.send_at) + timedelta(seconds=1)
                records.append(Record(resent, original.key, original.value, "duplicate"))
    return sorted(records, key=lambda r: r.send_at)


def changelog(
    keys: Sequence[str],
    change: Callable[[str, datetime, random.Random], Record],
    start: datetime,
    end: datetime,
    changes: int,
    seed: int,
) -> list[Record]:
    """A dimension's changelog, in send order: ``change`` of every key at ``start``, then ``changes``
    more changes and deletions (tombstones; a deleted key may come back) spread over ``[start, end)``."""
    rng = random.Random(seed)
    records = [change(key, start, rng) for key in keys]
    span = (end - start).total_seconds()
    for _ in range(changes):
        when = (start + timedelta(seconds=rng.uniform(0, span))).replace(microsecond=0)
        key = rng.choice(keys)
        deleted = rng.random() < 0.15
        records.append(Record(when, key.encode(), None, "deletion") if deleted else change(key, when, rng))
    return sorted(records, key=lambda r: r.send_at)


def counts(records: list[Record]) -> dict[str, int]:
    """How many records of each kind, and in all."""
    tally = {kind: sum(r.kind == kind for r in records) for kind in KINDS}
    return {**tally, "total": len(records)}
