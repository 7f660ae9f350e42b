"""The correction report: when batch makes days final, how far the speed layer's provisional rows for
those days were off, so that users learn how much to trust provisional numbers.

Per view and recompute, one row per measure in ``corrections``: the windows (window and key) each side
had, those batch added, those it removed (speed showed them, batch has none) and those it changed; and
the measure's absolute difference summed over the windows (a missing side counts as 0) with its size
relative to batch's own total.

The comparison runs in DuckDB on the driver, as the serving layer's merge does: batch's rows are
already there (checked and written from Arrow), and the speed layer's of the same days are its partials
of those hours (a few partitions of ``speed_partials``, read with delta-rs), merged by the same SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from infra.deployment import Deployment
from lake.merge import merged_parts
from lake.sketches import sketch_functions
from views import tables, timebase
from views.model import View

COUNTS = ("speed_windows", "batch_windows", "added", "removed", "changed")


@dataclass(frozen=True)
class Comparison:
    """A view's batch rows against the speed layer's of the same windows (:data:`COUNTS`, in order)."""

    speed_windows: int
    batch_windows: int
    added: int
    removed: int
    changed: int
    #: per measure: its absolute difference summed over the windows, and batch's own total
    measures: dict[str, tuple[float, float]]


def compare_sql(view: View, batch: str, speed: str) -> str:
    """SQL: windows of each side, added, removed and changed ones, and per measure ``m`` its difference
    ``d_m`` and batch total ``t_m``, comparing the relations ``batch`` and ``speed`` (the view's rows)."""
    keys = ", ".join(f'"{c}"' for c in ("window_start", "window_end", *view.keys))
    measures = [m.name for m in view.measures]

    def side(relation: str, prefix: str) -> str:
        values = ", ".join(f'CAST("{m}" AS DOUBLE) AS "{prefix}{m}"' for m in measures)
        return f"SELECT {keys}, {values}, TRUE AS _{prefix[0]} FROM {relation}"

    differs = " OR ".join(f'"b_{m}" IS DISTINCT FROM "s_{m}"' for m in measures)
    sums = ", ".join(
        f'sum(abs(coalesce("b_{m}", 0) - coalesce("s_{m}", 0))) AS "d_{m}", sum(abs("b_{m}")) AS "t_{m}"'
        for m in measures
    )
    return (
        f"SELECT count_if(_s IS NOT NULL) AS speed_windows, count_if(_b IS NOT NULL) AS batch_windows, "
        f"count_if(_s IS NULL) AS added, count_if(_b IS NULL) AS removed, "
        f"count_if(_b IS NOT NULL AND _s IS NOT NULL AND ({differs})) AS changed, {sums} "
        f"FROM ({side(batch, 'b_')}) FULL OUTER JOIN ({side(speed, 's_')}) USING ({keys})"
    )


def _partials(settings: Deployment, view: View, start: datetime, end: datetime) -> pa.Table | None:
    """The speed layer's partials of ``view`` for the hours of ``[start, end)``, or None if it has none."""
    table = tables.SPEED_PARTIALS.opened(settings)
    partials = None if table is None else table.to_pyarrow_dataset()
    if partials is None or view.name not in partials.schema.names:
        return None
    hours = ds.field("window_hour")
    return partials.to_table(
        columns=["view", "window_hour", view.name],
        filter=(ds.field("view") == view.name) & (hours >= start) & (hours < end),
    )


def compare(view: View, batch: pa.Table, partials: pa.Table) -> Comparison:
    """Windows of each side, added, removed and changed ones, and per measure (difference, batch total)."""
    with duckdb.connect() as con:
        sketch_functions(con)
        con.register("batch_rows", batch)
        con.register(tables.SPEED_PARTIALS.name, partials)
        speed = f"({merged_parts(view, partials=tables.SPEED_PARTIALS.name)['speed']})"
        [found] = con.execute(compare_sql(view, "batch_rows", speed)).fetchall()  # aggregates alone: one row
    speed_windows, batch_windows, added, removed, changed, *rest = found
    sums = iter(rest)  # d_m, t_m per measure, in the view's order
    return Comparison(
        speed_windows,
        batch_windows,
        added,
        removed,
        changed,
        {m.name: (next(sums) or 0.0, next(sums) or 0.0) for m in view.measures},
    )


def record(settings: Deployment, view: View, batch: pa.Table, start: datetime, end: datetime) -> Comparison | None:
    """Compare ``batch`` (the view's exact rows of ``[start, end)``) with the speed layer's rows of
    those windows and append the report to ``corrections``; None if the speed layer has no rows there."""
    partials = _partials(settings, view, timebase.utc(start), timebase.utc(end))
    found = None if partials is None else compare(view, batch, partials)
    if found is None or not found.speed_windows:
        return None
    counts = [getattr(found, k) for k in COUNTS]
    now, days = datetime.now(timebase.UTC), (start.date(), (end - timebase.DAY).date())
    rows = [(now, view.name, *days, m, *counts, float(d), d / t if t else None) for m, (d, t) in found.measures.items()]
    tables.CORRECTIONS.append(settings, rows)
    return found
