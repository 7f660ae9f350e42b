"""Maintenance on real Delta tables: OPTIMIZE rewrites small files and changes no row; VACUUM keeps
every file a version within the retention reads (time travel works) and deletes the rest; the
retentions are the tables' properties, from the settings; a table with nothing to do gets no commit."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from batch_layer import maintenance

pytestmark = pytest.mark.integration


def _rows(spark, path: str, **options) -> list[int]:
    return sorted(r.id for r in spark.read.format("delta").options(**options).load(path).collect())


def _append(spark, path: str, batches: int) -> None:
    """``batches`` appends of ten ids each (a micro-batch's small file each)."""
    for i in range(batches):
        spark.range(i * 10, i * 10 + 10).write.format("delta").mode("append").save(path)


def test_optimize_then_vacuum_within_and_past_the_retention(spark, tables):
    path = tables.table("late_events")
    _append(spark, path, 5)

    assert maintenance.optimize(spark, tables) == {"late_events": 5}
    assert _rows(spark, path) == list(range(50))
    assert maintenance.optimize(spark, tables) == {}  # nothing small left

    assert maintenance.vacuum(spark, tables) == {}  # a week's versions read them all
    assert _rows(spark, path, versionAsOf=2) == list(range(30))
    assert maintenance.vacuum(spark, dataclasses.replace(tables, vacuum_retention_hours=0)) == {"late_events": 5}
    assert _rows(spark, path) == list(range(50))


def test_a_table_with_nothing_to_do_gets_no_commit(spark, tables):
    one_file, one_per_partition, compacted = (tables.table(n) for n in ("dead_letters", "raw_events", "late_events"))
    spark.range(10).write.format("delta").save(one_file)
    (
        spark.range(10)
        .selectExpr("id", "timestamp_seconds(id % 2) AS hour")  # folders named with ' ' and ':'
        .write.format("delta")
        .partitionBy("hour")
        .save(one_per_partition)
    )
    _append(spark, compacted, 2)
    settings = dataclasses.replace(tables, vacuum_retention_hours=0)  # any file the newest version does not read may go
    assert maintenance.optimize(spark, settings) == {"late_events": 2}
    assert maintenance.vacuum(spark, settings) == {"late_events": 2}  # and sets the retentions
    versions = {path: DeltaTable(path).version() for path in (one_file, one_per_partition, compacted)}

    assert maintenance.optimize(spark, settings) == {}
    assert maintenance.vacuum(spark, settings) == {}
    assert {path: DeltaTable(path).version() for path in versions} == versions


def test_vacuum_deletes_exactly_the_files_removed_longer_ago_than_the_retention(spark, tables):
    path, retention = tables.table("late_events"), 15  # seconds
    _append(spark, path, 3)
    assert maintenance.optimize(spark, tables) == {"late_events": 3}  # version 3: removes three files
    time.sleep(retention + 1)
    spark.range(100, 110).write.format("delta").mode("overwrite").save(path)  # version 4: removes the compacted one

    settings = dataclasses.replace(tables, vacuum_retention_hours=retention / 3600)
    assert maintenance.vacuum(spark, settings) == {"late_events": 3}
    assert _rows(spark, path) == list(range(100, 110))
    # Spark refuses to time travel further back than the retention: delta-rs reads the versions' files
    assert sorted(DeltaTable(path, version=3).to_pyarrow_table()["id"].to_pylist()) == list(range(30))
    with pytest.raises(Exception, match=r"(?i)not found"):
        DeltaTable(path, version=2).to_pyarrow_table()  # its three files were removed before the retention


def test_retentions_are_set_on_every_table_from_the_settings(spark, tables):
    paths = [tables.table(name) for name in ("raw_events", "batch/page_views_per_minute")]
    for path in paths:
        spark.range(3).write.format("delta").save(path)
    settings = dataclasses.replace(tables, vacuum_retention_hours=36, delta_log_retention_days=10)
    maintenance.vacuum(spark, settings)
    for path in paths:
        configuration = DeltaTable(path).metadata().configuration
        assert configuration["delta.deletedFileRetentionDuration"] == "interval 36 hours"
        assert configuration["delta.logRetentionDuration"] == "interval 10 days"


@pytest.mark.slow
def test_a_table_whose_log_was_trimmed_is_vacuumed_too(spark, tables):
    """Delta refuses VACUUM LITE once the log's first commits are gone (log retention): a full VACUUM
    deletes the files all the same."""
    path = tables.table("late_events")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    _append(spark, path, 4)  # a checkpoint at version 2 and at version 4
    log = Path(path.removeprefix("file://")) / "_delta_log"
    for commit in ("00000000000000000000", "00000000000000000001"):  # what Delta's log cleanup would delete
        for trimmed in log.glob(f"*{commit}.*"):
            trimmed.unlink()
    assert maintenance.optimize(spark, tables) == {"late_events": 4}
    assert maintenance.vacuum(spark, dataclasses.replace(tables, vacuum_retention_hours=0)) == {"late_events": 4}
    assert _rows(spark, path) == list(range(40))
