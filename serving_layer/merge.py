"""The boundary merge, stated once: batch rows before a view's boundary, speed rows from it."""

from __future__ import annotations

from datetime import datetime

from views.model import View


def merged_sql(view: View, boundary: datetime, batch: str | None = None, speed: str | None = None) -> str:
    """SQL for the merged view over relations ``batch`` and ``speed`` (either may be missing)."""
    columns = ", ".join(f'"{c}"' for c in view.columns)
    at = f"TIMESTAMPTZ '{boundary.isoformat()}'"
    parts = []
    if batch:
        parts.append(f"SELECT {columns}, 'batch' AS source, TRUE AS is_final FROM {batch} WHERE window_start < {at}")
    if speed:
        parts.append(f"SELECT {columns}, 'speed' AS source, FALSE AS is_final FROM {speed} WHERE window_start >= {at}")
    if not parts:
        raise LookupError(f"view {view.name} has no data yet: neither its batch nor its speed table exists; "
                          f"start the pipeline with `lambdalake up`")
    return "\nUNION ALL\n".join(parts)
