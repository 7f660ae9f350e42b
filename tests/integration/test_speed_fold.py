"""The speed layer's state survives a restart exactly: a fold rebuilt from raw_events goes on as the
uninterrupted one would, after a clean stop, after a crash between the partials commit and the
raw_events commit, and when a fully committed micro-batch is replayed. Every view, including sessions
(taken back and grown) and the search -> click join."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable
from deltalake import write_deltalake

from batch_layer.stale import stale_days
from domains.clickstream import generator
from domains.sample import Mix
from infra.deployment import load
from infra.producer import Record
from speed_layer import packing, queries
from speed_layer.compact import compact
from speed_layer.fold import Fold
from tests.compare import merged_rows
from views import all_views, sql, timebase
from views import tables as catalog
from views.events import kafka_frame

pytestmark = pytest.mark.integration

CUTS = 5


@pytest.fixture(scope="module")
def records():
    start = timebase.day_start(datetime(2026, 6, 1).date())
    records = generator.generate(
        start,
        start + timedelta(hours=3),
        1200,
        seed=3,
        mix=Mix(late=0.05, duplicate=0.08, malformed=0.02, late_by=(12, 40)),
    )
    tombstone = Record(records[100].send_at, b"u1", None, "malformed")  # a record with no value at all
    return [*records[:100], tombstone, *records[100:]]


def _home(tmp_path_factory, deployment, name):
    home = tmp_path_factory.mktemp(name)
    (home / "settings.json").write_text((deployment.home / "settings.json").read_text())
    return load(home)


def _batches(spark, records):
    step = len(records) // CUTS + 1
    return [kafka_frame(spark, records[i : i + step]) for i in range(0, len(records), step)]


def _speed(settings):
    return {name: merged_rows(settings, view) for name, view in settings.views.items()}


@pytest.fixture(scope="module")
def folded(spark, deployment, tmp_path_factory, records):
    """A deployment whose speed layer folded every record without a restart."""
    settings = _home(tmp_path_factory, deployment, "fold-once")
    queries.ensure_tables(spark, settings)
    fold = Fold(spark, settings, list(settings.views.values()), "fold")
    for batch_id, batch in enumerate(_batches(spark, records)):
        fold(batch, batch_id)
    return settings


@pytest.fixture(scope="module")
def uninterrupted(folded):
    return _speed(folded)


def _restarted(spark, settings, records, before_restart: int, crash=None):
    """Fold the first ``before_restart`` micro-batches, ``crash`` the table state, then go on with a
    fold rebuilt from the tables, replaying micro-batch ``before_restart - 1``. Both folds commit their
    dead letters through Spark's Delta writer (every dead record too long to collect: parsed again),
    where the uninterrupted fold's go through delta-rs."""
    views = list(settings.views.values())
    queries.ensure_tables(spark, settings)
    batches = _batches(spark, records)
    fold = Fold(spark, settings, views, "fold", driver_bytes=0)
    for batch_id in range(before_restart):
        fold(batches[batch_id], batch_id)
    if crash:
        crash(settings)
    fold = Fold(spark, settings, views, "fold", driver_bytes=0)
    for batch_id in range(before_restart - 1, len(batches)):
        fold(batches[batch_id], batch_id)
    return _speed(settings)


def _same(speed: dict, other: dict) -> bool:
    """The same rows in every view, floats (sums of durations, added in another order) to rounding."""

    def close(value, expected) -> bool:
        return value == (pytest.approx(expected) if isinstance(value, float) else expected)

    return speed.keys() == other.keys() and all(
        rows.keys() == other[name].keys()
        and all(close(value, other[name][key][column]) for key, row in rows.items() for column, value in row.items())
        for name, rows in speed.items()
    )


def _lose_last_raw_events_commit(settings):
    """The process died after committing the partials of its last micro-batch, before raw_events."""
    from pyspark.sql import SparkSession

    table = DeltaTable.forPath(SparkSession.getActiveSession(), settings.table("raw_events"))
    table.restoreToVersion(table.history(2).collect()[-1]["version"])


