"""Which batched days went stale: late events for them arrived after their last recompute."""

from __future__ import annotations

from datetime import date

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from infra.settings import Settings
from views import all_views, tables


def _rows(settings: Settings, table: tables.Table, columns: list[str]) -> list[dict]:
    try:
        return DeltaTable(table.path(settings)).to_pyarrow_table(columns=columns).to_pylist()
    except TableNotFoundError:
        return []


def stale_days(settings: Settings) -> list[date]:
    """Days already in the batch ledger whose windows late events that arrived since they were computed
    can change (for a view whose windows reach across midnight, the neighbouring days too)."""
    views = all_views(settings.view_modules, settings.domain)
    computed: dict[tuple, object] = {}
    for row in _rows(settings, tables.SERVING_STATE, ["view", "day", "computed_at"]):
        key = (row["view"], row["day"])
        computed[key] = max(computed.get(key, row["computed_at"]), row["computed_at"])
    stale = set()
    for row in _rows(settings, tables.LATE_EVENTS, ["view", "day", "received_at"]):
        if row["view"] not in views:
            continue  # a view since removed
        for day in views[row["view"]].days_affected(row["day"]):
            done = computed.get((row["view"], day))
            if done is not None and row["received_at"] > done:
                stale.add(day)
    return sorted(stale)
