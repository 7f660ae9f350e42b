"""A seeded generator of ad events, with the mess real producers make (domains.sample), and of the
campaigns changelog.

A user is shown a few ads; some views are clicked within minutes, and some clicks end in a purchase.
The changelog puts every listed ad in a campaign, then moves ads between campaigns and deletes some.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timedelta

from domains.sample import MIX, Mix, changelog, sample, stamp
from infra.producer import Record

ADS = tuple(f"ad{i}" for i in range(60))
#: Ads the changelog never lists: their views fall in campaign "unknown".
UNLISTED = 3
CAMPAIGNS = tuple(f"c{i}" for i in range(8))
#: Seconds from one view to the next, from a view to its click and from a click to its purchase (each
#: drawn uniformly), and the longest a burst lasts: five views, the last clicked and bought at the latest.
NEXT_VIEW, CLICKED, BOUGHT = (1, 120), (1, 2400), (30, 900)
LONGEST = timedelta(seconds=4 * NEXT_VIEW[1] + CLICKED[1] + BOUGHT[1])


def _impressions(user: str, start: datetime, rng: random.Random) -> list[dict]:
    """A user's burst: a few ad views, some clicked, some clicks ending in a purchase, in time order."""
    events = []

    def emit(event_type: str, ad: str, moment: datetime) -> None:
        events.append(
            {
                "event_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                "event_type": event_type,
                "user_id": user,
                "ad_id": ad,
                "_time": moment,
            }
        )

    moment = start
    for _ in range(rng.randint(1, 5)):
        ad = rng.choice(ADS)
        emit("view", ad, moment)
        if rng.random() < 0.2:
            clicked = moment + timedelta(seconds=rng.randint(*CLICKED))  # some come after the 30 minutes
            emit("click", ad, clicked)
            if rng.random() < 0.3:
                emit("purchase", ad, clicked + timedelta(seconds=rng.randint(*BOUGHT)))
        moment += timedelta(seconds=rng.randint(*NEXT_VIEW))
    return sorted(events, key=lambda e: e["_time"])


def _malformed(event: dict, rng: random.Random) -> bytes:
    """Spoil a valid event in one of the ways dead letters must catch."""
    broken = dict(event)
    choice = rng.randrange(5)
    if choice == 0:
        return json.dumps(broken)[:-5].encode()
    if choice == 1:
        broken["event_type"] = "impression"
    elif choice == 2:
        del broken["ad_id"]
    elif choice == 3:
        broken["ad_id"] = 17
    else:
        broken["event_time"] = "now"
    return json.dumps(broken).encode()


def generate(
    start: datetime, end: datetime, count: int, seed: int = 7, mix: Mix = MIX, shaped: bool = True
) -> list[Record]:
    """About ``count`` records of ad events sent over ``[start, end)`` (domains.sample)."""
    users = [f"u{i}" for i in range(max(10, count // 10))]
    return sample(
        start,
        end,
        count,
        seed,
        mix,
        shaped,
        lambda moment, rng: _impressions(rng.choice(users), moment, rng),
        _malformed,
        LONGEST,
    )


def _listing(ad: str, when: datetime, rng: random.Random) -> Record:
    change = {"ad_id": ad, "campaign_id": rng.choice(CAMPAIGNS), "updated_at": stamp(when, rng)}
    return Record(when, ad.encode(), json.dumps(change).encode(), "campaign")


def campaigns(start: datetime, end: datetime, changes: int = 30, seed: int = 7) -> list[Record]:
    """The campaigns changelog (domains.sample.changelog): every ad but the last ``UNLISTED`` in a
    campaign at ``start``, then ``changes`` moves to another campaign and deletions."""
    return changelog(ADS[:-UNLISTED], _listing, start, end, changes, seed)


def changelogs(start: datetime, end: datetime, seed: int = 7) -> dict[str, list[Record]]:
    """Each dimension's changelog over ``[start, end)``, by dimension name."""
    return {"campaigns": campaigns(start, end, seed=seed)}
