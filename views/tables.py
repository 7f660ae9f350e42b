"""The table catalogue: every Delta table lambdalake keeps, with its partitioning, its schema (or the
declaration it is derived from) and, for a table a stream writes, the stream's checkpoint. The layers
name their tables through it, and open one's log or read a small one (delta-rs), read one into Spark or
append to one of fixed columns through its :class:`Table`; ``Deployment.table`` says where a name is stored.
Below it, the functions that read any Delta table by its path with delta-rs (whether it exists, its log,
its columns, its files, its rows as an Arrow dataset), for the tables the catalogue names and the
versions of views' batch tables alike; ``infra.delta`` writes them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
import pyarrow.dataset as ds
import tenacity
from deltalake import ColumnProperties, DeltaTable, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from views.source import Changelog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from infra.deployment import Deployment


@dataclass(frozen=True)
class Table:
    name: str
    description: str
    partition_by: tuple[str, ...] = ()
    #: The columns, where the platform fixes them; None where a declaration does (see ``description``).
    schema: pa.Schema | None = None
    #: The checkpoint (under the deployment's ``checkpoints``) of the stream that appends to it.
    checkpoint: str | None = None
    #: Delta table properties it is created with.
    properties: tuple[tuple[str, str], ...] = ()
    #: Columns that hold a value of their own in nearly every row: the driver writes them without a
    #: dictionary, which Parquet's writer would fill and then give up on, page after page.
    distinct: tuple[str, ...] = ()

    def writer(self) -> WriterProperties:
        """How delta-rs writes its files: :func:`writer_properties` of its :attr:`distinct` columns."""
        return writer_properties(self.distinct)

    def path(self, settings: Deployment) -> str:
        """Where ``settings``' deployment stores it."""
        return settings.table(self.name)

    def exists(self, settings: Deployment) -> bool:
        """:func:`exists` at its :meth:`path`."""
        return exists(self.path(settings))

    def opened(self, settings: Deployment) -> DeltaTable | None:
        """:func:`opened` at its :meth:`path`."""
        return opened(self.path(settings))

    def rows(self, settings: Deployment, columns: list[str] | None = None) -> pa.Table | None:
        """Its rows now (``columns`` of them), read with delta-rs (no Spark job); None if it was never written."""
        table = self.opened(settings)
        return None if table is None else table.to_pyarrow_table(columns=columns)

    def read(self, spark: SparkSession, settings: Deployment) -> DataFrame:
        """Its rows as a Spark DataFrame of ``spark``'s."""
        return spark.read.format("delta").load(self.path(settings))

    def append(self, settings: Deployment, rows: list[dict] | list[tuple]) -> None:
        """Append ``rows`` (dicts by column, or tuples in the columns' order) in one commit with delta-rs,
        making the table if there is none; for a table whose :attr:`schema` the platform fixes."""
        if self.schema is None:
            raise ValueError(f"{self.name}: a declaration makes its columns; append to it with Spark")
        named = [row if isinstance(row, dict) else dict(zip(self.schema.names, row, strict=True)) for row in rows]
        data = pa.Table.from_pylist(named, self.schema)
        # the first appends make the table: of two at once (a recompute's views), one loses and goes again
        retried(lambda: write_deltalake(self.path(settings), data, mode="append"))

    @property
    def stream_checkpoint(self) -> str:
        """:attr:`checkpoint`, for a table a stream appends to (another: ValueError)."""
        if self.checkpoint is None:
            raise ValueError(f"no stream appends to {self.name}")
        return self.checkpoint


R = TypeVar("R")
#: Spark's Delta errors of a lost race (two first writes to a new table race on its protocol and metadata).
_RACES = ("DELTA_CONCURRENT", "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED")


def _conflicted(error: BaseException) -> bool:
    """Whether ``error`` is a lost race between two commits (Spark's Delta: :data:`_RACES`; delta-rs:
    CommitFailedError), which a new attempt on the newer version wins."""
    return isinstance(error, CommitFailedError) or any(race in str(error) for race in _RACES)


