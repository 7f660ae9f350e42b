"""An independent plain-Python computation of every clickstream view, from the records a producer sent
(its event, window and changelog helpers serve the ads domain's oracle, tests/ads_oracle.py, too).

It shares nothing with the Spark code but the event format: it parses the JSON itself, keeps the first
sent copy of each event_id, and sessionizes, joins and buckets by the design's words, one view at a time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from infra.producer import Record

HOUR, MINUTE = timedelta(hours=1), timedelta(minutes=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp).astimezone(UTC)


def events(records: list[Record]) -> list[dict]:
    """The valid events, first sent copy of each event_id, with ``time`` as an aware UTC datetime."""
    seen, result = set(), []
    for record in records:
        if record.kind == "malformed":
            continue
        event = record.event()
        if event["event_id"] in seen:
            continue
        seen.add(event["event_id"])
        event["time"] = _utc(event["event_time"])
        result.append(event)
    return result


def floor(moment: datetime, size: timedelta) -> datetime:
    return moment - (moment - EPOCH) % size


def _changes(changelog: list[Record], field: str) -> dict[str, list[tuple[datetime, int, str]]]:
    """Per key of a dimension's changelog, its changes as (time, position, ``field`` or "unknown" for a
    deletion)."""
    changes = defaultdict(list)
    for position, record in enumerate(changelog):
        assert record.key is not None  # a changelog's records are keyed
        key = record.key.decode()
        if record.value is None:
            changes[key].append((record.send_at, position, "unknown"))
        else:
            change = json.loads(record.value)
            changes[key].append((_utc(change["updated_at"]), position, change[field]))
    return changes


def as_of(changelog: list[Record], key: str, field: str) -> Callable[[dict], str]:
    """An event's dimension ``field`` (by its ``key``) as of its time: the latest change at or before it."""
    changes = _changes(changelog, field)

    def value(event: dict) -> str:
        valid = [c for c in changes.get(event[key], []) if c[0] <= event["time"]]
        return max(valid)[2] if valid else "unknown"

    return value


def latest(changelog: list[Record], key: str, field: str) -> Callable[[dict], str]:
    """An event's dimension ``field`` (by its ``key``) as the changelog ends, whatever the event's time."""
    changes = _changes(changelog, field)
    return lambda event: max(changes[event[key]])[2] if changes.get(event[key]) else "unknown"


def category_as_of(products: list[Record]) -> Callable[[dict], str]:
    """A purchase's product category as of its time."""
    return as_of(products, "product_id", "category")


#: A purchase's product category when no product is known.
NO_CATEGORY = category_as_of([])


def latest_category(products: list[Record]) -> Callable[[dict], str]:
    """A purchase's product category as the products changelog ends."""
    return latest(products, "product_id", "category")


def of_type(valid: list[dict], *types: str) -> list[dict]:
    return [e for e in valid if e["event_type"] in types]


def _page_views(valid: list[dict]) -> dict:
    views: defaultdict[tuple, int] = defaultdict(int)
    users: defaultdict[tuple, set[str]] = defaultdict(set)
    for event in of_type(valid, "page_view"):
        key = (floor(event["time"], MINUTE), event["page"])
        views[key] += 1
        users[key].add(event["user_id"])
    return {key: (views[key], len(users[key])) for key in views}


def _active_users(valid: list[dict]) -> dict:
    users = defaultdict(set)
    for event in valid:
        users[(floor(event["time"], HOUR),)].add(event["user_id"])
    return {key: (len(found),) for key, found in users.items()}


def _revenue(valid: list[dict], category: Callable[[dict], str]) -> dict:
    totals: defaultdict[tuple, list[int | Decimal]] = defaultdict(lambda: [0, 0, Decimal(0)])
    for event in of_type(valid, "purchase"):
        total = totals[(floor(event["time"], HOUR), category(event))]
        total[0] += 1
        total[1] += event["quantity"]
        total[2] += Decimal(str(event["amount"]))
    return {key: tuple(total) for key, total in totals.items()}


def _search_ctr(valid: list[dict]) -> dict:
    clicks = defaultdict(list)
    for click in of_type(valid, "click"):
        clicks[click["session_id"], click["query"]].append(click["time"])
    counts: defaultdict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for search in of_type(valid, "search"):
        count = counts[(floor(search["time"], HOUR), search["query"])]
        count[0] += 1
        count[1] += any(
            timedelta() <= t - search["time"] <= 30 * MINUTE for t in clicks[search["session_id"], search["query"]]
        )
    return {key: (searches, clicked, clicked / searches) for key, (searches, clicked) in counts.items()}


def sessions(valid: list[dict]) -> list[tuple[datetime, datetime, int]]:
    """Every user's sessions, (first, last, events) each: their events less than 30 minutes apart."""
    times = defaultdict(list)
    for event in valid:
        times[event["user_id"]].append(event["time"])
    found = []
    for moments in times.values():
        moments.sort()
        first = last = moments[0]
        count = 0
        for moment in [*moments, None]:
            if moment is None or moment - last >= 30 * MINUTE:
                found.append((first, last, count))
                first, count = moment, 0
            if moment is not None:
                last, count = moment, count + 1
    return found


def _sessions(valid: list[dict]) -> dict:
    by_hour = defaultdict(list)
    for first, last, count in sessions(valid):
        by_hour[(floor(first, HOUR),)].append(((last - first).total_seconds(), count))
    return {
        key: (len(found), sum(d for d, _ in found) / len(found), sum(n for _, n in found) / len(found))
        for key, found in by_hour.items()
    }


def _trending(valid: list[dict]) -> dict:
    totals: defaultdict[tuple, list[int | Decimal]] = defaultdict(lambda: [0, Decimal(0)])
    for event in of_type(valid, "purchase"):
        for back in range(10):
            total = totals[(floor(event["time"], MINUTE) - back * MINUTE, event["product_id"])]
            total[0] += 1
            total[1] += Decimal(str(event["amount"]))
    return {key: tuple(total) for key, total in totals.items()}


def _purchases(valid: list[dict]) -> dict:
    quantities: defaultdict[tuple, list[int]] = defaultdict(list)
    users: defaultdict[tuple, set[str]] = defaultdict(set)
    for event in of_type(valid, "purchase"):
        key = (floor(event["time"], HOUR), event["product_id"])
        quantities[key].append(event["quantity"])
        users[key].add(event["user_id"])
    return {key: (len(q), len(users[key]), min(q), max(q)) for key, q in quantities.items()}


def views(records: list[Record], category: Callable[[dict], str] = NO_CATEGORY) -> dict[str, dict[tuple, tuple]]:
    """Every view (and the test suite's own), by name: {(window_start, *keys): measures}, with
    ``category`` giving a purchase's product category (default: none is known)."""
    valid = events(records)
    return {
        "page_views_per_minute": _page_views(valid),
        "active_users_hourly": _active_users(valid),
        "revenue_by_category_hourly": _revenue(valid, category),
        "search_ctr_hourly": _search_ctr(valid),
        "sessions_hourly": _sessions(valid),
        "trending_products": _trending(valid),
        "purchases_per_product_hourly": _purchases(valid),
    }