@pytest.mark.parametrize("crash", [None, _lose_last_raw_events_commit], ids=["replayed", "crashed-before-raw-events"])
def test_a_fold_rebuilt_from_the_tables_goes_on_exactly(
    spark, deployment, tmp_path_factory, records, folded, uninterrupted, crash
):
    """A fold rebuilt from the tables after a replay or a crash goes on as the uninterrupted one: the same
    rows in every view, and the same dead letters, though it parses every dead record again (it has
    ``driver_bytes=0``)."""
    settings = _home(tmp_path_factory, deployment, "fold-restarted")
    restarted = _restarted(spark, settings, records, before_restart=3, crash=crash)
    assert _same(restarted, uninterrupted)
    assert _landed(spark, settings)["dead_letters"] == _landed(spark, folded)["dead_letters"]


def test_sessions_show_while_open_and_grow(spark, tables):
    """One user's events a minute apart in three micro-batches: the open session shows after the first
    and grows; events from another hour make it start earlier, moving it to that hour."""
    view = all_views()["sessions_hourly"]
    queries.ensure_tables(spark, tables)
    fold = Fold(spark, tables, [view], "sessions")
    start = datetime(2026, 6, 1, 10, 58, tzinfo=timebase.UTC)

    def event(i: int, minutes: int) -> Record:
        body = {
            "event_id": f"e{i}",
            "event_type": "page_view",
            "user_id": "u1",
            "session_id": "s1",
            "page": "/",
            "event_time": (start + timedelta(minutes=minutes)).isoformat(),
        }
        return Record(start, b"u1", json.dumps(body).encode(), "valid")

    seen = []
    for batch_id, minutes in enumerate([(3, 4), (5,), (-1,)]):  # 11:01, 11:02, then 11:03, then 10:57
        records = [event(len(seen) + i, m) for i, m in enumerate(minutes)]
        seen += records
        fold(kafka_frame(spark, records), batch_id)
        seen_rows = {k[0].hour: (r["sessions"], r["avg_events"]) for k, r in merged_rows(tables, view).items()}
        assert seen_rows == [{11: (1, 2.0)}, {11: (1, 3.0)}, {10: (1, 4.0)}][batch_id]


def test_compaction_folds_closed_hours_and_changes_no_merged_row(spark, folded, uninterrupted):
    partials = lambda: spark.read.format("delta").load(catalog.SPEED_PARTIALS.path(folded))  # noqa: E731
    before = partials().groupBy("view").count().collect()
    folded_hours = compact(spark, folded)
    assert folded_hours.get("page_views_per_minute", 0) >= 1 and "sessions_hourly" not in folded_hours
    after = {r["view"]: r["count"] for r in partials().groupBy("view").count().collect()}
    assert all(after[r["view"]] < r["count"] for r in before if r["view"] in folded_hours)
    assert _same(_speed(folded), uninterrupted)
    assert compact(spark, folded) == {}  # nothing left to fold


def test_a_fold_that_packs_its_files_as_it_goes_merges_to_the_same_rows(
    spark, deployment, tmp_path_factory, records, folded, uninterrupted
):
    """The partitions the fold writes, packed while it folds (speed_layer.packing), hold the same rows in
    fewer files."""
    settings = _home(tmp_path_factory, deployment, "packed")
    queries.ensure_tables(spark, settings)
    fold = Fold(spark, settings, list(settings.views.values()), "fold")
    fold.packer = packing.Packer(files=3)
    for batch_id, batch in enumerate(_batches(spark, records)):
        fold(batch, batch_id)
        if fold.packer.running:
            fold.packer.running.result()
    assert _same(_speed(settings), uninterrupted)
    for table in (catalog.RAW_EVENTS, catalog.SPEED_PARTIALS):
        packed, unpacked = table.opened(settings), table.opened(folded)
        assert "OPTIMIZE" in {commit["operation"] for commit in packed.history()}
        assert len(packed.file_uris()) < len(unpacked.file_uris()), table.name