def retried(commit: Callable[[], R]) -> R:
    """Run ``commit`` (an idempotent write: a ``replaceWhere`` of some days, an upsert) again while it
    loses a race with a concurrent commit to the same table; a backfill's runs in flight write the same
    tables, each its own days, and Delta's optimistic concurrency lets one of two win."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(_conflicted),
        stop=tenacity.stop_after_attempt(8),
        wait=tenacity.wait_random(0.1, 1.0),
        reraise=True,
    )(commit)


def writer_properties(distinct: tuple[str, ...] = ()) -> WriterProperties:
    """How delta-rs writes a table's files: Snappy, as it does by default, the ``distinct`` columns
    without a dictionary."""
    plain = ColumnProperties(dictionary_enabled=False)
    return WriterProperties(compression="SNAPPY", column_properties=dict.fromkeys(distinct, plain) or None)


def exists(path: str) -> bool:
    """Whether a Delta table is at ``path`` (a folder or URI; delta-rs reads its log, no Spark job)."""
    return DeltaTable.is_deltatable(path)


def opened(path: str) -> DeltaTable | None:
    """The Delta table at ``path`` (a folder or URI) as delta-rs reads its log (no Spark job); None if
    no commit was ever made there (or its first is under way)."""
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def columns(path: str) -> pa.Schema:
    """The columns of the Delta table at ``path`` as its log declares them (delta-rs, no Spark job)."""
    return pa.schema(DeltaTable(path).schema().to_arrow())


def files(path: str) -> pa.Table:
    """The files of the current version of the Delta table at ``path``, a row each, from its log: path,
    size, partition values (``partition.<column>``) and statistics (``num_records``, ``min.<column>``,
    ``max.<column>``; delta-rs, no Spark job)."""
    return pa.table(DeltaTable(path).get_add_actions(flatten=True))


def dataset(path: str, partition: tuple[str, object] | None = None) -> ds.Dataset:
    """The current version of the Delta table at ``path`` as an Arrow dataset, read as it is scanned
    (delta-rs, no Spark job); only the files of one ``partition`` (column, value) if given."""
    where = None if partition is None else [(partition[0], "=", partition[1])]
    return DeltaTable(path).to_pyarrow_dataset(file_pruning_predicate=where)


_UTC = pa.timestamp("us", "UTC")

#: raw_events keeps file statistics (min, max, nulls) on its times only: they are what a file's events share
#: (a micro-batch's), where ids, keys and payloads span every file; statistics on every column cost
#: landing a quarter of each commit.
RAW_EVENTS = Table(
    "raw_events",
    "every valid event as landed, resent copies included; columns: the domain's source (views.events.landed)",
    ("event_date",),
    checkpoint="landing",
    properties=(("delta.dataSkippingStatsColumns", "event_time,ingested_at"),),
    # a micro-batch of 36,000 events: 0.14-0.19 s -> 0.08-0.12 s a commit, 5.6 -> 5.5 MB
    distinct=("event_id", "event_time", "kafka_timestamp", "offset", "key", "payload"),
)
DEAD_LETTERS = Table(
    "dead_letters",
    "every record that failed validation, its raw bytes and the reason (views.events.dead_letters)",
    ("dead_letter_date",),
    checkpoint="landing",
)
LATE_EVENTS = Table(
    "late_events",
    "per view and event day, the events the speed layer left to batch",
    schema=pa.schema(
        [
            pa.field("view", pa.string(), False),
            pa.field("day", pa.date32(), False),
            pa.field("events", pa.int64(), False),
            pa.field("received_at", _UTC, False),
            pa.field("batch_id", pa.int64(), False),
            pa.field("first_event", _UTC),
        ]
    ),
    checkpoint="landing",
)
SPEED_PARTIALS = Table(
    "speed_partials",
    "the speed views' mergeable partial aggregates: a row per micro-batch, "
    "window and key, the states of view v in struct column v (views.compile.packed), partitioned "
    "by view and the hour its windows start",
    ("view", "window_hour"),
    checkpoint="landing",
    # row counts only: readers skip its files by partition, and the statistics of every
    # view's struct fields made each of delta-rs' appends cost 4x more per file the table has
    properties=(("delta.dataSkippingNumIndexedCols", "0"),),
)
SERVING_STATE = Table(
    "serving_state",
    "the ledger: per view, the days batch has made final",
    schema=pa.schema(
        [
            pa.field("view", pa.string(), False),
            pa.field("day", pa.date32(), False),
            pa.field("rows", pa.int64(), False),
            pa.field("computed_at", _UTC, False),
            pa.field("open_until", _UTC),
        ]
    ),
)
SERVING_VERSIONS = Table(
    "serving_versions",
    "per view, the batch table version the serving layer reads",
    schema=pa.schema(
        [
            pa.field("view", pa.string(), False),
            pa.field("table", pa.string(), False),
            pa.field("switched_at", _UTC, False),
            pa.field("previous_table", pa.string()),
        ]
    ),
)
QUALITY_RESULTS = Table(
    "quality_results",
    "each Great Expectations check's result",
    schema=pa.schema(
        [
            ("checked_at", _UTC),
            ("suite", pa.string()),
            ("first_day", pa.date32()),
            ("last_day", pa.date32()),
            ("expectation", pa.string()),
            ("severity", pa.string()),
            ("success", pa.bool_()),
            ("observed", pa.string()),
        ]
    ),
)
CORRECTIONS = Table(
    "corrections",
    "per recompute, how far the speed rows were from batch",
    schema=pa.schema(
        [
            ("computed_at", _UTC),
            ("view", pa.string()),
            ("first_day", pa.date32()),
            ("last_day", pa.date32()),
            ("measure", pa.string()),
            ("speed_windows", pa.int64()),
            ("batch_windows", pa.int64()),
            ("added", pa.int64()),
            ("removed", pa.int64()),
            ("changed", pa.int64()),
            ("difference", pa.float64()),
            ("relative_difference", pa.float64()),
        ]
    ),
)
DEAD_LETTER_REPLAYS = Table(
    "dead_letter_replays",
    "the dead letters sent again, corrected or as they were",
    schema=pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("replayed_at", _UTC),
            ("corrected", pa.bool_()),
        ]
    ),
)
#: The tables every deployment has, whatever its domain, in the order the serving layer reads them: the
#: ledger before the version pointers (lake.versions), the speed partials last.
PLATFORM = (
    RAW_EVENTS,
    DEAD_LETTERS,
    LATE_EVENTS,
    SERVING_STATE,
    SERVING_VERSIONS,
    DEAD_LETTER_REPLAYS,
    QUALITY_RESULTS,
    CORRECTIONS,
    SPEED_PARTIALS,
)


#: The folder of the views' batch tables.
BATCH = "batch"


def batch(view: str, label: str | None = None) -> Table:
    """A version of view ``view``'s batch table: the first, or the one labelled ``label``."""
    name = f"{BATCH}/{view}" if label is None else f"{BATCH}/{view}@{label}"
    return Table(name, f"view {view}'s final rows, as batch computed them (views.compile)")


def changes(dimension: Changelog) -> Table:
    """A dimension's changelog as landed (views.changelog.changes)."""
    return Table(dimension.changes, f"every change to dimension {dimension.name}", checkpoint=dimension.name)


def dimension(declared: Changelog) -> Table:
    """A dimension's current rows, rebuilt from its changes (views.changelog.dimension)."""
    return Table(declared.name, declared.description, checkpoint=declared.name)
