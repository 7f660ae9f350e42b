"""One pass per micro-batch of the events topic: parse once, land, fold into every view on the driver.

The speed layer's one streaming query (Kafka ``events`` -> ``foreachBatch``) calls a :class:`Fold`
with each micro-batch ``n``:

1. Spark parses and validates every record once and collects them to the driver as raw_events rows
   and dead letters (one job), where they are counted. A dead record longer than ``driver_bytes`` is
   left out of the collect (the driver holds at most ``max_offsets_per_trigger`` records of at most
   ``max_payload_bytes`` or ``driver_bytes`` each): such a micro-batch's dead letters are parsed again
   from their Kafka records, at the same ingestion time, and written by Spark's Delta writer;
2. the *new* events: the first copy of each valid event that is not late (older than the watermark)
   and not seen in an earlier micro-batch (:mod:`speed_layer.state`);
3. each speed view's partial aggregates of the new events, with the state the view needs (the events
   a click may still follow, the sessions a new event may extend or join: a grown session is
   retracted and added again, so open sessions show and grow): SQL compiled from the view
   (:mod:`views.sql`), run by the driver's DuckDB over the state it keeps there, two views at a time;
4. the commits, each skipped if micro-batch ``n`` of this query was committed there before
   (:class:`infra.delta.BatchAppends`), by delta-rs from the driver: dead_letters and late_events
   (while the views are folded) and the partials of every view in one commit to speed_partials, side
   by side; then raw_events, last. Their small files are packed as they gather
   (:mod:`speed_layer.packing`), in a thread of their own.

A micro-batch's fixed cost is then one Spark job and milliseconds of DuckDB, where folding six views
in Spark took some twenty jobs and thousands of calls into its JVM to plan them. Landing alone (no
speed views) is the same pass without steps 2 and 3.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime

import deltalake
import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra import delta, processes
from infra.deployment import Deployment
from lake import sketches
from speed_layer import late_events, packing, state
from views import compile, events, sql, tables
from views.model import Session, View

#: A dead record of up to this many bytes (more than Kafka takes by default) is collected with its
#: micro-batch; a longer one is parsed again, and the micro-batch's dead letters written, by Spark
#: (``Fold(driver_bytes=...)``).
DRIVER_BYTES = 16 * 2**20
#: Views folded at once (each on a cursor of the fold's DuckDB).
VIEW_THREADS = 2


class Fold:
    """The speed layer's work on one micro-batch, and the state it keeps between them."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Deployment,
        views: list[View],
        app_id: str,
        driver_bytes: int = DRIVER_BYTES,
    ) -> None:
        self.settings, self.views, self.driver_bytes = settings, views, driver_bytes
        self.appends = delta.BatchAppends(app_id)
        self.packer = packing.Packer()
        self.source = settings.source
        self.db = duckdb.connect()
        self.db.execute("SET TimeZone = 'UTC'")
        sketches.sketch_functions(self.db)
        #: A cursor per view, and threads to fold the views side by side.
        self.cursors = [self.db.cursor() for _ in views]
        self.pool = ThreadPoolExecutor(VIEW_THREADS, "fold-views")
        self.state = state.restore(
            self.db, tables.RAW_EVENTS.path(settings), self.source.columns, views, state.duration(settings.watermark)
        )
        empty = events.parse(
            spark.createDataFrame([], events.KAFKA_RECORD),
            self.source,
            settings.max_payload_bytes,
            settings.future_horizon_seconds,
        )
        self.partials_schema = _partials_schema(spark, settings, views, empty) if views else None
        if self.partials_schema is not None:  # made with its properties (and given them) before its first commit
            delta.ensure(
                tables.SPEED_PARTIALS.path(settings),
                self.partials_schema,
                tables.SPEED_PARTIALS.partition_by,
                {**dict(tables.SPEED_PARTIALS.properties), **delta.retention_properties(settings)},
            )
        self.dead_schema = delta.arrow_schema(events.dead_letters(empty).schema)
        self.dimensions: dict[str, deltalake.DeltaTable] = {}
        #: Seconds per step of the last micro-batch; counts of records, dead letters and late events so far;
        #: what the state held after it (:meth:`speed_layer.state.State.held`).
        self.timings: dict[str, float] = {}
        self.held: dict[str, int] = {}
        self.totals = {"records": 0, "dead_letters": 0, "late_events": 0}

    def __call__(self, records: DataFrame, batch_id: int) -> None:
        steps: dict[str, float] = {}
        counted = self._fold(records, batch_id, steps)
        with timed(steps, "keep state"):
            self.state.advance(counted.newest)
            self.held = self.state.held() if self.views else {}
        with timed(steps, "give back freed"):
            processes.give_back_freed()
        self.timings = steps
        for name, count in (
            ("records", counted.total),
            ("dead_letters", counted.dead),
            ("late_events", counted.behind),
        ):
            self.totals[name] += count

    def _parse(self, records: DataFrame, ingested_at: datetime) -> DataFrame:
        return events.parse(
            records, self.source, self.settings.max_payload_bytes, self.settings.future_horizon_seconds, ingested_at
        )

    def _fold(self, records: DataFrame, batch_id: int, steps: dict[str, float]) -> late_events.Tally:
        """Land ``records`` and fold their new events into every view."""
        with timed(steps, "ledger"):
            finals = late_events.finals(self.settings, self.views) if self.views else {}
        with timed(steps, "parse"):
            ingested_at = datetime.now(UTC)
            built = events.collected(self._parse(records, ingested_at), self.source, self.driver_bytes)
        with timed(steps, "collect"):
            rows = delta.to_arrow(built)
        with timed(steps, "tally"):
            counted = late_events.tallied(rows, self.state.watermark)
            late = late_events.count(counted, self.views, finals, batch_id)
        with timed(steps, "dead letters"):
            dead = self._dead_letters(records, rows, ingested_at) if counted.dead else None
        side = [
            (dead, tables.DEAD_LETTERS) if dead is not None else None,
            (late, tables.LATE_EVENTS) if late.num_rows else None,
        ]
        landed = rows.filter(pc.is_null(rows["reason"])).drop_columns(["reason", "size", "raw"])
        with ThreadPoolExecutor(3) as pool:  # independent commits overlap the views and one another;
            # raw_events goes last
            done: list[Future[object]] = [
                pool.submit(self._commit, steps, batch_id, *write) for write in filter(None, side)
            ]
            if self.views:
                with timed(steps, "dedupe"):
                    self._new(landed)
                done.append(pool.submit(self._commit, steps, batch_id, self._partials(steps), tables.SPEED_PARTIALS))
            for commit in done:
                commit.result()
        self._commit(steps, batch_id, landed, tables.RAW_EVENTS)
        self.packer.pack_if_due()
        if not self.views:
            return counted
        with timed(steps, "keep state"):
            self.state.remember()
            for view in self.views:
                if isinstance(view.window, Session):
                    self.state.grow_sessions(view)
        return counted

    def _dead_letters(self, records: DataFrame, rows: pa.Table, ingested_at: datetime) -> pa.Table | DataFrame:
        """The dead letters of a micro-batch's ``records``, from its collected ``rows``; with Spark's help
        if some were too long to collect: those are parsed again at ``ingested_at``, which gives them the
        same reasons."""
        dead = rows.filter(pc.is_valid(rows["reason"]))
        letters = _conformed(
            dead.select(["topic", "partition", "offset", "kafka_timestamp", "key", "raw", "reason"])
            .append_column("dead_lettered_at", dead["ingested_at"])
            .append_column("dead_letter_date", pc.cast(dead["ingested_at"], pa.date32())),
            self.dead_schema,
        )
        too_long = pc.fill_null(pc.greater(dead["size"], self.driver_bytes), False)  # no value: no size
        if not pc.any(too_long).as_py():
            return letters
        again = self._parse(records.where(F.length("value") > self.driver_bytes), ingested_at)
        return records.sparkSession.createDataFrame(letters.filter(pc.invert(too_long))).unionByName(
            events.dead_letters(again)
        )

    def _commit(self, steps: dict[str, float], batch_id: int, rows: DataFrame | pa.Table, table: tables.Table) -> None:
        """Append ``rows`` to ``table`` unless this micro-batch was committed there: rows in the driver
        (Arrow) by delta-rs, a DataFrame by Spark's Delta writer. Timed."""
        path = table.path(self.settings)
        with timed(steps, f"commit {table.name}"):
            appended = self.appends.append(rows, path, batch_id, table.partition_by, table.writer())
        if appended and isinstance(rows, pa.Table):
            self.packer.appended(path, table, rows)

    def _new(self, landed: pa.Table) -> None:
        """The first copy of each event of ``landed`` that is not late and was not seen before, as the
        table :data:`views.sql.NEW`."""
        order = ", ".join(map(sql.quoted, compile.RECEIPT_ORDER))
        firsts = (
            f"SELECT {', '.join(self.source.columns)} FROM landed WHERE event_time >= ? OR ? IS NULL "
            f"QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {order}) = 1"
        )
        self.db.register("landed", landed)
        watermark = self.state.watermark
        # the ids seen before are found by probing the state's keys with the micro-batch's (a semi join
        # hashes its small side), not by hashing every key it holds for the anti join, each micro-batch
        landed_key = state.key("event_id")
        seen = f"SELECT event_key FROM {sql.SEEN} WHERE event_key IN (SELECT {landed_key} FROM landed)"
        self.db.execute(
            f"CREATE OR REPLACE TABLE {sql.NEW} AS SELECT * FROM ({firsts}) WHERE {landed_key} NOT IN ({seen})",
            [watermark, watermark],
        )
        self.db.unregister("landed")

    def _partials(self, steps: dict[str, float]) -> pa.Table:
        """Every view's partials of the new events, as rows of the partials table: the views side by side,
        each on a cursor of the fold's database (a small micro-batch's queries each keep about one core
        busy); each view timed."""
        current = {}
        for table in {name for view in self.views for name in compile.dimension_tables(view)}:
            if table in self.dimensions:
                self.dimensions[table].update_incremental()
            else:
                self.dimensions[table] = deltalake.DeltaTable(self.settings.table(table))
            current[sql.dimension(table)] = (
                self.dimensions[table].to_pyarrow_dataset().filter(ds.field("valid_to").is_null())
            )

        def partials(view: View, cursor: duckdb.DuckDBPyConnection) -> pa.Table:
            with timed(steps, f"view {view.name}"):
                for name, dimension in current.items():
                    cursor.register(name, dimension)
                for table, made in sql.made_first(view):
                    cursor.execute(f"CREATE OR REPLACE TABLE {table} AS {made}")
                return cursor.sql(sql.partials(view)).to_arrow_table()

        rows = list(self.pool.map(partials, self.views, self.cursors))
        return _conformed(pa.concat_tables(rows, promote_options="permissive"), self.partials_schema)