def test_the_state_forgets_what_the_watermark_makes_useless(spark, tables, records):
    """However many micro-batches, the state keeps whole only the events a FollowedBy join reads, none
    older than the watermark minus the longest FollowedBy bound, the keys of every event down to the
    watermark only (a copy of an older one is late), and no session that an event at or after the
    watermark can no longer extend."""
    views = [all_views()[name] for name in ("sessions_hourly", "search_ctr_hourly")]
    queries.ensure_tables(spark, tables)
    fold = Fold(spark, tables, views, "forgets")
    for batch_id, batch in enumerate(_batches(spark, records)):
        fold(batch, batch_id)
    [kept] = fold.db.sql(f"SELECT count(*), min(event_time), list(DISTINCT event_type) FROM {sql.RECENT}").fetchall()
    [ids] = fold.db.sql(f"SELECT count(*), min(event_time) FROM {sql.SEEN}").fetchall()
    [[whole]] = fold.db.execute(
        f"SELECT count(*) FROM {sql.RECENT} WHERE event_time < ?", [fold.state.watermark]
    ).fetchall()
    [[opened, last]] = fold.db.sql(f"SELECT count(*), min(last) FROM {sql.open_sessions(views[0])}").fetchall()
    assert kept[0] > 0 and kept[1] >= fold.state.horizon and sorted(kept[2]) == ["click", "search"]
    assert ids[0] > 0 and ids[1] >= fold.state.watermark and kept[1] < fold.state.watermark
    assert opened > 0 and last >= fold.state.watermark - views[0].session.gap
    assert fold.state.horizon == fold.state.watermark - timedelta(minutes=30)
    held = fold.held  # what the health report says the state holds
    assert (held["events"], held["sessions"]) == (ids[0] + whole, opened) and held["bytes"] > 0


def test_events_that_can_change_a_final_day_are_left_to_batch(spark, tables):
    """Events that are not behind the watermark but fall on a day batch made final count as late for
    the views that day is final for, so that the late-data recompute corrects it; events of the day
    after a final day count only for a view whose windows reach them."""
    views = [all_views()[name] for name in ("page_views_per_minute", "active_users_hourly", "search_ctr_hourly")]
    queries.ensure_tables(spark, tables)
    start = datetime(2026, 6, 1, 10, tzinfo=timebase.UTC)
    midnight = start.replace(hour=0)
    write_deltalake(
        tables.table("serving_state"),
        pa.Table.from_pylist(
            [
                {"view": "page_views_per_minute", "day": start.date(), "rows": 1, "computed_at": start},
                {
                    "view": "search_ctr_hourly",
                    "day": (start - timebase.DAY).date(),
                    "rows": 1,
                    "computed_at": start,
                    "open_until": midnight + timedelta(minutes=30),
                },
            ],
            catalog.SERVING_STATE.schema,
        ),
    )
    records = generator.generate(
        start, start + timedelta(hours=1), 300, seed=4, mix=Mix(late=0, duplicate=0, malformed=0)
    )
    Fold(spark, tables, views, "final-days")(kafka_frame(spark, records), 0)
    counted = {
        (r.view, r.day): (r.events, timebase.utc(r.first_event))
        for r in spark.read.format("delta").load(tables.table("late_events")).collect()
    }
    page_views = [e for e in map(json.loads, (r.value for r in records)) if e["event_type"] == "page_view"]
    first = min(datetime.fromisoformat(e["event_time"]) for e in page_views)
    assert counted == {("page_views_per_minute", start.date()): (len(page_views), first)}
    assert stale_days(tables) == [start.date()]


def _landed(spark, settings) -> dict[str, Counter]:
    """raw_events and dead_letters rows, without the times they were landed at."""

    def rows(table, left_out):
        return Counter(map(tuple, spark.read.format("delta").load(table.path(settings)).drop(*left_out).collect()))

    return {
        "raw_events": rows(catalog.RAW_EVENTS, ("ingested_at",)),
        "dead_letters": rows(catalog.DEAD_LETTERS, ("dead_lettered_at", "dead_letter_date")),
    }


