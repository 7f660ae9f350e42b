"""The boundary merge, stated once: batch rows before a view's boundary, and from it the speed layer's
partials combined per window and key with the view's own merge (sums add, sketches union)."""

from __future__ import annotations

from datetime import datetime

from views.compile import ROWS, finals, merged
from views.model import View


def speed_sql(view: View, partials: str) -> str:
    """SQL for the speed layer's rows of ``view`` from the partials table ``partials``: one row per
    window and key, each measure merged from every micro-batch's partial (a window whose rows were
    all taken back, e.g. a session that moved to another hour, is gone)."""
    group = ", ".join(f'"{c}"' for c in ("window_start", "window_end", *view.keys))
    states = ", ".join(f'{sql} AS "{column}"' for column, sql in merged(view).items())
    values = ", ".join(f'{sql} AS "{name}"' for name, sql in finals(view).items())
    return (f'SELECT {group}, {values} FROM (SELECT {group}, {states} '
            f'FROM (SELECT unnest("{view.name}") FROM {partials} WHERE "view" = \'{view.name}\') '
            f'GROUP BY {group} HAVING {merged(view)[ROWS]} > 0)')


def merged_sql(view: View, boundary: datetime, batch: str | None = None, partials: str | None = None) -> str:
    """SQL for the merged view over the relations ``batch`` and ``partials`` (either may be missing)."""
    columns = ", ".join(f'"{c}"' for c in view.columns)
    at = f"TIMESTAMPTZ '{boundary.isoformat()}'"
    parts = []
    if batch:
        parts.append(f"SELECT {columns}, 'batch' AS source, TRUE AS is_final FROM {batch} WHERE window_start < {at}")
    if partials:
        parts.append(f"SELECT {columns}, 'speed' AS source, FALSE AS is_final FROM ({speed_sql(view, partials)}) "
                     f"WHERE window_start >= {at}")
    if not parts:
        raise LookupError(f"view {view.name} has no data yet: neither its batch nor its speed table exists; "
                          f"start the pipeline with `lambdalake up`")
    return "\nUNION ALL\n".join(parts)
