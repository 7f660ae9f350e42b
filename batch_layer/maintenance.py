"""Table maintenance, off the hot path (the ``maintenance`` DAG).

- **OPTIMIZE** bin-packs a Delta table's small files (the speed layer appends a few per micro-batch)
  into few large ones, in one commit that changes no row.
- **VACUUM** deletes the files that no table version within the retention (``vacuum_retention_hours``,
  Delta's own default of a week) still reads: time travel within it keeps working, and so does every
  reader (the serving engine reads the newest version at each query). The retention is each table's
  ``delta.deletedFileRetentionDuration``, and the history's ``delta.logRetentionDuration``
  (``delta_log_retention_days``): both are set from the settings before vacuuming.
- **Old logs**: Airflow's task and DAG-parsing logs older than ``log_retention_days`` are deleted.
  Streaming checkpoints and Delta logs trim their own metadata (Spark keeps the last 100 micro-batches,
  Delta expires log entries older than the log retention at each checkpoint).

What a table needs is read from its Delta log with delta-rs (and, for VACUUM, one listing of its
files), without a Spark job: a table with nothing to do costs no Spark job and no commit. The work
itself is Spark SQL only, so that it runs on a classic SparkSession and on a Spark Connect session (the
batch engine) alike.
"""

from __future__ import annotations

import time
from functools import partial
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
from fsspec.core import url_to_fs
from pyspark.sql import Row, SparkSession

from infra import delta, storage
from infra.airflow import parsing_logs, task_logs
from infra.deployment import Deployment
from views.tables import opened, retried

#: A file below this size is small: OPTIMIZE packs such files together. Spark reads a table in splits of
#: up to 128 MB (``spark.sql.files.maxPartitionBytes``), so a file that large already fills a read task,
#: and rewriting it buys nothing; Delta's own bound (1 GB) would rewrite gigabytes nightly for that. Every
#: smaller file costs a read task's file open and a log entry of its own.
SMALL_FILE_BYTES = 128 * 2**20


def tables(settings: Deployment) -> list[str]:
    """Every Delta table of the deployment (the catalogue's and every batch version), as locations."""
    return storage.delta_tables(settings.storage_root)


def _name(settings: Deployment, table: str) -> str:
    return table.removeprefix(settings.storage_root + "/")


def _sql(table: str) -> str:
    """The Delta table at ``table`` (a path or URI) as Spark SQL names it."""
    return "delta.`" + table.replace("`", "``") + "`"


def _has_small_files(log: deltalake.DeltaTable) -> bool:
    """Whether a partition of the table holds two files or more below :data:`SMALL_FILE_BYTES`, the ones
    OPTIMIZE packs (it leaves a partition's lone small file as it is)."""
    files = pa.table(log.get_add_actions(flatten=True))
    partitions = [name for name in files.column_names if name.startswith("partition.")]
    small = files.filter(pc.field("size_bytes") < SMALL_FILE_BYTES)
    per_partition = small.group_by(partitions).aggregate([("size_bytes", "count")])["size_bytes_count"]
    return (pc.max(per_partition).as_py() or 0) >= 2


def optimize(spark: SparkSession, settings: Deployment) -> dict[str, int]:
    """Compact the small files of every table that has some; per table, how many files were rewritten."""
    # Delta's OPTIMIZE then packs the files this module calls small, and no larger one
    spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(SMALL_FILE_BYTES))
    done = {}
    for table in tables(settings):
        log = opened(table)  # None: a folder without a first commit (being created)
        if log is None or not _has_small_files(log):
            continue
        # one row: the table's path and metrics; made again if the speed layer packed the table meanwhile
        [report] = retried(partial(_optimize, spark, table))
        removed = report["metrics"]["numFilesRemoved"]
        if removed:
            done[_name(settings, table)] = removed
    return done


def _optimize(spark: SparkSession, table: str) -> list[Row]:
    return spark.sql(f"OPTIMIZE {_sql(table)}").collect()


