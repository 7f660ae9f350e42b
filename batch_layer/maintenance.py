"""Table maintenance, off the hot path (the ``maintenance`` DAG).

- **OPTIMIZE** bin-packs each Delta table's small files (the speed layer appends a few per
  micro-batch) into few large ones, in one commit that changes no row.
- **VACUUM** deletes the files that no table version within the retention
  (``vacuum_retention_hours``, Delta's own default of a week) still reads: time travel within it keeps
  working, and so does every reader (the serving engine reads the newest version at each query).
- **Old logs**: Airflow's task and DAG-parsing logs older than ``log_retention_days`` are deleted.
  Streaming checkpoints and Delta logs trim their own metadata (Spark keeps the last 100 micro-batches,
  Delta expires log entries older than its log retention at each checkpoint).
"""

from __future__ import annotations

import time

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from infra import storage
from infra.airflow import parsing_logs, task_logs
from infra.settings import Settings

#: Delta's default retention; a shorter one is the deployment's explicit choice (Delta's check is lifted).
SAFE_RETENTION_HOURS = 168


def tables(settings: Settings) -> list[str]:
    """Every Delta table of the deployment (the catalogue's and every batch version), as locations."""
    return storage.delta_tables(settings.storage_root)


def optimize(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """Compact every table's small files; per table, how many files were rewritten."""
    done = {}
    for table in tables(settings):
        metrics = DeltaTable.forPath(spark, table).optimize().executeCompaction().first()["metrics"]
        if metrics["numFilesRemoved"]:
            done[table.removeprefix(settings.storage_root + "/")] = metrics["numFilesRemoved"]
    return done


def vacuum(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """Delete the files no version within the retention reads; per table, how many files went."""
    hours = settings.vacuum_retention_hours
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", str(hours >= SAFE_RETENTION_HOURS).lower())
    done = {}
    for table in tables(settings):
        before = storage.data_files(table)
        DeltaTable.forPath(spark, table).vacuum(hours)
        gone = before - storage.data_files(table)
        if gone:
            done[table.removeprefix(settings.storage_root + "/")] = gone
    return done


def trim_logs(settings: Settings) -> int:
    """Delete Airflow's task and parsing logs older than the retention; how many files went."""
    oldest = time.time() - settings.log_retention_days * 86_400
    old = [path for folder in (task_logs(settings), parsing_logs(settings))
           for path in folder.rglob("*") if path.is_file() and path.stat().st_mtime < oldest]
    for path in old:
        path.unlink()
    return len(old)
