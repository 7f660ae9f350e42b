"""Which batched days went stale: late events for them arrived after their last recompute."""

from __future__ import annotations

from datetime import date, datetime

from infra.deployment import Deployment
from lake import ledger
from views import tables


def stale_days(settings: Deployment) -> list[date]:
    """Days already in the batch ledger whose windows late events that arrived since they were computed
    can change (for a view whose windows reach across midnight, the neighbouring days too)."""
    views = settings.views
    computed: dict[tuple[str, date], datetime] = {}
    for entry in ledger.entries(settings):
        key = (entry.view, entry.day)
        computed[key] = max(computed.get(key, entry.computed_at), entry.computed_at)
    stale = set()
    late = tables.LATE_EVENTS.rows(settings, ["view", "day", "received_at"])
    for row in [] if late is None else late.to_pylist():
        if row["view"] not in views:
            continue  # a view since removed
        for day in views[row["view"]].days_affected(row["day"]):
            done = computed.get((row["view"], day))
            if done is not None and row["received_at"] > done:
                stale.add(day)
    return sorted(stale)
