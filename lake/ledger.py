"""The ledger (``serving_state``): per view, the days batch has made final, each with its row count, when
it was computed, and until when a later event could change its rows then (View.open_until). Batch
records days in it after their rows are written; the speed layer, the serving layer and maintenance read
it. Read and written with delta-rs: no Spark job, and readers import no Spark (the writer's upsert is
imported when writing)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import date, datetime

import pyarrow as pa

from infra.deployment import Deployment
from views import tables


@dataclass(frozen=True)
class Entry:
    """One view's day made final: its rows, when they were computed (the last time), and until when an
    event after the day could change them, as batch saw the events then (None: recorded before the
    ledger kept it)."""

    view: str
    day: date
    rows: int
    computed_at: datetime
    open_until: datetime | None = None


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


def record(settings: Deployment, days: list[Entry]) -> None:
    """Record ``days`` final; one commit."""
    from infra.delta import upsert

    if days:
        upsert(
            pa.Table.from_pylist([dataclasses.asdict(entry) for entry in days], tables.SERVING_STATE.schema),
            tables.SERVING_STATE.path(settings),
            ("view", "day"),
        )
