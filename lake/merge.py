"""The merge, stated once: batch rows of the days the ledger names final for a view, and for every other
day the speed layer's partials combined per window and key with the view's own merge (sums add,
sketches union). A window belongs to the UTC day it starts on (``views.timebase``).

The SQL is the same for the serving layer's DuckDB and for Spark SQL (``serving_layer.spark_sql``,
with ANSI double-quoted identifiers); each engine registers the relations under the names of
:func:`merged_views`.
"""

from __future__ import annotations

from views import tables
from views.compile import ROWS, finals, merged
from views.model import View


def partials_of(view: View, partials: str) -> str:
    """SQL: the partials of ``view`` in the partials table ``partials``, as rows of their own columns
    (window, keys, states)."""
    return f'(SELECT "{view.name}".* FROM {partials} WHERE "view" = \'{view.name}\')'


def folded_sql(view: View, rows: str, ledger: str | None = None) -> str:
    """SQL: ``rows`` (partials of ``view``, as :func:`partials_of` gives them, or rows this made) folded
    into one row per window and key, each state merged with the view's own merge (sums add, sketches
    union) and its values beside them, the days the ledger relation ``ledger`` names final left out. A
    window whose rows were all taken back (e.g. a session that moved to another hour) stays, with no
    rows: its sketches cannot be taken back, so rows this made fold again with new partials to what all
    the partials fold to."""
    group = ", ".join(f'"{c}"' for c in _group(view))
    states = ", ".join(f'{sql} AS "{column}"' for column, sql in merged(view).items())
    values = "".join(f', {sql} AS "{name}"' for name, sql in finals(view).items() if name not in merged(view))
    final = f" WHERE NOT (CAST(window_start AS DATE) IN ({final_days_sql(view, ledger)}))" if ledger else ""
    return f"SELECT *{values} FROM (SELECT {group}, {states} FROM {rows} GROUP BY {group}){final}"


def refolded_sql(view: View, folded: str, new: str, ledger: str | None = None) -> str:
    """SQL: the rows of :func:`folded_sql` in the relation ``folded`` brought up to date with the new
    partials ``new`` (of ``view``, as :func:`partials_of` gives them): each window that a new partial
    touches, folded again from its rows in ``folded`` and the new partials."""
    columns = ", ".join(f'"{c}"' for c in (*_group(view), *merged(view)))
    rows = (
        f"(SELECT {columns} FROM {folded} WHERE window_start IN (SELECT window_start FROM {new}) "
        f"UNION ALL SELECT {columns} FROM {new})"
    )
    return folded_sql(view, rows, ledger)


def speed_rows_sql(view: View, folded: str) -> str:
    """SQL: the speed rows of ``view`` (its columns, source and finality) from the relation ``folded`` of
    :func:`folded_sql`: the windows that hold rows."""
    columns = ", ".join(f'"{c}"' for c in view.columns)
    return f"SELECT {columns}, 'speed' AS source, FALSE AS is_final FROM {folded} WHERE {ROWS} > 0"


def _group(view: View) -> tuple[str, ...]:
    return ("window_start", "window_end", *view.keys)


def final_days_sql(view: View, ledger: str) -> str:
    """SQL: the days of ``view`` that the ledger relation ``ledger`` (view, day) names final."""
    return f"SELECT day FROM {ledger} WHERE view = '{view.name}'"


def merged_parts(
    view: View, batch: str | None = None, partials: str | None = None, ledger: str | None = None
) -> dict[str, str]:
    """SQL for the parts of the merged view over the relations ``batch``, ``partials`` and ``ledger``
    (any may be missing: without a ledger no day is final): ``batch``, its final days' rows, and
    ``speed``, the other days' rows, each with the same columns; the parts whose relations are there."""
    columns = ", ".join(f'"{c}"' for c in view.columns)
    final = f"CAST(window_start AS DATE) IN ({final_days_sql(view, ledger)})" if ledger else "FALSE"
    parts = {}
    if batch and ledger:
        parts["batch"] = f"SELECT {columns}, 'batch' AS source, TRUE AS is_final FROM {batch} WHERE {final}"
    if partials:
        parts["speed"] = speed_rows_sql(view, f"({folded_sql(view, partials_of(view, partials), ledger)})")
    return parts


def merged_sql(view: View, batch: str | None = None, partials: str | None = None, ledger: str | None = None) -> str:
    """SQL for the merged view: its :func:`merged_parts`, one after the other."""
    parts = merged_parts(view, batch, partials, ledger)
    if not parts:
        raise LookupError(
            f"view {view.name} has no data yet: neither its batch nor its speed table exists; "
            f"start the pipeline with `lambdalake up`"
        )
    return "\nUNION ALL\n".join(parts.values())


def batch_relation(name: str) -> str:
    """The relation name under which the engines register view ``name``'s batch table."""
    return f"batch_{name}"


def merged_views(views: dict[str, View], relations: set[str], partial_views: set[str]) -> dict[str, str]:
    """SQL of every view that has data, over the relations an engine registered (``relations``): its
    batch table (:func:`batch_relation`), the ledger, and the partials table if ``partial_views``
    (the views with a column there) has it."""
    ledger = tables.SERVING_STATE.name if tables.SERVING_STATE.name in relations else None
    result = {}
    for name, view in views.items():
        batch = f'"{batch_relation(name)}"' if batch_relation(name) in relations else None
        partials = tables.SPEED_PARTIALS.name if name in partial_views else None
        if batch or partials:
            result[name] = merged_sql(view, batch, partials, ledger)
    return result
