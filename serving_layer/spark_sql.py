"""The merged views in Spark SQL, for queries too heavy for one machine and for clusters.

The same merge SQL as the DuckDB engine (``serving_layer.merge``) over the same Delta tables: each
view and analyst table is a temporary view of a Spark session of its own (sharing the caller's
SparkContext), which reads double-quoted names as identifiers, as DuckDB does (:data:`DIALECT`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch_layer import versions
from infra import delta
from infra.settings import Settings
from serving_layer.engine import base_tables
from serving_layer.merge import batch_relation, merged_views, speed_sql
from views import all_views, tables
from views.model import View


#: How Spark reads the merge SQL as DuckDB does: double-quoted names are identifiers.
DIALECT = {"spark.sql.ansi.enabled": "true", "spark.sql.ansi.doubleQuotedIdentifiers": "true"}


def _beside(spark: SparkSession) -> SparkSession:
    """A session sharing ``spark``'s SparkContext that reads the merge SQL as DuckDB does."""
    sql = spark.newSession()
    for key, value in DIALECT.items():
        sql.conf.set(key, value)
    return sql


@contextmanager
def dialect(spark: SparkSession) -> Iterator[SparkSession]:
    """``spark`` reading SQL as DuckDB does while the block runs, as it was afterwards. For a session
    that has no sessions beside it (Spark Connect's), whose DataFrames are analysed when they run: use
    what :func:`speed_rows` returns within the block."""
    before = {key: spark.conf.get(key) for key in DIALECT}
    for key, value in DIALECT.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def speed_rows(spark: SparkSession, settings: Settings, view: View, start: datetime, end: datetime) -> DataFrame | None:
    """The speed layer's rows of ``view`` whose windows start in ``[start, end)`` (whole hours), one per
    window and key (merged from its partials), or None if it has no partials. ``spark`` must read SQL
    as DuckDB does (:func:`dialect`) until the rows are used."""
    sql, path = spark, tables.SPEED_PARTIALS.path(settings)
    if not delta.exists(path):
        return None
    partials = sql.read.format("delta").load(path)
    if view.name not in partials.columns:
        return None
    partials.where((F.col("view") == view.name) & (F.col("window_hour") >= F.lit(start))
                   & (F.col("window_hour") < F.lit(end))).createOrReplaceTempView(tables.SPEED_PARTIALS.name)
    return sql.sql(speed_sql(view, tables.SPEED_PARTIALS.name))


def session(spark: SparkSession, settings: Settings) -> SparkSession:
    """A session beside ``spark`` in which every merged view of ``settings``' deployment, and every
    table the DuckDB engine shows, can be queried by name."""
    sql = _beside(spark)
    views = all_views(settings.view_modules, settings.domain)
    relations = {}

    def register(name: str, path: str) -> None:
        if delta.exists(path):
            relations[name] = sql.read.format("delta").load(path)
            relations[name].createOrReplaceTempView(name)

    for name in base_tables(settings):  # the ledger before the version pointers (batch_layer.versions)
        register(name, settings.table(name))
    for name, path in versions.serving(settings, views).items():
        register(batch_relation(name), path)
    partials = relations.get(tables.SPEED_PARTIALS.name)
    for name, text in merged_views(views, set(relations), set(partials.columns) if partials else set()).items():
        sql.sql(f'CREATE OR REPLACE TEMPORARY VIEW "{name}" AS {text}')
    return sql
