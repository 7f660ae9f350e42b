"""An independent plain-Python computation of the ads domain's views, from the records a producer sent
(the first sent copy of each event, windows and the campaigns changelog by tests/oracle.py's helpers)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta

from infra.producer import Record
from tests.oracle import HOUR, MINUTE, as_of, events, floor, latest, of_type

TEN_SECONDS = timedelta(seconds=10)


def campaign_as_of(campaigns: list[Record]) -> Callable[[dict], str]:
    """An ad event's campaign as of its time."""
    return as_of(campaigns, "ad_id", "campaign_id")


#: An ad event's campaign when no campaign is known.
NO_CAMPAIGN = campaign_as_of([])


def latest_campaign(campaigns: list[Record]) -> Callable[[dict], str]:
    """An ad event's campaign as the campaigns changelog ends."""
    return latest(campaigns, "ad_id", "campaign_id")


def _views_10s(valid: list[dict], campaign: Callable[[dict], str]) -> dict:
    views: defaultdict[tuple, int] = defaultdict(int)
    for event in of_type(valid, "view"):
        views[(floor(event["time"], TEN_SECONDS), campaign(event))] += 1
    return {key: (count,) for key, count in views.items()}


def _ctr(valid: list[dict], campaign: Callable[[dict], str]) -> dict:
    clicks = defaultdict(list)
    for click in of_type(valid, "click"):
        clicks[click["user_id"], click["ad_id"]].append(click["time"])
    counts: defaultdict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for view in of_type(valid, "view"):
        count = counts[(floor(view["time"], HOUR), campaign(view))]
        count[0] += 1
        count[1] += any(timedelta() <= t - view["time"] <= 30 * MINUTE for t in clicks[view["user_id"], view["ad_id"]])
    return {key: (views, clicked, clicked / views) for key, (views, clicked) in counts.items()}


def views(records: list[Record], campaign: Callable[[dict], str] = NO_CAMPAIGN) -> dict[str, dict[tuple, tuple]]:
    """Every ads view, by name: {(window_start, *keys): measures}, with ``campaign`` giving an ad
    event's campaign (default: none is known)."""
    valid = events(records)
    return {"campaign_views_10s": _views_10s(valid, campaign), "campaign_ctr_hourly": _ctr(valid, campaign)}
