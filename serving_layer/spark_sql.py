"""The merged views in Spark SQL, for queries too heavy for one machine and for clusters.

The same merge SQL as the DuckDB engine (``serving_layer.merge``) over the same Delta tables: each
view and analyst table is a temporary view of a Spark session of its own (sharing the caller's
SparkContext), which reads double-quoted names as identifiers, as DuckDB does.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from infra.settings import Settings
from serving_layer.engine import TABLES
from serving_layer.merge import batch_relation, merged_views
from views import all_views, compile


def session(spark: SparkSession, settings: Settings) -> SparkSession:
    """A session beside ``spark`` in which every merged view of ``settings``' deployment, and every
    table the DuckDB engine shows, can be queried by name."""
    sql = spark.newSession()
    sql.conf.set("spark.sql.ansi.enabled", "true")
    sql.conf.set("spark.sql.ansi.doubleQuotedIdentifiers", "true")
    views = all_views(settings.view_modules)
    paths = {name: settings.table(name) for name in (*TABLES, compile.PARTIALS)}
    paths.update({batch_relation(name): settings.table(f"batch/{name}") for name in views})
    relations = {}
    for name, path in paths.items():
        if DeltaTable.isDeltaTable(sql, path):
            relations[name] = sql.read.format("delta").load(path)
            relations[name].createOrReplaceTempView(name)
    partials = relations.get(compile.PARTIALS)
    for name, text in merged_views(views, set(relations), set(partials.columns) if partials else set()).items():
        sql.sql(f'CREATE OR REPLACE TEMPORARY VIEW "{name}" AS {text}')
    return sql
