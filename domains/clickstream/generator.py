"""A seeded generator of the web shop's clickstream, with the mess real producers make (domains.sample).

Users browse in sessions (page views, searches, clicks on results, carts, purchases); the products
changelog creates, changes and deletes the products they buy.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timedelta

from domains.sample import MIX, Mix, changelog, sample, stamp
from infra.producer import Record

PAGES = ("/", "/search", "/cart", "/checkout", "/deals", "/help", *(f"/product/p{i}" for i in range(12)))
QUERIES = ("shoes", "red shoes", "jacket", "socks", "hat", "gloves", "scarf", "boots")
PRODUCTS = tuple(f"p{i}" for i in range(40))
#: Products the changelog never creates: their purchases fall in category "unknown".
UNLISTED = 4
CATEGORIES = ("shoes", "outerwear", "accessories", "basics", "sale")
#: Seconds between a session's events (drawn uniformly), and the longest a session lasts: four page
#: views, a search, a click, a cart and a purchase.
GAP = (5, 240)
LONGEST = timedelta(seconds=7 * GAP[1])


def _session(user: str, start: datetime, rng: random.Random) -> list[dict]:
    """One browsing session: a list of events with increasing times."""
    session, moment, events = uuid.UUID(int=rng.getrandbits(128)).hex[:16], start, []

    def emit(event_type: str, **fields: object) -> None:
        nonlocal moment
        events.append(
            {
                "event_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                "event_type": event_type,
                "user_id": user,
                "session_id": session,
                "_time": moment,
                **fields,
            }
        )
        moment += timedelta(seconds=rng.randint(*GAP))

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
                    emit(
                        "purchase", product_id=product, quantity=rng.randint(1, 3), amount=round(rng.uniform(5, 200), 2)
                    )
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


def generate(
    start: datetime,
    end: datetime,
    count: int,
    seed: int = 7,
    mix: Mix = MIX,
    shaped: bool = True,
    users: int | None = None,
) -> list[Record]:
    """About ``count`` records of browsing sessions sent over ``[start, end)`` (domains.sample), by
    ``users`` users (default: one per 20 records)."""
    names = [f"u{i}" for i in range(users or max(10, count // 20))]
    return sample(
        start,
        end,
        count,
        seed,
        mix,
        shaped,
        lambda moment, rng: _session(rng.choice(names), moment, rng),
        _malformed,
        LONGEST,
    )


def _product(product: str, when: datetime, rng: random.Random) -> Record:
    change = {
        "product_id": product,
        "category": rng.choice(CATEGORIES),
        "price": round(rng.uniform(5, 200), 2),
        "updated_at": stamp(when, rng),
    }
    return Record(when, product.encode(), json.dumps(change).encode(), "product")


def products(start: datetime, end: datetime, changes: int = 40, seed: int = 7) -> list[Record]:
    """The products changelog (domains.sample.changelog): every product but the last ``UNLISTED``
    created at ``start``, then ``changes`` price and category changes and deletions."""
    return changelog(PRODUCTS[:-UNLISTED], _product, start, end, changes, seed)


def changelogs(start: datetime, end: datetime, seed: int = 7) -> dict[str, list[Record]]:
    """Each dimension's changelog over ``[start, end)``, by dimension name."""
    return {"products": products(start, end, seed=seed)}
