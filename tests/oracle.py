"""An independent plain-Python computation of the views, from the records a producer sent.

It shares nothing with the Spark code but the event format: it parses the JSON itself, keeps the first
sent copy of each event_id, and buckets by the window itself.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone

from infra.generator import Record


def events(records: list[Record]) -> list[dict]:
    """The valid events, first sent copy of each event_id, with ``time`` as an aware UTC datetime."""
    seen, result = set(), []
    for record in records:
        if record.kind == "malformed":
            continue
        event = json.loads(record.value)
        if event["event_id"] in seen:
            continue
        seen.add(event["event_id"])
        event["time"] = datetime.fromisoformat(event["event_time"]).astimezone(timezone.utc)
        result.append(event)
    return result


def page_views_per_minute(records: list[Record]) -> dict[tuple, tuple[int, int]]:
    """{(window_start, page): (views, unique_users)}."""
    views, users = defaultdict(int), defaultdict(set)
    for event in events(records):
        if event["event_type"] != "page_view":
            continue
        start = event["time"].replace(second=0, microsecond=0)
        views[start, event["page"]] += 1
        users[start, event["page"]].add(event["user_id"])
    return {key: (views[key], len(users[key])) for key in views}

