"""A seeded generator of the web shop's clickstream, with the mess real producers make.

Users browse in sessions (page views, searches, clicks on results, carts, purchases). A share of
events arrives late (sent well after newer events), some are resent (same event_id), and some records
are malformed in the ways dead letters must catch. Each record says which of those it is, so tests
and ``lambdalake produce`` can count them.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from infra.producer import Record

KINDS = ("valid", "late", "duplicate", "malformed")
PAGES = ("/", "/search", "/cart", "/checkout", "/deals", "/help", *(f"/product/p{i}" for i in range(12)))
QUERIES = ("shoes", "red shoes", "jacket", "socks", "hat", "gloves", "scarf", "boots")
PRODUCTS = tuple(f"p{i}" for i in range(40))
#: Products the changelog never creates: their purchases fall in category "unknown".
UNLISTED = 4
CATEGORIES = ("shoes", "outerwear", "accessories", "basics", "sale")
OFFSETS = (0, 0, 0, 60, -300, 330)  # minutes east of UTC that producers stamp times with


@dataclass(frozen=True)
class Mix:
    """Shares of late, resent and malformed records among those generated."""

    late: float = 0.03
    duplicate: float = 0.02
    malformed: float = 0.01
    late_by: tuple[int, int] = (20, 90)  # minutes a late event's time trails the stream


def _daily_weight(moment: datetime) -> float:
    """Traffic shape over the UTC day: quiet at night, peaking in the evening."""
    hour = moment.hour + moment.minute / 60
    return 0.25 + 0.75 * (1 + math.cos((hour - 20) / 24 * 2 * math.pi)) / 2


def _stamp(moment: datetime, rng: random.Random) -> str:
    """RFC 3339, mostly in UTC, sometimes with another offset (the same instant)."""
    local = moment.astimezone(timezone(timedelta(minutes=rng.choice(OFFSETS))))
    return local.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _session(user: str, start: datetime, rng: random.Random) -> list[dict]:
    """One browsing session: a list of events with increasing times."""
    session, moment, events = uuid.UUID(int=rng.getrandbits(128)).hex[:16], start, []

    def emit(event_type: str, **fields) -> None:
        nonlocal moment
        events.append({"event_id": uuid.UUID(int=rng.getrandbits(128)).hex, "event_type": event_type,
                       "user_id": user, "session_id": session, "_time": moment, **fields})
        moment += timedelta(seconds=rng.randint(5, 240))

    for _ in range(rng.randint(1, 4)):
        emit("page_view", page=rng.choice(PAGES))
    if rng.random() < 0.6:
        query = rng.choice(QUERIES)
        emit("search", query=query)
        if rng.random() < 0.5:
            product = rng.choice(PRODUCTS)
            emit("click", query=query, product_id=product)
            if rng.random() < 0.4:
                emit("add_to_cart", product_id=product)
                if rng.random() < 0.5:
                    emit("purchase", product_id=product, quantity=rng.randint(1, 3),
                         amount=round(rng.uniform(5, 200), 2))
    return events


def _malformed(event: dict, rng: random.Random) -> bytes:
    """Spoil a valid event in one of the ways dead letters must catch."""
    broken = dict(event)
    choice = rng.randrange(6)
    if choice == 0:
        return json.dumps(broken)[:-7].encode()
    if choice == 1:
        broken["event_type"] = "teleport"
    elif choice == 2:
        del broken["user_id"]
    elif choice == 3:
        broken.update(event_type="purchase", product_id="p1", quantity="two", amount=1.5)
    elif choice == 4:
        broken["event_time"] = "yesterday at noon"
    else:
        broken["page"] = "x" * 20_000
    return json.dumps(broken).encode()


def generate(start: datetime, end: datetime, count: int, seed: int = 7, mix: Mix = Mix(),
             shaped: bool = True) -> list[Record]:
    """About ``count`` records sent over ``[start, end)``, in the order they are sent.

    A record's event time is when it is sent, except for late events, whose time lies
    ``mix.late_by`` minutes earlier.

    ``shaped`` follows the daily traffic pattern; otherwise times are uniform.
    """
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(max(10, count // 20))]
    span = (end - start).total_seconds()
    records: list[Record] = []
    sent_valid: list[Record] = []
    while len(records) < count:
        moment = start + timedelta(seconds=rng.uniform(0, span))
        if shaped and rng.random() > _daily_weight(moment):
            continue
        for event in _session(rng.choice(users), moment, rng):
            when = event.pop("_time")
            when = when.replace(microsecond=when.microsecond // 1000 * 1000)  # as precise as the stamp
            if when >= end:
                break
            key = event["user_id"].encode()
            roll = rng.random()
            late = mix.malformed <= roll < mix.malformed + mix.late
            delay = timedelta(minutes=rng.randint(*mix.late_by)) if late else timedelta()
            event["event_time"] = _stamp(when - delay, rng)
            if roll < mix.malformed:
                records.append(Record(when, key, _malformed(event, rng), "malformed"))
                continue
            record = Record(when, key, json.dumps(event).encode(), "late" if late else "valid")
            records.append(record)
            sent_valid.append(record)
            if rng.random() < mix.duplicate:
                original = rng.choice(sent_valid)
                resent = max(when, original.send_at) + timedelta(seconds=1)
                records.append(Record(resent, original.key, original.value, "duplicate"))
    return sorted(records, key=lambda r: r.send_at)


def counts(records: list[Record]) -> dict[str, int]:
    """How many records of each kind, and in all."""
    tally = {kind: sum(r.kind == kind for r in records) for kind in KINDS}
    return {**tally, "total": len(records)}


def _product(product: str, when: datetime, rng: random.Random) -> Record:
    change = {"product_id": product, "category": rng.choice(CATEGORIES), "price": round(rng.uniform(5, 200), 2),
              "updated_at": _stamp(when, rng)}
    return Record(when, product.encode(), json.dumps(change).encode(), "product")


def products(start: datetime, end: datetime, changes: int = 40, seed: int = 7) -> list[Record]:
    """The products changelog, in send order: every product but the last ``UNLISTED`` created at
    ``start``, then ``changes`` price and category changes and deletions (tombstones; a deleted product
    may come back) spread over ``[start, end)``."""
    rng = random.Random(seed)
    listed = PRODUCTS[:-UNLISTED]
    records = [_product(p, start, rng) for p in listed]
    span = (end - start).total_seconds()
    for _ in range(changes):
        when = (start + timedelta(seconds=rng.uniform(0, span))).replace(microsecond=0)
        product = rng.choice(listed)
        deleted = rng.random() < 0.15
        records.append(Record(when, product.encode(), None, "deletion") if deleted else _product(product, when, rng))
    return sorted(records, key=lambda r: r.send_at)