def _partials_schema(spark: SparkSession, settings: Deployment, views: list[View], empty: DataFrame) -> pa.Schema:
    """The partials table's columns for ``views``, as Spark types them (no Spark job: plans of no rows
    from ``empty``, a parse of none, and of empty dimensions of their tables' columns; Spark's own read of
    a Delta table, the first in a new JVM, would take 3 s of the speed layer's start)."""
    none = events.landed(empty, settings.source)
    dimensions = {
        name: spark.createDataFrame(tables.columns(settings.table(name)).empty_table())
        for view in views
        for name in compile.dimension_tables(view)
    }
    packed = [
        compile.packed(
            view,
            compile.aggregate(
                view, compile.enrich(view, compile.prepare(view, none), dimensions, as_of=False), exact=False
            ),
        )
        for view in views
    ]
    union = packed[0]
    for other in packed[1:]:
        union = union.unionByName(other, allowMissingColumns=True)
    return delta.arrow_schema(union.schema)


def _conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with ``schema``'s columns, in its order and types (a column it lacks: nulls)."""
    return pa.table(
        [rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in schema],
        schema=schema,
    )


@contextmanager
def timed(steps: dict[str, float], step: str) -> Iterator[None]:
    """Add the block's seconds to ``steps[step]``."""
    began = time.perf_counter()
    yield
    steps[step] = round(steps.get(step, 0) + time.perf_counter() - began, 3)
