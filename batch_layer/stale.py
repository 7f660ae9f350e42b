"""Which batched days went stale: late events for them arrived after their last recompute."""

from __future__ import annotations

from datetime import date

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from infra.settings import Settings


def _rows(settings: Settings, table: str, columns: list[str]) -> list[dict]:
    try:
        return DeltaTable(settings.table(table)).to_pyarrow_table(columns=columns).to_pylist()
    except TableNotFoundError:
        return []


def stale_days(settings: Settings) -> list[date]:
    """Days already in the batch ledger that received late events since they were computed."""
    computed: dict[tuple, object] = {}
    for row in _rows(settings, "serving_state", ["view", "day", "computed_at"]):
        key = (row["view"], row["day"])
        computed[key] = max(computed.get(key, row["computed_at"]), row["computed_at"])
    return sorted({row["day"] for row in _rows(settings, "late_events", ["view", "day", "received_at"])
                   if (row["view"], row["day"]) in computed
                   and row["received_at"] > computed[row["view"], row["day"]]})
