"""Delta Lake table helpers shared by the layers: create, append a micro-batch once, upsert."""

from __future__ import annotations

import json
from typing import TypeVar, cast

import deltalake
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from infra.deployment import Deployment
from views.tables import exists, opened, retried, writer_properties

R = TypeVar("R")


#: Delta's interval units, largest first (a table property reads ``interval 7 days``).
UNITS = (("days", 86_400), ("hours", 3_600), ("minutes", 60), ("seconds", 1))


def _interval(seconds: float) -> str:
    """``seconds`` as a Delta interval, in the largest unit that divides it (``interval 7 days``)."""
    whole = round(seconds)
    unit, size = next((unit, size) for unit, size in UNITS if whole % size == 0)
    return f"interval {whole // size} {unit}"


def retention_properties(settings: Deployment) -> dict[str, str]:
    """The table properties that hold the settings' retentions: of removed files and of the log."""
    return {
        "delta.deletedFileRetentionDuration": _interval(settings.vacuum_retention_hours * 3_600),
        "delta.logRetentionDuration": _interval(settings.delta_log_retention_days * 86_400),
    }


def ensure(
    path: str,
    schema: T.StructType | pa.Schema,
    partition_by: tuple[str, ...] = (),
    properties: dict[str, str] | None = None,
) -> None:
    """Create an empty Delta table at ``path`` if there is none (with delta-rs: no Spark job; a Spark
    schema's columns all nullable, as Spark's writer makes them), with table ``properties`` (set on a
    table that lacks them, too)."""
    if not exists(path):
        if isinstance(schema, T.StructType):
            schema = pa.schema([field.with_nullable(True) for field in to_arrow_schema(schema)])
        deltalake.DeltaTable.create(
            path, schema, mode="ignore", partition_by=list(partition_by) or None, configuration=properties
        )
    if properties:
        table = deltalake.DeltaTable(path)
        if any(table.metadata().configuration.get(k) != v for k, v in properties.items()):
            table.alter.set_table_properties(properties)


def committed_batch(path: str, app_id: str) -> int:
    """The last micro-batch of ``app_id`` appended to the table at ``path`` (-1 if none), read from the
    newest commits' metadata (delta-rs, no Spark job); asked once when a streaming query starts."""
    table = opened(path)
    for commit in [] if table is None else table.history():  # newest first
        mark = json.loads(commit.get("userMetadata") or "{}")
        if isinstance(mark, dict) and mark.get("app") == app_id:
            return int(mark["batch"])
    return -1


class BatchAppends:
    """Appends of one streaming query's micro-batches, each to each table at most once.

    A restarted query replays the micro-batch it had not finished; the tables it had committed that
    batch to already skip it. Each commit names its (app id, batch id) in its ``userMetadata``, read
    back once per table when the query starts. (Delta's own ``txnAppId``/``txnVersion`` does the same
    check on every commit by replaying the table's log, which cost 0.8 s per commit here.)
    """

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self.last: dict[str, int] = {}  # table path -> the last micro-batch of app_id committed there
        # table path -> the table as delta-rs last committed to it: the next commit reads only the log
        # written since (a commit by another writer meanwhile is checked for conflicts, as always)
        self.opened: dict[str, deltalake.DeltaTable] = {}

    def append(
        self,
        rows: DataFrame | pa.Table,
        path: str,
        batch_id: int,
        partition_by: tuple[str, ...] = (),
        writer: deltalake.WriterProperties | None = None,
    ) -> bool:
        """Append ``rows`` unless micro-batch ``batch_id`` was committed there (then False); new columns
        (a view added to the partials table) join the table's schema. A few rows already in the driver
        (an Arrow table) are written by delta-rs (as ``writer`` says), without a Spark job. A commit that
        loses a race (to maintenance changing the table's properties) is made again on the version that
        won it."""
        if path not in self.last:
            self.last[path] = committed_batch(path, self.app_id)
        if batch_id <= self.last[path]:
            return False
        mark = json.dumps({"app": self.app_id, "batch": batch_id})

        def commit() -> None:
            if not isinstance(rows, pa.Table):
                (
                    rows.write.format("delta")
                    .mode("append")
                    .partitionBy(*partition_by)
                    .option("userMetadata", mark)
                    .option("mergeSchema", "true")
                    .option("optimizeWrite", "false")
                    .save(path)
                )
                return
            table = self.opened.get(path)
            try:
                deltalake.write_deltalake(
                    table or path,
                    rows,
                    mode="append",
                    partition_by=list(partition_by) or None,
                    schema_mode="merge",
                    writer_properties=writer or writer_properties(),
                    commit_properties=deltalake.CommitProperties(custom_metadata={"userMetadata": mark}),
                )
            except deltalake.exceptions.CommitFailedError:
                if table is not None:
                    table.update_incremental()  # the next attempt reads the log from the version that won
                raise
            if table is None:
                self.opened[path] = deltalake.DeltaTable(path)

        retried(commit)
        self.last[path] = batch_id
        return True


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """Spark's ``schema`` as Arrow types it, every field nullable: Spark marks a struct's fields non-null
    even where the struct itself is null (a view's column in another view's row of the partials)."""
    return to_arrow_schema(cast(T.StructType, _relaxed(schema)))


def _relaxed(kind: T.DataType) -> T.DataType:
    if isinstance(kind, T.StructType):
        return T.StructType([T.StructField(f.name, _relaxed(f.dataType), True, f.metadata) for f in kind])
    return kind


def to_arrow(rows: DataFrame) -> pa.Table:
    """``rows`` collected as Arrow, every field nullable (:func:`arrow_schema`)."""
    return rows.to(cast(T.StructType, _relaxed(rows.schema))).toArrow()  # a struct stays a struct


def replace(rows: pa.Table, path: str, where: str) -> None:
    """Replace the rows of the table at ``path`` that meet ``where`` (SQL) with ``rows``, in one commit
    (made with ``rows``' schema if there is no table); retried on a lost race (:func:`retried`).
    delta-rs: a batch day's aggregate rows, already in the driver, commit in hundredths of a second
    where Spark's Delta writer takes seconds."""

    def commit() -> None:
        if exists(path):
            deltalake.write_deltalake(path, rows, mode="overwrite", predicate=where)
        else:  # two first writes race to create it: the loser overwrites on its retry
            deltalake.write_deltalake(path, rows, mode="append")

    retried(commit)


def upsert(rows: pa.Table, path: str, keys: tuple[str, ...]) -> None:
    """Insert or replace the rows of ``rows`` matched on ``keys`` (made with ``rows``' schema if there is
    no table; new columns join its schema); rerunning is harmless, and so is a concurrent upsert
    (:func:`retried`). delta-rs: a small table's merge takes no Spark job."""

    def merge() -> None:
        table = opened(path)
        if table is None:
            deltalake.write_deltalake(path, rows, mode="append")  # a concurrent first write: a race, retried
            return
        (
            table.merge(
                rows,
                " AND ".join(f"t.{k} = s.{k}" for k in keys),
                source_alias="s",
                target_alias="t",
                merge_schema=True,
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    retried(merge)
