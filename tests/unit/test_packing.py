"""The speed layer packs the small files its appends leave, while it appends (speed_layer.packing)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import deltalake
import pyarrow as pa

from speed_layer.packing import Packer
from views import tables

HOUR = datetime(2026, 11, 28, 9, tzinfo=UTC)


def _partials(batch: int, hours: list[datetime]) -> pa.Table:
    """A micro-batch's rows of a partials-like table: one per view and hour."""
    views = ["a", "b"] * len(hours)
    return pa.table(
        {
            "view": views,
            "batch": pa.array([batch] * len(views), pa.int64()),
            "window_hour": pa.array([h for h in hours for _ in "ab"], pa.timestamp("us", "UTC")),
        }
    )


def _append(packer: Packer, path: str, rows: pa.Table) -> None:
    deltalake.write_deltalake(path, rows, mode="append", partition_by=list(tables.SPEED_PARTIALS.partition_by))
    packer.appended(path, tables.SPEED_PARTIALS, rows)
    packer.pack_if_due()


def _files(path: str, hour: datetime) -> int:
    actions = pa.table(deltalake.DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    return sum(a["partition.window_hour"] == hour for a in actions)


def test_the_partitions_written_are_packed_once_they_gathered_enough_files_and_no_row_changes(tmp_path):
    path = str(tmp_path / "speed_partials")
    packer = Packer(files=16)
    closed = HOUR - timedelta(hours=1)
    for batch in range(2):  # an hour written before the packer counted: not its to pack
        deltalake.write_deltalake(
            path, _partials(batch, [closed]), mode="append", partition_by=list(tables.SPEED_PARTIALS.partition_by)
        )
    for batch in range(2, 42):  # 4 files each: packed after every 4
        _append(packer, path, _partials(batch, [HOUR, HOUR + timedelta(hours=1)]))
        if packer.running:
            packer.running.result()

    table = deltalake.DeltaTable(path)
    assert sorted(table.to_pyarrow_table()["batch"].to_pylist()) == sorted(
        [0, 0, 1, 1] + [b for b in range(2, 42) for _ in range(4)]
    )
    assert [_files(path, h) for h in (closed, HOUR, HOUR + timedelta(hours=1))] == [4, 2, 2]
    packs = [c for c in table.history() if c["operation"] == "OPTIMIZE"]
    assert len(packs) == 10  # 160 files, 16 at a time
    log = tmp_path / "speed_partials" / "_delta_log" / f"{packs[0]['version']:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    assert {a[kind]["dataChange"] for a in actions for kind in ("add", "remove") if kind in a} == {False}
