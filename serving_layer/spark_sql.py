"""The merged views in Spark SQL, for queries too heavy for one machine and for clusters.

The same merge SQL as the DuckDB engine (``lake.merge``) over the same Delta tables: each
view and analyst table is a temporary view of a Spark session of its own (sharing the caller's
SparkContext), which reads double-quoted names as identifiers, as DuckDB does (:data:`DIALECT`).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from infra.deployment import Deployment
from lake import versions
from lake.merge import batch_relation, merged_views
from serving_layer.engine import base_tables
from views import tables

#: How Spark reads the merge SQL as DuckDB does: double-quoted names are identifiers.
DIALECT = {"spark.sql.ansi.enabled": "true", "spark.sql.ansi.doubleQuotedIdentifiers": "true"}


def _beside(spark: SparkSession) -> SparkSession:
    """A session sharing ``spark``'s SparkContext that reads the merge SQL as DuckDB does."""
    sql = spark.newSession()
    for key, value in DIALECT.items():
        sql.conf.set(key, value)
    return sql


def session(spark: SparkSession, settings: Deployment) -> SparkSession:
    """A session beside ``spark`` in which every merged view of ``settings``' deployment, and every
    table the DuckDB engine shows, can be queried by name."""
    sql = _beside(spark)
    views = settings.views
    relations = {}

    def register(name: str, path: str) -> None:
        if tables.exists(path):
            relations[name] = sql.read.format("delta").load(path)
            relations[name].createOrReplaceTempView(name)

    for name in base_tables(settings):  # the ledger before the version pointers (lake.versions)
        register(name, settings.table(name))
    for name, path in versions.serving(settings, views).items():
        register(batch_relation(name), path)
    partials = relations.get(tables.SPEED_PARTIALS.name)
    for name, text in merged_views(views, set(relations), set(partials.columns) if partials else set()).items():
        sql.sql(f'CREATE OR REPLACE TEMPORARY VIEW "{name}" AS {text}')
    return sql
