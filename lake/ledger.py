"""The ledger (``serving_state``): per view, the days batch has made final, each with its row count and
when it was computed. Batch records days in it after their rows are written; the speed layer, the
serving layer and maintenance read it. Read and written with delta-rs: no Spark job, and readers import
no Spark (the writer's upsert is imported when writing)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

import pyarrow as pa

from infra.deployment import Deployment
from views import tables


@dataclass(frozen=True)
class Entry:
    """One view's day made final: its rows, and when they were computed (the last time)."""

    view: str
    day: date
    rows: int
    computed_at: datetime


def entries(settings: Deployment) -> list[Entry]:
    """Every entry of the ledger now (none if batch never made a day final)."""
    found = tables.SERVING_STATE.rows(settings)
    return [] if found is None else [Entry(**row) for row in found.to_pylist()]


def final_days(settings: Deployment) -> dict[str, set[date]]:
    """Per view with any, the days the ledger records final."""
    days: dict[str, set[date]] = {}
    for entry in entries(settings):
        days.setdefault(entry.view, set()).add(entry.day)
    return days


def record(settings: Deployment, days: dict[str, dict[date, int]], at: datetime) -> None:
    """Record each view's days (view -> day -> rows) final, computed ``at``; one commit."""
    from infra.delta import upsert

    rows = [
        {"view": view, "day": day, "rows": count, "computed_at": at}
        for view, counts in days.items()
        for day, count in counts.items()
    ]
    if rows:
        upsert(
            pa.Table.from_pylist(rows, tables.SERVING_STATE.schema),
            tables.SERVING_STATE.path(settings),
            ("view", "day"),
        )
