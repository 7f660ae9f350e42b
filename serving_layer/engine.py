"""The query engine analysts use: DuckDB over the Delta tables (read with delta-rs), no JVM.

Every declared view is a SQL view of the same name: batch rows of its final days and speed rows of the
others (serving_layer.merge); the master dataset and dead letters are there too, as ``raw_events`` and
``dead_letters``.
"""

from __future__ import annotations

from datetime import date, datetime

import duckdb
import pyarrow.compute as pc
from datasketches import hll_sketch, hll_union
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from infra.settings import Settings
from serving_layer.merge import merged_sql
from views import all_views, compile

TABLES = ("raw_events", "dead_letters", "late_events", "serving_state", "dead_letter_replays",
          "product_changes", "products")


class QueryError(ValueError):
    """A query that cannot run; the message is one line."""


def _dataset(settings: Settings, name: str):
    try:
        return DeltaTable(settings.table(name)).to_pyarrow_dataset()
    except TableNotFoundError:
        return None


def _days(settings: Settings, table: str, view: str, day: str) -> dict[str, set[date]]:
    """Per view, the distinct days of column ``day`` in ``table`` (empty sets if it does not exist)."""
    dataset = _dataset(settings, table)
    rows = dataset.to_table(columns=[view, day]) if dataset is not None else None
    found = {}
    for name in all_views(settings.view_modules):
        values = [] if rows is None else rows.filter(pc.equal(rows[view], name))[day].to_pylist()
        found[name] = {v.date() if isinstance(v, datetime) else v for v in values}
    return found


def finality(settings: Settings) -> dict[str, dict[str, set[date]]]:
    """Per view, its ``final`` days (in the ledger) and its ``provisional`` ones (speed data, not final)."""
    final = _days(settings, "serving_state", "view", "day")
    speed = _days(settings, compile.PARTIALS, "view", "window_hour")
    return {name: {"final": days, "provisional": speed[name] - days} for name, days in final.items()}


def _sketch_union(sketches: list[bytes | None]) -> bytes | None:
    """The union of Spark's HyperLogLog sketches (``hll_sketch_agg``), as a sketch."""
    union, found = hll_union(compile.SKETCH_LGK), False
    for sketch in sketches or ():
        if sketch is not None:
            union.update(hll_sketch.deserialize(sketch))
            found = True
    return union.get_result().serialize_compact() if found else None


def _sketch_estimate(sketch: bytes | None) -> int | None:
    return None if sketch is None else round(hll_sketch.deserialize(sketch).get_estimate())


def sketch_functions(con: duckdb.DuckDBPyConnection) -> None:
    """Spark's sketch functions that the views' merge SQL uses, over the same sketch bytes."""
    con.create_function("hll_union_list", _sketch_union, ["BLOB[]"], "BLOB", null_handling="special")
    con.create_function("hll_sketch_estimate", _sketch_estimate, ["BLOB"], "BIGINT", null_handling="special")
    con.execute("CREATE MACRO hll_union_agg(sketch) AS hll_union_list(list(sketch))")


def connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the merged views and the raw tables registered."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    sketch_functions(con)
    registered = set()
    for name in TABLES:
        dataset = _dataset(settings, name)
        if dataset is not None:
            con.register(name, dataset)
            registered.add(name)
    partials = _dataset(settings, compile.PARTIALS)
    if partials is not None:
        con.register(compile.PARTIALS, partials)
    ledger = "serving_state" if "serving_state" in registered else None
    for name, view in all_views(settings.view_modules).items():
        relations = {"ledger": ledger}
        batch = _dataset(settings, f"batch/{name}")
        if batch is not None:
            relations["batch"] = f'"batch_{name}"'
            con.register(f"batch_{name}", batch)
        if partials is not None and name in partials.schema.names:
            relations["partials"] = compile.PARTIALS
        if set(relations) & {"batch", "partials"}:
            con.execute(f'CREATE VIEW "{name}" AS {merged_sql(view, **relations)}')
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