def _retain(spark: SparkSession, table: str, log: deltalake.DeltaTable, properties: dict[str, str]) -> None:
    """Set ``properties`` on the table if its configuration differs (a commit)."""
    configured = log.metadata().configuration
    if all(configured.get(key) == value for key, value in properties.items()):
        return
    pairs = ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
    spark.sql(f"ALTER TABLE {_sql(table)} SET TBLPROPERTIES ({pairs})")


def _hidden(path: str) -> bool:
    """Whether VACUUM leaves ``path`` (relative to its table) alone: the log, checksums, other metadata."""
    return any(part.startswith(("_", ".")) for part in path.split("/"))


def _deletable(table: str, log: deltalake.DeltaTable, retention: float) -> set[str]:
    """The files of the table at ``table`` (relative to it) that VACUUM deletes with a retention of
    ``retention`` seconds: stored, written before the retention, and read neither by the current
    version nor by one within the retention (removed since). One listing of the table, and its log read
    by delta-rs. (The log alone does not tell: a checkpoint drops what was removed before the retention,
    and delta-rs still names files deleted already.)"""
    log.update_incremental()
    fs, root = url_to_fs(table)
    fs.invalidate_cache()  # s3fs would answer from an earlier listing
    root = root.rstrip("/")
    stored = {found[len(root) + 1 :] for found in fs.find(root)}
    current = {unquote(path) for path in pa.table(log.get_add_actions()).column("path").to_pylist()}
    removed = set(log.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True))
    recently_removed = removed - set(log.vacuum(dry_run=True))  # the table's retention: the settings'
    oldest = time.time() - retention
    return {
        path
        for path in stored - current - recently_removed
        if not _hidden(path) and fs.modified(f"{root}/{path}").timestamp() < oldest
    }


def _vacuum(
    spark: SparkSession, table: str, log: deltalake.DeltaTable, retention: float, deletable: set[str]
) -> set[str]:
    """Delete the ``deletable`` files of the table; the table's deletable files left.

    ``VACUUM ... LITE`` deletes the files the log's commits record removed, without listing the table
    (which, in an object store of many files, is what a full VACUUM spends its time on; its listing's
    tasks: infra.spark.conf). A full VACUUM runs only if LITE left some: files a
    failed write left behind, which no commit names, or when Delta refuses LITE because the log was
    trimmed (``delta_log_retention_days``) past the last LITE's commit: then it refuses for good, as a
    full VACUUM does not record where LITE may go on from.
    """
    try:
        spark.sql(f"VACUUM {_sql(table)} LITE")
    except Exception as error:  # a Py4JJavaError on a classic session, a Spark Connect error over Connect
        if "DELTA_CANNOT_VACUUM_LITE" not in str(error):
            raise
    else:
        left = _deletable(table, log, retention)
        if not left & deletable:  # what the retention let go since is the next run's
            return left
    spark.sql(f"VACUUM {_sql(table)}")
    return _deletable(table, log, retention)


def vacuum(spark: SparkSession, settings: Deployment) -> dict[str, int]:
    """Set every table's retentions from the settings, then delete the files no version within the
    retention reads, in the tables that have some; per table, how many files went.

    VACUUM takes no ``RETAIN`` clause: Delta applies the table's own retention (it ignores any other but
    0 hours), and its check against short retentions (``retentionDurationCheck``) only compares such a
    clause with the property, so a retention below a week needs no lifting of that check.
    """
    properties, retention = delta.retention_properties(settings), settings.vacuum_retention_hours * 3_600
    done = {}
    for table in tables(settings):
        log = opened(table)  # None: a folder without a first commit (being created)
        if log is None:
            continue
        _retain(spark, table, log, properties)
        deletable = _deletable(table, log, retention)
        if not deletable:
            continue
        gone = len(deletable - _vacuum(spark, table, log, retention, deletable))
        if gone:
            done[_name(settings, table)] = gone
    return done


def trim_logs(settings: Deployment) -> int:
    """Delete Airflow's task and parsing logs older than the retention; how many files went."""
    oldest = time.time() - settings.log_retention_days * 86_400
    old = [
        path
        for folder in (task_logs(settings), parsing_logs(settings))
        for path in folder.rglob("*")
        if path.is_file() and path.stat().st_mtime < oldest
    ]
    for path in old:
        path.unlink()
    return len(old)
