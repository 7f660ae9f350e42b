"""The query engine analysts use: DuckDB over the Delta tables (read with delta-rs), no JVM.

Every declared view is a SQL view of the same name, merged at its boundary; the master dataset and
dead letters are there too, as ``raw_events`` and ``dead_letters``.
"""

from __future__ import annotations

from datetime import datetime

import duckdb
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from infra.settings import Settings
from serving_layer.merge import merged_sql
from views import all_views, timebase

TABLES = ("raw_events", "dead_letters", "late_events", "serving_state", "dead_letter_replays",
          "product_changes", "products")


class QueryError(ValueError):
    """A query that cannot run; the message is one line."""


def _dataset(settings: Settings, name: str):
    try:
        return DeltaTable(settings.table(name)).to_pyarrow_dataset()
    except TableNotFoundError:
        return None


def boundaries(settings: Settings) -> dict[str, datetime]:
    """Each view's boundary, derived from the ledger of complete batch days."""
    ledger = _dataset(settings, "serving_state")
    table = ledger.to_table(columns=["view", "day"]) if ledger is not None else None
    result = {}
    for name in all_views(settings.view_modules):
        days = [] if table is None else table.filter(pc.equal(table["view"], name))["day"].to_pylist()
        result[name] = timebase.boundary(days)
    return result


def connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the merged views and the raw tables registered."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in TABLES:
        dataset = _dataset(settings, name)
        if dataset is not None:
            con.register(name, dataset)
    bounds = boundaries(settings)
    for name, view in all_views(settings.view_modules).items():
        relations = {}
        for layer in ("batch", "speed"):
            dataset = _dataset(settings, f"{layer}/{name}")
            if dataset is not None:
                relations[layer] = f'"{layer}_{name}"'
                con.register(f"{layer}_{name}", dataset)
        if relations:
            con.execute(f'CREATE VIEW "{name}" AS {merged_sql(view, bounds[name], **relations)}')
    return con


def query(settings: Settings, sql: str) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` against the merged views; the column names and rows."""
    con = connect(settings)
    try:
        result = con.execute(sql)
        return [d[0] for d in result.description or []], result.fetchall()
    except duckdb.CatalogException as exc:
        known = ", ".join(sorted(r[0] for r in con.execute("SHOW TABLES").fetchall()))
        first = " ".join(str(exc).split("Did you mean")[0].split())
        raise QueryError(f"{first} Known views and tables: {known}") from None
    except duckdb.Error as exc:
        raise QueryError(" ".join(str(exc).split())) from None
    finally:
        con.close()