def test_landing_alone_lands_what_the_fold_with_views_lands_once(spark, deployment, tmp_path_factory, records, folded):
    """Without views, the fold lands the same raw_events (every copy) and dead_letters as the fold with
    every view; a replayed micro-batch adds nothing."""
    settings = _home(tmp_path_factory, deployment, "landing-alone")
    queries.ensure_tables(spark, settings)
    batches = _batches(spark, records)
    fold = Fold(spark, settings, [], "landing")
    for batch_id in range(3):
        fold(batches[batch_id], batch_id)
    fold = Fold(spark, settings, [], "landing")  # restarted: micro-batch 2 is replayed
    for batch_id in range(2, len(batches)):
        fold(batches[batch_id], batch_id)
    assert _landed(spark, settings) == _landed(spark, folded)
    replayed = records[2 * (len(records) // CUTS + 1) :]
    assert (fold.totals["records"], fold.totals["dead_letters"]) == (
        len(replayed),
        sum(r.kind == "malformed" for r in replayed),
    )


def _statistics(settings, table: catalog.Table = catalog.RAW_EVENTS) -> set[str]:
    """The columns with min/max statistics in any of ``table``'s files."""
    adds = deltalake.DeltaTable(table.path(settings)).get_add_actions(flatten=True)
    return {name.removeprefix("min.") for name in adds.column_names if name.startswith("min.")}


def test_raw_events_keeps_statistics_on_its_times_only(spark, tables, records, folded):
    """raw_events' files carry min/max statistics on event_time and ingested_at alone (written by
    delta-rs, with views or without), and a raw_events created without that setting gets it when the
    speed layer starts."""
    assert _statistics(folded) == {"event_time", "ingested_at"}
    schema = spark.read.format("delta").load(catalog.RAW_EVENTS.path(folded)).schema
    spark.createDataFrame([], schema).write.format("delta").partitionBy("event_date").save(
        catalog.RAW_EVENTS.path(tables)
    )
    queries.ensure_tables(spark, tables)
    Fold(spark, tables, [], "statistics", driver_bytes=0)(_batches(spark, records)[0], 0)
    assert _statistics(tables) == {"event_time", "ingested_at"}


def test_raw_events_writes_its_distinct_columns_without_a_dictionary(folded):
    """The columns of raw_events that hold a value of their own in nearly every row (catalog.RAW_EVENTS'
    distinct: the ids, times and offsets, the payload) are written plain in every file the fold wrote,
    the others (the event type, the topic) with a dictionary."""
    table = catalog.RAW_EVENTS.opened(folded)
    for uri in table.file_uris():
        group = pq.ParquetFile(uri).metadata.row_group(0)
        encodings = {group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)}
        dictionary = {name for name, used in encodings.items() if "RLE_DICTIONARY" in used}
        assert {"event_id", "offset", "payload"} <= set(catalog.RAW_EVENTS.distinct) <= set(encodings) - dictionary
        assert {"event_type", "topic"} <= dictionary, uri


def test_speed_partials_keep_row_counts_and_no_statistics(spark, tables, records, folded):
    """speed_partials' files carry their row counts (compaction finds crowded hours by them) and no
    column statistics, and a speed_partials created without that setting gets it when the fold starts."""

    def counted(settings) -> list[int | None]:
        table = catalog.SPEED_PARTIALS.opened(settings)
        return pa.table(table.get_add_actions(flatten=True))["num_records"].to_pylist() if table else []

    assert _statistics(folded, catalog.SPEED_PARTIALS) == set() and None not in counted(folded)
    path = catalog.SPEED_PARTIALS.path(tables)
    spark.read.format("delta").load(catalog.SPEED_PARTIALS.path(folded)).limit(0).write.format("delta").partitionBy(
        *catalog.SPEED_PARTIALS.partition_by
    ).save(path)
    views = list(tables.views.values())
    queries.ensure_tables(spark, tables)
    batches = _batches(spark, records)
    fold = Fold(spark, tables, views, "statistics")
    for batch_id in range(2):
        fold(batches[batch_id], batch_id)
    assert deltalake.DeltaTable(path).metadata().configuration["delta.dataSkippingNumIndexedCols"] == "0"
    assert _statistics(tables, catalog.SPEED_PARTIALS) == set() and counted(tables) and None not in counted(tables)


def test_a_table_changed_by_maintenance_between_micro_batches_stops_nothing(spark, tables, records):
    """Maintenance sets its retention properties on every table (batch_layer.maintenance), a change of
    the table's metadata that loses a race with the fold's next commit there: the fold commits again on
    the new version, and lands each micro-batch once."""
    queries.ensure_tables(spark, tables)
    views = [all_views()["page_views_per_minute"]]
    batches = _batches(spark, records)
    fold = Fold(spark, tables, views, "maintained")
    fold(batches[0], 0)
    for table in (catalog.RAW_EVENTS, catalog.SPEED_PARTIALS):  # each kept open by the fold since its commit
        deltalake.DeltaTable(table.path(tables)).alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 9 days"}
        )
    fold(batches[1], 1)
    step = len(records) // CUTS + 1
    assert spark.read.format("delta").load(catalog.RAW_EVENTS.path(tables)).count() == sum(
        r.kind != "malformed" for r in records[: 2 * step]
    )
