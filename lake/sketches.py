"""Spark's HyperLogLog sketch functions in DuckDB, over the same sketch bytes: what the merge SQL
(:mod:`lake.merge`) needs wherever DuckDB runs it (the serving engine, batch's correction report), and
the sketch of a speed partial (the speed layer's fold)."""

from __future__ import annotations

import duckdb
from datasketches import hll_sketch, hll_union, tgt_hll_type
from duckdb.func import FunctionNullHandling

from views import compile


def union(sketches: list[bytes | None]) -> bytes | None:
    """The union of Spark's HyperLogLog sketches (``hll_sketch_agg``), as a sketch."""
    merged, found = hll_union(compile.SKETCH_LGK), False
    for sketch in sketches or ():
        if sketch is not None:
            merged.update(hll_sketch.deserialize(sketch))
            found = True
    return merged.get_result().serialize_compact() if found else None


def sketch_of(values: list[str | None] | None, lg_k: int) -> bytes:
    """A sketch of ``values`` (nulls left out), as Spark's ``hll_sketch_agg`` makes one (HLL_8)."""
    sketch = hll_sketch(lg_k, tgt_hll_type.HLL_8)
    for value in values or ():
        if value is not None:
            sketch.update(value)
    return sketch.serialize_compact()


def estimate(sketch: bytes | None) -> int | None:
    """A sketch's estimate, as Spark's ``hll_sketch_estimate`` gives it (rounded)."""
    return None if sketch is None else round(hll_sketch.deserialize(sketch).get_estimate())


def sketch_functions(con: duckdb.DuckDBPyConnection) -> None:
    """Spark's sketch functions that the views' merge SQL uses, over the same sketch bytes."""
    special = FunctionNullHandling.SPECIAL
    con.create_function("hll_union_list", union, ["BLOB[]"], "BLOB", null_handling=special)
    con.create_function("hll_sketch_estimate", estimate, ["BLOB"], "BIGINT", null_handling=special)
    con.execute("CREATE MACRO hll_union_agg(sketch) AS hll_union_list(list(sketch))")
    con.create_function("hll_sketch_list", sketch_of, ["VARCHAR[]", "INTEGER"], "BLOB", null_handling=special)
    con.execute("CREATE MACRO hll_sketch_agg(value, lg_k) AS hll_sketch_list(list(value), lg_k)")
