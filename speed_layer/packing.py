"""The speed layer packs the small files it appends while it runs.

Every micro-batch appends a file per partition it touches to each table it writes: raw_events gets
one per event day, speed_partials one per view and hour. A delta-rs append costs time in proportion
to the files its table has, because it lists them at every commit. The hourly maintenance packs them,
but an hour at a few thousand events a second leaves tens of thousands of files, and an append then
takes a second.

So once a table has gained :data:`PACK_FILES` files since it was last packed, a thread of the speed
layer compacts the partitions written since then with delta-rs' optimize. Files smaller than
:data:`PACK_BYTES` are packed into files of about that size, in their order. It is one commit that
changes no data (``dataChange`` false), so it does not conflict with the stream's appends or with
readers; it is made again if maintenance's OPTIMIZE, which packs them further later, or its
compaction of the closed hours commits first.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
from deltalake.table import FilterConjunctionType

from views import tables

log = logging.getLogger(__name__)

#: Files a table gains, counted as the partitions of its appends, before the speed layer packs them.
PACK_FILES = 200
#: The size of a packed file. Only smaller files are packed again, so packing rewrites a bounded
#: amount of data each time.
PACK_BYTES = 16 * 2**20


@dataclass
class _Written:
    """What the appends to a table added since it was last packed."""

    files: int = 0
    #: the values of the table's last partition column in those appends
    values: set[str] = field(default_factory=set)
    #: how its files are written (:meth:`views.tables.Table.writer`)
    writer: deltalake.WriterProperties = field(default_factory=tables.writer_properties)


class Packer:
    """Counts the files a speed layer's appends add to each table, and packs a table's new partitions
    in a background thread once it has gained ``files`` of them."""

    def __init__(self, files: int = PACK_FILES, target: int = PACK_BYTES) -> None:
        self.files, self.target = files, target
        self.written: dict[tuple[str, str | None], _Written] = defaultdict(_Written)
        self.pool = ThreadPoolExecutor(1, "pack")
        self.running: Future[None] | None = None

    def appended(self, path: str, table: tables.Table, rows: pa.Table) -> None:
        """Count ``rows``, just appended to ``table`` at ``path``: a file per partition."""
        column = table.partition_by[-1] if table.partition_by else None
        written = self.written[path, column]
        written.writer = table.writer()
        written.files += rows.group_by(list(table.partition_by)).aggregate([]).num_rows if column else 1
        if column:
            written.values |= {_partition_value(value) for value in pc.unique(rows[column]).to_pylist()}

    def pack_if_due(self) -> None:
        """Start packing every table that has gained enough files, unless packing is under way."""
        if self.running is not None:
            if not self.running.done():
                return
            if error := self.running.exception():
                log.warning("packing the speed layer's small files failed (maintenance packs them): %s", error)
        due = {key: written for key, written in self.written.items() if written.files >= self.files}
        for key in due:
            del self.written[key]
        self.running = self.pool.submit(self._pack, due) if due else None

    def _pack(self, due: dict[tuple[str, str | None], _Written]) -> None:
        for (path, column), written in due.items():
            where = [(column, "in", sorted(written.values))] if column else None
            metrics = tables.retried(partial(self._compact, path, where, written.writer))
            log.info("packed %d files of %s into %d", metrics["numFilesRemoved"], path, metrics["numFilesAdded"])

    def _compact(
        self, path: str, where: FilterConjunctionType | None, writer: deltalake.WriterProperties
    ) -> dict[str, Any]:
        return deltalake.DeltaTable(path).optimize.compact(
            partition_filters=where, target_size=self.target, max_concurrent_tasks=1, writer_properties=writer
        )


def _partition_value(value: object) -> str:
    """A partition value as Delta's log writes it (a time to the microsecond)."""
    return f"{value:%Y-%m-%d %H:%M:%S.%f}" if hasattr(value, "hour") else str(value)
