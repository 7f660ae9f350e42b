"""Maintenance on real Delta tables: OPTIMIZE rewrites small files and changes no row; VACUUM keeps
every file a version within the retention reads (time travel works) and deletes the rest."""

from __future__ import annotations

import dataclasses

import pytest

from batch_layer import maintenance

pytestmark = pytest.mark.integration


def test_optimize_then_vacuum_within_and_past_the_retention(spark, tables):
    path = tables.table("late_events")
    for i in range(5):  # five micro-batches: five small files
        spark.range(i * 10, i * 10 + 10).write.format("delta").mode("append").save(path)
    rows = lambda **options: sorted(r.id for r in spark.read.format("delta").options(**options).load(path).collect())  # noqa: E731

    assert maintenance.optimize(spark, tables) == {"late_events": 5}
    assert rows() == list(range(50))
    assert maintenance.optimize(spark, tables) == {}  # nothing small left

    assert maintenance.vacuum(spark, tables) == {}  # a week's versions read them all
    assert rows(versionAsOf=2) == list(range(30))
    assert maintenance.vacuum(spark, dataclasses.replace(tables, vacuum_retention_hours=0)) == {"late_events": 5}
    assert rows() == list(range(50))
