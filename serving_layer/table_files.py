"""A Delta table's current files, as the query engine (serving_layer.engine) follows them version by
version through the table's log, with the files each change added rows in."""

from __future__ import annotations

import json
import os
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as fs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from infra import storage

#: A Delta log untouched for this long is trusted unchanged while its folder's stamp stays the same (a
#: file system may stamp two changes within one clock tick alike: Linux's coarse clock ticks every 1-10
#: ms). Longer, and a log that changes every second (a micro-batch's) would be read again at each query.
SETTLED_NS = 50_000_000
#: How many changes of a table the engine remembers (5 minutes of micro-batches a second; 15 KB each): a
#: view's speed rows are brought up to date with the files that the partials' changes since they were
#: made added if it remembers them all, else made anew from all the partials.
CHANGES = 300


def _appended(
    kept: list[ds.Fragment] | None, schema: pa.Schema | None, after: ds.FileSystemDataset
) -> list[ds.Fragment] | None:
    """The files that dataset ``after`` adds to the files ``kept`` (of ``schema``), if it only adds files
    to them (as a micro-batch's commit does) with the same schema; else None."""
    if kept is None or schema != after.schema:
        return None
    paths = {fragment.path for fragment in kept}
    fragments = list(after.get_fragments())
    if not paths <= {fragment.path for fragment in fragments}:
        return None
    return [fragment for fragment in fragments if fragment.path not in paths]


def _partition_value(text: str, kind: pa.DataType) -> pa.Scalar:
    """A partition value from Delta's text of it: a timestamp's is in UTC without an offset (delta-rs)
    or in ISO 8601 with one (Spark)."""
    if not pa.types.is_timestamp(kind):
        return pa.scalar(text).cast(kind)
    at = datetime.fromisoformat(text)
    at = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
    return pa.scalar(at if kind.tz else at.replace(tzinfo=None), kind)


def guarantee(add: dict, schema: pa.Schema) -> ds.Expression:
    """What every row of a data file meets, from its Delta add action: its partition values
    (:func:`_partition_value`), and the range of each time, date and integer column its statistics give
    (a time's to the millisecond), so that a scan can skip the file."""
    expression = ds.scalar(True)
    for name, text in add["partitionValues"].items():
        kind = schema.field(name).type
        expression &= ds.field(name).is_null() if text is None else ds.field(name) == _partition_value(text, kind)
    stats = json.loads(add.get("stats") or "{}")
    low, high, nulls = (stats.get(key) or {} for key in ("minValues", "maxValues", "nullCount"))
    for name in low.keys() & high.keys() & set(schema.names):
        kind = schema.field(name).type
        if not (pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_integer(kind)):
            continue
        try:
            lowest, highest = pa.scalar(low[name]).cast(kind), pa.scalar(high[name]).cast(kind).as_py()
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # statistics of a form not foreseen: no range
            continue
        if pa.types.is_timestamp(kind):
            highest += timedelta(milliseconds=1)
        within = (ds.field(name) >= lowest) & (ds.field(name) <= pa.scalar(highest, kind))
        expression &= within if nulls.get(name) == 0 else within | ds.field(name).is_null()
    return expression


