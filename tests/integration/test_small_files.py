"""Many small micro-batch appends do not pile up small files: Delta's auto compaction folds them
(from 25 small files on, as infra/spark.py sets it)."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from infra import delta

pytestmark = pytest.mark.integration


def test_forty_micro_batches_leave_a_handful_of_files(spark, tables):
    path = tables.table("raw_events")
    appends = delta.BatchAppends("landing-test")
    for batch_id in range(40):
        appends.append(spark.range(batch_id * 10, batch_id * 10 + 10), path, batch_id)
    table = DeltaTable(path)
    assert table.to_pyarrow_table().num_rows == 400
    assert len(table.file_uris()) <= 16
