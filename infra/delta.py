"""Delta Lake table helpers shared by the layers: create, idempotent append, upsert."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def ensure(spark: SparkSession, path: str, schema: StructType, partition_by: tuple[str, ...] = ()) -> None:
    """Create an empty Delta table at ``path`` if there is none."""
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    if partition_by:
        builder = builder.partitionedBy(*partition_by)
    builder.execute()


def append_once(rows: DataFrame, path: str, app_id: str, batch_id: int,
                partition_by: tuple[str, ...] = ()) -> None:
    """Append ``rows`` unless micro-batch ``batch_id`` of ``app_id`` was already committed there; new
    columns (a view added to the partials table) join the table's schema."""
    (rows.write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", batch_id).option("mergeSchema", "true")
     .partitionBy(*partition_by).save(path))


def upsert(rows: DataFrame, path: str, keys: tuple[str, ...]) -> None:
    """Insert or replace the rows of ``rows`` matched on ``keys`` (null-safe); rerunning is harmless."""
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    (DeltaTable.forPath(rows.sparkSession, path).alias("t").merge(rows.alias("s"), on)
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