class TableFiles:
    """One Delta table, read again only when its log changed. Its files are kept as a list that a new
    version's commits extend, and made into an Arrow dataset only when one is asked for: a table that is
    copied into the database needs one only to be copied whole, and building one is the table's size
    (10 ms at 3,000 files), where a micro-batch's commit adds a few. A local table's files are read with
    Arrow's own file system: delta-rs' runs Python for each file opened, with the GIL held (a view's
    fold of 60 micro-batches took 117 ms through it, 87 ms without)."""

    def __init__(self, path: str):
        self.path = path
        self.stamp: tuple[int, int] | None = None  # the log folder's (inode, mtime in ns), when local
        self.table: DeltaTable | None = None
        self.version: int | None = None
        #: The current version's files (None: no version read), their schema and how they are read.
        self.fragments: list[ds.Fragment] | None = None
        self.schema: pa.Schema | None = None
        self._format: ds.FileFormat | None = None
        self._filesystem = None
        self._dataset: ds.FileSystemDataset | None = None
        #: The changes read, the last :data:`CHANGES`, and how many in all: each the files it added rows in,
        #: if it only added rows (its other files, if any, rearranged rows: Delta's ``dataChange`` false, as
        #: an OPTIMIZE and the speed layer's packing), else None.
        self.changes: deque[list[ds.Fragment] | None] = deque(maxlen=CHANGES)
        self.seen = 0

    @property
    def appended(self) -> list[ds.Fragment] | None:
        """The files the last change added rows in, if it only added rows."""
        return self.changes[-1] if self.changes else None

    @property
    def rearranged(self) -> bool:
        """Whether the last change only rearranged rows (it added none)."""
        return self.appended == []

    def added(self, since: int) -> list[ds.Fragment] | None:
        """The files that the changes after the first ``since`` added rows in, if they only added rows
        and are remembered; else None."""
        back = self.seen - since
        if back > len(self.changes):
            return None
        changes = list(self.changes)[len(self.changes) - back :]
        return None if None in changes else [fragment for change in changes for fragment in change or ()]

    def read_anew(self, fragments: list[ds.Fragment] | None = None) -> ds.FileSystemDataset:
        """The files ``fragments`` (default: the current version's) as a dataset of new fragments: a
        fragment once scanned keeps its file's Parquet metadata for as long as it lives (120 KB for a
        file of speed_partials), so the fragments the engine keeps must not be the ones it reads to copy
        a table or fold partials, which it reads once."""
        assert self.fragments is not None and self._format is not None  # only a table with data is read
        return ds.FileSystemDataset(
            [
                self._format.make_fragment(f.path, self._filesystem, partition_expression=f.partition_expression)
                for f in (self.fragments if fragments is None else fragments)
            ],
            self.schema,
            self._format,
            self._filesystem,
        )

    def _changed(self, change: list[ds.Fragment] | None) -> bool:
        self.changes.append(change)
        self.seen += 1
        return True

    @property
    def dataset(self) -> ds.FileSystemDataset | None:
        """The current version as an Arrow dataset (None if no version was read)."""
        if self._dataset is None and self.fragments is not None:
            self._dataset = ds.FileSystemDataset(self.fragments, self.schema, self._format, self._filesystem)
        return self._dataset

    def changed(self) -> bool:
        """Whether the table changed since the last call: a new version, or the table came or went.
        (A local table's Delta log folder is looked at first: while its stamp stays, nothing changed.)"""
        local, stamp = storage.local_path(self.path), None
        if local is not None:
            try:
                stat = os.stat(os.path.join(local, storage.LOG))
            except FileNotFoundError:
                return self.forget()
            stamp = (stat.st_ino, stat.st_mtime_ns)
            if stamp == self.stamp and time.time_ns() - stat.st_mtime_ns > SETTLED_NS:
                return False
            if self.version is not None and self.stamp is not None and stamp[0] == self.stamp[0]:
                read = storage.read_on(local, self.version)
                if read is not None:
                    self.stamp = stamp
                    return self._move(*read)
        try:
            if self.table is None or (stamp and self.stamp and stamp[0] != self.stamp[0]):
                self.table = DeltaTable(self.path)
            else:
                self.table.update_incremental()
        except TableNotFoundError:  # locally, a log without its first commit yet
            return False if local is not None else self.forget()
        self.stamp = stamp
        if self.table.version() == self.version:
            return False
        whole = self.table.to_pyarrow_dataset()
        if local is not None:
            files = fs.SubTreeFileSystem(os.path.abspath(local), fs.LocalFileSystem())
            whole = ds.FileSystemDataset(
                [
                    whole.format.make_fragment(f.path, files, partition_expression=f.partition_expression)
                    for f in whole.get_fragments()
                ],
                whole.schema,
                whole.format,
                files,
            )
        change = _appended(self.fragments, self.schema, whole)
        self.version, self.fragments, self._dataset = self.table.version(), list(whole.get_fragments()), whole
        self.schema, self._format, self._filesystem = whole.schema, whole.format, whole.filesystem
        return self._changed(change)

    def _move(self, version: int, adds: list[dict], removes: list[dict]) -> bool:
        """Move to ``version`` by adding the files of ``adds`` and dropping those of ``removes`` (Delta add
        and remove actions); whether that changed the table's files."""
        self.version = version
        if not adds and not removes:
            return False
        assert self.fragments is not None and self._format is not None  # read on from a version read before
        added = [
            self._format.make_fragment(
                unquote(add["path"]), self._filesystem, partition_expression=guarantee(add, self.schema)
            )
            for add in adds
        ]
        removed = {unquote(remove["path"]) for remove in removes}
        self.fragments = [fragment for fragment in [*self.fragments, *added] if fragment.path not in removed]
        self._dataset = None
        if any(remove.get("dataChange", True) for remove in removes):
            return self._changed(None)
        return self._changed(
            [fragment for fragment, add in zip(added, adds, strict=True) if add.get("dataChange", True)]
        )

    def committed_at(self) -> datetime | None:
        """When the version read was committed (None if none was): a local table's commit is read alone,
        where delta-rs would read the table's log again."""
        if self.version is None:
            return None
        local = storage.local_path(self.path)
        if local is not None:
            stamp = storage.committed_at(local, self.version)
        else:
            assert self.table is not None  # a remote table's versions are read with delta-rs
            stamp = max((c["timestamp"] / 1000 for c in self.table.history(1)), default=None)
        return None if stamp is None else datetime.fromtimestamp(stamp, UTC)

    def forget(self) -> bool:
        """Forget what was read (the next :meth:`changed` reads the table anew); whether there was data."""
        gone = self.fragments is not None
        self.stamp, self.table, self.version = None, None, None
        self.fragments, self.schema, self._format, self._filesystem, self._dataset = None, None, None, None, None
        return gone
