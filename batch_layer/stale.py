"""Which batched days went stale: late events that can change them arrived after their last recompute."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from infra.deployment import Deployment
from lake import ledger
from views import tables


def stale_days(settings: Deployment) -> list[date]:
    """Days already in the batch ledger whose windows late events that arrived since they were computed
    can change: the events' own day, the days after it their windows reach back from, and the days
    before it whose windows reach as far as the first of them (its ledger entry's ``open_until``)."""
    return sorted(_stale(settings))


def settled_days(settings: Deployment, now: datetime) -> list[date]:
    """The stale days no late event that makes them stale arrived for in the ``late_data_quiet_minutes``
    before ``now``: the days whose correction would not be outdated minutes later."""
    quiet = now - timedelta(minutes=settings.late_data_quiet_minutes)
    return sorted(day for day, newest in _stale(settings).items() if newest <= quiet)


def _stale(settings: Deployment) -> dict[date, datetime]:
    """The stale days, each with when the newest late event that makes it stale arrived."""
    views = settings.views
    computed = {(entry.view, entry.day): entry for entry in ledger.entries(settings)}
    stale: dict[date, datetime] = {}
    late = tables.LATE_EVENTS.rows(settings)
    for row in [] if late is None else late.to_pylist():
        if row["view"] not in views:
            continue  # a view since removed
        view = views[row["view"]]
        first = row.get("first_event")  # None in rows counted before it was kept
        for day in view.days_affected(row["day"]):
            entry = computed.get((view.name, day))
            if entry is None or row["received_at"] <= entry.computed_at:
                continue
            if day < row["day"] and first is not None and first >= (entry.open_until or view.open_until(day)):
                continue  # past every window of that day
            stale[day] = max(stale.get(day, row["received_at"]), row["received_at"])
    return stale
