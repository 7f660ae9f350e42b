"""The oracle on tiny hand-computed event sets: the boundaries where the design's words are easy to misread."""

import json
from datetime import datetime, timedelta
from decimal import Decimal

from infra.producer import Record
from tests import oracle

DAY = "2026-11-20T"


def at(clock: str) -> datetime:
    """A window start on the test day, e.g. ``at("12:34")``."""
    return datetime.fromisoformat(f"{DAY}{clock}:00+00:00")


def event(event_id: str, clock: str, event_type: str, user: str = "u1", session: str = "s1", **fields) -> Record:
    """An event sent when it happens; ``clock`` is the time of day with its offset, e.g. "12:00:00Z"."""
    body = {
        "event_id": event_id,
        "event_time": DAY + clock,
        "event_type": event_type,
        "user_id": user,
        "session_id": session,
        **fields,
    }
    return Record(datetime.fromisoformat(DAY + clock), user.encode(), json.dumps(body).encode(), "valid")


def product(product_id: str, clock: str, category: str | None) -> Record:
    """A changelog record; ``category=None`` is a deletion, which takes effect when it is sent."""
    sent = datetime.fromisoformat(DAY + clock)
    change = {"product_id": product_id, "category": category, "price": 9.99, "updated_at": DAY + clock}
    return Record(sent, product_id.encode(), None if category is None else json.dumps(change).encode(), "product")


def test_each_event_id_counts_once_and_malformed_records_are_skipped():
    first = event("e1", "12:00:10Z", "page_view", page="/")
    records = [
        first,
        Record(first.send_at + timedelta(seconds=5), first.key, first.value, "duplicate"),
        event("e1", "12:00:20Z", "page_view", user="u2", page="/help"),  # a later copy: ignored
        event("e2", "12:00:50Z", "page_view", page="/"),
        event("e3", "12:01:00Z", "page_view", user="u2", page="/"),
        Record(first.send_at, b"u3", b'{"event_id": "e4", "event_ty', "malformed"),
    ]
    assert [e["event_id"] for e in oracle.events(records)] == ["e1", "e2", "e3"]
    views = oracle.views(records)
    assert views["page_views_per_minute"] == {(at("12:00"), "/"): (2, 1), (at("12:01"), "/"): (1, 1)}
    assert views["active_users_hourly"] == {(at("12:00"),): (2,)}


def test_a_gap_of_exactly_30_minutes_starts_a_new_session():
    records = [
        event("a", "12:00:00Z", "page_view", page="/"),
        event("b", "13:29:59+01:00", "search", query="hat"),  # 12:29:59: 29:59 later, goes on
        event("c", "12:59:59Z", "page_view", page="/"),  # 30:00 later: a new session
        event("d", "13:05:00Z", "page_view", page="/"),  # goes on, past the hour
        event("e", "13:30:00.250Z", "page_view", user="u2", page="/"),
    ]
    views = oracle.views(records)
    # 12:00 holds u1's sessions of 1799 s and 301 s, 2 events each; 13:00 holds u2's lone event.
    assert views["sessions_hourly"] == {(at("12:00"),): (2, 1050.0, 2.0), (at("13:00"),): (1, 0.0, 1.0)}
    assert views["active_users_hourly"] == {(at("12:00"),): (1,), (at("13:00"),): (2,)}


def test_a_search_is_clicked_by_a_same_session_same_query_click_within_30_minutes_after_it():
    records = [
        event("s1", "12:40:00Z", "search", session="a", query="shoes"),
        event("c1", "13:10:00Z", "click", session="a", query="shoes", product_id="p1"),  # exactly 30 min
        event("s2", "12:20:00Z", "search", session="b", query="shoes"),
        event("c2", "12:19:59Z", "click", session="b", query="shoes", product_id="p1"),  # before it
        event("c3", "12:50:01Z", "click", session="b", query="shoes", product_id="p1"),  # 30 min + 1 s
        event("c4", "12:25:00Z", "click", session="b", query="hat", product_id="p1"),  # other query
        event("s3", "12:30:00Z", "search", session="c", query="hat"),
        event("c5", "12:31:00Z", "click", session="c", query="hat", product_id="p2"),
        event("c6", "12:32:00Z", "click", session="c", query="hat", product_id="p3"),  # twice: once
        event("s4", "12:35:00Z", "search", session="d", query="hat"),
    ]  # no click
    assert oracle.views(records)["search_ctr_hourly"] == {
        (at("12:00"), "shoes"): (2, 1, 0.5),
        (at("12:00"), "hat"): (2, 1, 0.5),
    }


def test_a_purchase_is_in_the_ten_windows_starting_on_the_minutes_before_it():
    records = [
        event("a", "07:34:56.789-05:00", "purchase", product_id="p1", quantity=2, amount=19.99),
        event("b", "12:36:00Z", "purchase", product_id="p1", quantity=1, amount=0.01),
    ]
    trending = oracle.views(records)["trending_products"]
    assert trending == {
        **{(at(f"12:{m}"), "p1"): (1, Decimal("19.99")) for m in (25, 26)},
        **{(at(f"12:{m}"), "p1"): (2, Decimal("20.00")) for m in range(27, 35)},
        **{(at(f"12:{m}"), "p1"): (1, Decimal("0.01")) for m in (35, 36)},
    }


def test_category_as_of_the_event_time_and_latest():
    changes = [
        product("p1", "10:00:00Z", "shoes"),
        product("p1", "13:00:00+01:00", "outerwear"),  # 12:00
        product("p1", "12:00:00Z", "sale"),  # the same updated_at, later: wins
        product("p1", "13:00:00Z", None),
    ]
    records = [
        event("a", "11:00:00Z", "purchase", product_id="p1", quantity=1, amount=10.5),
        event("b", "12:00:00Z", "purchase", product_id="p1", quantity=2, amount=20),
        event("c", "12:59:59.999Z", "purchase", product_id="p1", quantity=3, amount=0.1),
        event("d", "13:00:00Z", "purchase", product_id="p1", quantity=1, amount=1),
        event("e", "11:30:00Z", "purchase", product_id="p9", quantity=1, amount=2.25),
    ]
    assert oracle.views(records, oracle.category_as_of(changes))["revenue_by_category_hourly"] == {
        (at("11:00"), "shoes"): (1, 1, Decimal("10.5")),
        (at("11:00"), "unknown"): (1, 1, Decimal("2.25")),
        (at("12:00"), "sale"): (2, 5, Decimal("20.1")),
        (at("13:00"), "unknown"): (1, 1, Decimal("1")),
    }
    latest = oracle.latest_category(changes)
    early = {"product_id": "p1", "time": at("11:00")}
    assert latest(early) == "unknown" and oracle.latest_category(changes[:3])(early) == "sale"
    assert latest({"product_id": "p9", "time": at("11:00")}) == "unknown"
