"""The query sandbox over tiny Delta tables: one read-only SELECT over the engine's views and tables;
every route to files, settings, catalogs, DDL and DML is refused with one line and writes nothing; the
time and row limits hold; a long-lived engine sees new Delta versions and switches of a view's version."""

import ctypes
import gc
import multiprocessing
import os
import re
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import date, datetime, timedelta

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from datasketches import hll_sketch
from deltalake import DeltaTable, write_deltalake

from infra.deployment import Deployment
from lake import merge, versions
from serving_layer import engine, sandbox, table_files
from serving_layer.sandbox import QueryError
from views import get
from views import tables as catalog
from views.compile import SKETCH_LGK
from views.timebase import UTC

WINDOW = pa.timestamp("us", "UTC")
#: A query that runs for hours, in constant memory.
ENDLESS = "SELECT count(*) FROM range(1000000000000) WHERE range % 7 = 3"


@pytest.fixture
def settings(tmp_path):
    settings = Deployment(home=tmp_path / "home")
    write_deltalake(settings.table("raw_events"), pa.table({"event_id": ["e1", "e2"], "n": [1, 2]}))
    write_deltalake(
        settings.table("serving_state"), pa.table({"view": ["page_views_per_minute"], "day": [date(2026, 1, 1)]})
    )
    start = datetime(2026, 1, 1, 10, tzinfo=UTC)
    write_deltalake(
        versions.current(settings, "page_views_per_minute"),
        pa.table(
            {
                "window_start": pa.array([start], WINDOW),
                "window_end": pa.array([start], WINDOW),
                "page": ["/"],
                "views": [3],
                "unique_users": [2],
            }
        ),
    )
    return settings


def test_select_with_and_the_merged_views(settings):
    assert engine.query(settings, "SELECT n FROM raw_events ORDER BY n") == (["n"], [(1,), (2,)])
    assert engine.query(settings, "WITH e AS (SELECT n FROM raw_events) SELECT sum(n) AS total FROM e;")[1] == [(3,)]
    assert engine.query(settings, "SELECT page, views, source FROM page_views_per_minute")[1] == [("/", 3, "batch")]
    assert engine.query(settings, "SELECT count(*) FROM range(3) a, generate_series(1, 2) b, (SELECT unnest([1, 2]))")[
        1
    ] == [(12,)]


ESCAPES = [
    ("SELECT * FROM read_csv('/etc/passwd')", "table function read_csv() is not allowed"),
    ("SELECT * FROM read_text('/etc/passwd')", "table function read_text() is not allowed"),
    ("SELECT * FROM glob('/etc/*')", "table function glob() is not allowed"),
    ("FROM read_parquet('{out}/x.parquet')", "table function read_parquet() is not allowed"),
    ("SELECT * FROM read_json('/etc/hosts')", "table function read_json() is not allowed"),
    ("SELECT * FROM delta_scan('{home}/data/raw_events')", "table function delta_scan() is not allowed"),
    ("SELECT * FROM query('SELECT 1')", "table function query() is not allowed"),
    ("SELECT * FROM duckdb_settings()", "table function duckdb_settings() is not allowed"),
    ("SELECT (SELECT count(*) FROM read_text('/etc/passwd'))", "table function read_text() is not allowed"),
    ("WITH x AS (SELECT * FROM glob('/etc/*')) SELECT * FROM x", "table function glob() is not allowed"),
    ("SELECT n FROM raw_events UNION ALL SELECT 1 FROM read_csv('/etc/passwd')", "read_csv() is not allowed"),
    ("SELECT * FROM '/etc/passwd'", "no view or table named /etc/passwd"),
    ("SELECT * FROM information_schema.tables", "no view or table named information_schema.tables"),
    ("SELECT * FROM temp.main.raw_events", "no view or table named temp.main.raw_events"),
    ("SELECT current_setting('threads')", "function current_setting() is not allowed"),
    ("DESCRIBE raw_events", "DESCRIBE, SHOW and SUMMARIZE are not allowed"),
    ("SHOW TABLES", "DESCRIBE, SHOW and SUMMARIZE are not allowed"),
    ("COPY (SELECT * FROM raw_events) TO '{out}/x.csv'", "only SELECT queries run here, not COPY"),
    ("COPY raw_events TO '{out}/x.parquet' (FORMAT parquet)", "not COPY"),
    ("EXPORT DATABASE '{out}/db'", "not EXPORT"),
    ("IMPORT DATABASE '{out}'", "not PRAGMA"),
    ("ATTACH '{out}/x.db' AS x", "not ATTACH"),
    ("DETACH memory", "not DETACH"),
    ("USE memory", "not SET"),
    ("PRAGMA version", "not PRAGMA"),
    ("SET threads = 1", "not SET"),
    ("RESET threads", "not SET"),
    ("INSTALL httpfs", "not LOAD"),
    ("LOAD httpfs", "not LOAD"),
    ("CALL pragma_version()", "not CALL"),
    ("CHECKPOINT", "not CALL"),
    ("EXPLAIN SELECT 1", "not EXPLAIN"),
    ("CREATE TABLE t AS SELECT 1", "not CREATE"),
    ("CREATE OR REPLACE TEMP VIEW raw_events AS SELECT 1 AS n", "not CREATE"),
    ("DROP VIEW raw_events", "not DROP"),
    ("ALTER VIEW raw_events RENAME TO r", "not ALTER"),
    ("INSERT INTO raw_events VALUES ('e3', 3)", "not INSERT"),
    ("UPDATE raw_events SET n = 0", "not UPDATE"),
    ("DELETE FROM raw_events", "not DELETE"),
    ("SELECT 1; DROP VIEW raw_events", "one SQL statement per query, got 2"),
    ("SELECT 1; /* only a comment */ DROP VIEW raw_events", "one SQL statement per query, got 2"),
    ("SELECT 1 -- a comment\n; COPY raw_events TO '{out}/x.csv'", "one SQL statement per query, got 2"),
    ("/* SELECT 1; */ COPY raw_events TO '{out}/x.csv'", "not COPY"),
    ("", "one SQL statement per query, got 0"),
]


@pytest.mark.parametrize("sql,message", ESCAPES)
def test_escapes_are_refused_in_one_line_and_write_nothing(settings, tmp_path, sql, message):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(QueryError, match=re.escape(message)) as refused:
        engine.query(settings, sql.format(out=out, home=settings.home))
    assert "\n" not in str(refused.value)
    assert list(out.iterdir()) == []
    assert engine.query(settings, "SELECT count(*) FROM raw_events")[1] == [(2,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM '/etc/passwd'",
        "COPY (SELECT 1) TO '{out}/x.csv'",
        "ATTACH '{out}/x.db'",
        "EXPORT DATABASE '{out}/db'",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "INSTALL httpfs",
        "LOAD httpfs",
    ],
)
def test_the_database_itself_refuses_files_extensions_and_settings(tmp_path, sql):
    """The second wall: what the parser check would let through reaches nothing either."""
    con = sandbox.connect("64MB", 1).cursor()
    con.register("t", pa.table({"a": [1]}))
    with pytest.raises(duckdb.Error):
        con.execute(sql.format(out=tmp_path))
    assert list(tmp_path.iterdir()) == []
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]


def test_a_time_limit_reached_before_the_query_starts_still_stops_it():
    """An interrupt that comes before the database started a query is lost (it would run for hours): the
    time limit interrupts again until the query stopped."""
    con, pool = sandbox.connect("1GB", 1), ThreadPoolExecutor(1)
    running = pool.submit(sandbox.run, con, ENDLESS, 0, 10)
    try:
        with pytest.raises(sandbox.TimeLimit):
            running.result(timeout=10)
    finally:
        while not running.done():
            con.interrupt()
        pool.shutdown()


def test_no_interrupt_outlives_its_query():
    """A query's time limit is dropped when the query returns: an interrupt after that would stop whatever
    runs next on the cursor (in a soak, the next query's registering of its tables). Queries on other
    cursors meanwhile keep their own limits."""
    con, other = sandbox.connect("1GB", 1).cursor(), sandbox.connect("1GB", 1).cursor()
    with ThreadPoolExecutor(1) as pool:
        later = pool.submit(sandbox.run, other, ENDLESS, 0.5, 10)
        with pytest.raises(sandbox.TimeLimit):
            sandbox.run(con, ENDLESS, 0.05, 10)
        assert not later.done()
        con.register("t", pa.table({"a": [1]}))
        for _ in range(3):  # past the time the limit would interrupt again
            assert sandbox.run(con, "SELECT a FROM t", 5, 10) == (["a"], [(1,)])
            time.sleep(sandbox.AGAIN_SECONDS)
        with pytest.raises(sandbox.TimeLimit):
            later.result(timeout=10)
    assert sandbox._deadlines._due == {}


def test_the_row_limit(settings):
    limited = settings.with_overrides(query_max_rows=3)
    assert len(engine.query(limited, "SELECT * FROM range(3)")[1]) == 3
    with pytest.raises(QueryError, match=r"more than 3 rows \(setting query_max_rows\); add LIMIT or aggregate"):
        engine.query(limited, "SELECT * FROM range(4)")


def test_the_time_limit(settings):
    limited = settings.with_overrides(query_timeout_seconds=0.5)
    with pytest.raises(QueryError, match=r"stopped after 0.5 s, the time limit \(setting query_timeout_seconds\)"):
        engine.query(limited, "SELECT count(*) FROM range(1000000000) a, range(1000000000) b WHERE a.range <> b.range")
    assert engine.query(limited, "SELECT count(*) FROM raw_events")[1] == [(2,)]


#: Counting 3 million distinct strings takes about 200 MB.
HUNGRY = "SELECT count(DISTINCT range::VARCHAR || 'abcdefghijklmnopqrstuvwxyz') FROM range(3000000)"


def test_the_memory_and_thread_limits(settings):
    """The engine takes its memory limit and threads from the settings; a query that needs more memory is
    refused in one line (nothing spills to disk) and the engine goes on."""
    con = sandbox.connect("64MB", 1)
    assert sandbox.memory_limit_of(con) == "61.0 MiB"
    assert con.execute("SELECT current_setting('threads')").fetchall() == [(1,)]
    limited = settings.with_overrides(query_memory_limit="64MB", query_threads=1)
    with pytest.raises(
        QueryError,
        match=r"^refused: needs more memory than the limit, 61.0 MiB \(setting "
        r"query_memory_limit\); narrow the query with WHERE or aggregate$",
    ):
        engine.query(limited, HUNGRY)
    assert engine.query(limited, "SELECT count(*) FROM raw_events")[1] == [(2,)]
    assert engine.query(settings, HUNGRY)[1] == [(3_000_000,)]  # within the default limit


def test_a_table_beyond_the_memory_limit_is_named_until_it_fits(settings):
    """A version of a table too big to copy within the memory limit fails every query that reads it (a
    view reads the ledger) with one line, never leaving the engine on the version before; a query of
    other tables is answered; once a version fits, it is read."""
    limited, path = settings.with_overrides(query_memory_limit="16MB"), settings.table("serving_state")
    big = pa.table({"view": [f"view-{i:024}" for i in range(1_000_000)], "day": [date(2026, 1, 1)] * 1_000_000})
    write_deltalake(path, big, mode="overwrite")  # about 40 MB in the engine
    for _ in range(2):
        with pytest.raises(
            QueryError,
            match=r"^table serving_state does not fit in the query engine's memory "
            r"limit, 15.2 MiB; raise the setting query_memory_limit$",
        ):
            engine.query(limited, "SELECT count(*) FROM page_views_per_minute")
    assert engine.query(limited, "SELECT count(*) FROM raw_events")[1] == [(2,)]
    write_deltalake(path, pa.table({"view": ["a"], "day": [date(2026, 1, 2)]}), mode="overwrite")
    assert engine.query(limited, "SELECT * FROM serving_state")[1] == [("a", date(2026, 1, 2))]


def test_deeply_nested_queries_are_answered_or_refused_in_one_line(settings):
    """The checker walks a query's tree without Python's recursion: a query nested past what the JSON
    decoder or DuckDB's parser reads is refused in one line, one within it is checked and answered."""
    assert engine.query(settings, "SELECT " + "abs(" * 300 + "-1" + ")" * 300)[1] == [(1,)]
    assert engine.query(settings, "SELECT " + " + ".join(["1"] * 300))[1] == [(300,)]
    for deep in ("SELECT " + "abs(" * 900 + "-1" + ")" * 900, "SELECT " + "(" * 49_000 + "1" + ")" * 49_000):
        with pytest.raises(QueryError, match=r"^refused: expressions nested too deeply; write the query flatter$"):
            engine.query(settings, deep)


def test_a_query_longer_than_the_limit_is_refused_unparsed(settings):
    longest = "SELECT " + " + ".join(["1"] * 20_000)
    longest += " " * (sandbox.MAX_SQL_CHARS - len(longest))
    with pytest.raises(QueryError, match=r"^refused: expressions nested too deeply"):  # parsed: at the limit
        engine.query(settings, longest)
    with pytest.raises(
        QueryError,
        match=r"^refused: the query is 100,001 characters long, over the limit of "
        r"100,000; write it shorter$",
    ):
        engine.query(settings, longest + " ")


def test_errors_name_the_known_tables(settings):
    with pytest.raises(
        QueryError,
        match="no view or table named no_such_view; known views and tables: "
        "batch_page_views_per_minute, page_views_per_minute, raw_events",
    ):
        engine.query(settings, "SELECT * FROM no_such_view")


def test_the_engine_sees_new_versions_and_new_tables(settings):
    assert engine.query(settings, "SELECT count(*) FROM raw_events")[1] == [(2,)]
    write_deltalake(settings.table("raw_events"), pa.table({"event_id": ["e3"], "n": [3]}), mode="append")
    assert engine.query(settings, "SELECT max(n) FROM raw_events")[1] == [(3,)]
    with pytest.raises(QueryError, match="no view or table named dead_letters"):
        engine.query(settings, "SELECT * FROM dead_letters")
    write_deltalake(settings.table("dead_letters"), pa.table({"reason": ["not JSON"]}))
    assert engine.query(settings, "SELECT reason FROM dead_letters")[1] == [("not JSON",)]


def test_a_query_opens_again_only_the_tables_it_reads(settings):
    """A view's query does not wait for a new version of raw_events, which it does not read; the next
    query that reads raw_events (here through a CTE) sees it."""
    con = duckdb.connect()
    assert sandbox.named(sandbox.parse(con, "WITH e AS (SELECT n FROM raw_events) SELECT * FROM e, X")) == {
        "raw_events",
        "x",
    }
    raw_events = engine._engine(settings)._tables["raw_events"]
    assert engine.query(settings, "SELECT count(*) FROM raw_events")[1] == [(2,)]
    seen = raw_events.version
    write_deltalake(settings.table("raw_events"), pa.table({"event_id": ["e3"], "n": [3]}), mode="append")
    assert engine.query(settings, "SELECT views FROM page_views_per_minute")[1] == [(3,)]
    assert raw_events.version == seen
    assert engine.query(settings, "WITH e AS (SELECT n FROM raw_events) SELECT count(*) FROM e")[1] == [(3,)]
    assert raw_events.version == seen + 1


def test_concurrent_readers(settings):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: engine.query(settings, f"SELECT sum(n) + {i} FROM raw_events")[1], range(40)))
    assert results == [[(3 + i,)] for i in range(40)]


def test_readers_see_each_new_version_while_it_is_written(settings):
    """Tables the views read are copied at each version: readers never fail or go back while a writer
    appends, and one copy is kept (each appended version is inserted into it)."""
    path, start = versions.current(settings, "page_views_per_minute"), datetime(2026, 1, 1, 11, tzinfo=UTC)

    def write(i: int) -> None:
        write_deltalake(
            path,
            pa.table(
                {
                    "window_start": pa.array([start], WINDOW),
                    "window_end": pa.array([start], WINDOW),
                    "page": [f"/{i}"],
                    "views": [1],
                    "unique_users": [1],
                }
            ),
            mode="append",
        )

    def read(_) -> list[int]:
        return [engine.query(settings, "SELECT count(*) FROM page_views_per_minute")[1][0][0] for _ in range(30)]

    with ThreadPoolExecutor(5) as pool:
        readers = [pool.submit(read, i) for i in range(4)]
        for i in range(10):
            write(i)
        seen = [reader.result() for reader in readers]
    assert all(counts == sorted(counts) and counts[0] >= 1 for counts in seen)
    assert engine.query(settings, "SELECT count(*) FROM page_views_per_minute")[1] == [(11,)]
    copies = (
        engine._engine(settings)
        ._db.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'batch_page_views_per_minute@%'")
        .fetchall()
    )
    [(copy,)] = copies
    assert engine._engine(settings)._db.execute(f'SELECT count(*) FROM "{copy}"').fetchall() == [(11,)]


def test_an_appended_version_is_copied_from_the_last_copy_and_its_new_files(settings):
    """A version that only adds files is copied from the previous copy plus the added files' rows; one that
    rewrites the table or changes its schema is copied whole; either way a query reads the version exactly."""
    path, table = settings.table("serving_state"), engine._engine(settings)._tables["serving_state"]
    rows = lambda: engine.query(settings, "SELECT * FROM serving_state ORDER BY day")[1]  # noqa: E731
    assert rows() == [("page_views_per_minute", date(2026, 1, 1))]
    write_deltalake(path, pa.table({"view": ["a", "b"], "day": [date(2026, 1, 2), date(2026, 1, 3)]}), mode="append")
    assert rows() == [("page_views_per_minute", date(2026, 1, 1)), ("a", date(2026, 1, 2)), ("b", date(2026, 1, 3))]
    assert table.read_anew(table.appended).to_table().column("view").to_pylist() == ["a", "b"]
    write_deltalake(path, pa.table({"view": ["c"], "day": [date(2026, 1, 4)]}), mode="overwrite")
    assert rows() == [("c", date(2026, 1, 4))] and table.appended is None
    write_deltalake(
        path, pa.table({"view": ["d"], "day": [date(2026, 1, 5)], "rows": [9]}), mode="append", schema_mode="merge"
    )
    assert rows() == [("c", date(2026, 1, 4), None), ("d", date(2026, 1, 5), 9)] and table.appended is None
    write_deltalake(path, pa.table({"view": ["e"], "day": [date(2026, 1, 6)], "rows": [1]}), mode="append")
    assert rows()[-1] == ("e", date(2026, 1, 6), 1) and len(rows()) == 3
    assert table.read_anew(table.appended).count_rows() == 1


def test_a_timestamp_partition_value_is_read_in_either_form_delta_writes():
    """delta-rs writes a timestamp partition value in UTC without an offset, Spark's Delta writer in ISO
    8601 with one: both give the file the same guarantee."""
    schema, hour = pa.schema([("window_hour", WINDOW)]), datetime(2026, 6, 1, tzinfo=UTC)
    expected = ds.field("window_hour") == pa.scalar(hour, WINDOW)
    for text in ("2026-06-01 00:00:00.000000", "2026-06-01T00:00:00.000000Z", "2026-06-01T02:00:00+02:00"):
        found = table_files.guarantee({"partitionValues": {"window_hour": text}}, schema)
        assert found.equals(ds.scalar(True) & expected)


def test_appended_files_read_from_the_log_alone_keep_their_partitions(tmp_path):
    """A partitioned table's appended files, read from its new commits alone, carry their partition
    values (a timestamp, a string, a null) and their statistics' ranges (a time to the microsecond, an
    integer, with and without nulls): a filter on them reads what delta-rs reads of the table."""
    path, hour = str(tmp_path / "partials"), datetime(2026, 1, 1, 10, tzinfo=UTC)

    def append(i: int) -> None:
        write_deltalake(
            path,
            pa.table(
                {
                    "view": ["a", None],
                    "n": [i, i + 10],
                    "m": [None, i],
                    "at": pa.array([hour.replace(microsecond=999_999 - i), hour], WINDOW),
                    "window_hour": pa.array([hour, hour.replace(hour=10 + i)], WINDOW),
                }
            ),
            mode="append",
            partition_by=["view", "window_hour"],
        )

    append(0)
    table = table_files.TableFiles(path)
    assert table.changed() and table.appended is None
    append(1)
    assert table.changed() and sorted(table.read_anew(table.appended).to_table()["n"].to_pylist()) == [1, 11]
    assert (table.version, table.table.version()) == (1, 0)  # delta-rs did not read the table again
    appended = table.read_anew(table.appended)
    assert not list(appended.get_fragments(filter=ds.field("at") < pa.scalar(hour, WINDOW)))  # files skipped
    whole = DeltaTable(path).to_pyarrow_dataset()
    for where in (
        ds.field("view") == "a",
        ds.field("view").is_null(),
        ds.field("window_hour") == pa.scalar(hour.replace(hour=11), WINDOW),
        ds.field("at") >= pa.scalar(hour.replace(microsecond=999_998), WINDOW),
        ds.field("m").is_null(),
        ds.field("m") >= 1,
    ):
        assert sorted(table.dataset.to_table(filter=where)["n"].to_pylist()) == sorted(
            whole.to_table(filter=where)["n"].to_pylist()
        )


def test_a_switch_of_version_shows_at_the_next_query(settings):
    """A new version of a view's batch table (here at the same Delta version number as the one serving)
    is not read until the version pointers switch to it; then the next query reads it, and back."""
    view, start = "page_views_per_minute", datetime(2026, 1, 1, 10, tzinfo=UTC)
    write_deltalake(
        catalog.batch(view, "v2").path(settings),
        pa.table(
            {
                "window_start": pa.array([start], WINDOW),
                "window_end": pa.array([start], WINDOW),
                "page": ["/"],
                "views": [7],
                "unique_users": [2],
            }
        ),
    )
    served = lambda: engine.query(settings, f"SELECT views FROM {view}")[1]  # noqa: E731
    assert served() == [(3,)]
    for label, views in (("v2", 7), (None, 3)):
        versions.switch(
            settings, {view: catalog.batch(view, label).name}, datetime.now(UTC), versions.snapshot(settings, [view])
        )
        assert served() == [(views,)]


def _pause(seconds: float) -> float:
    """Sleep ``seconds``: a query calling it waits off the cores, as one that others keep from them does."""
    time.sleep(seconds)
    return seconds


def test_a_cpu_time_limit_counts_the_query_s_thread_not_its_waits():
    """Limited by its thread's CPU time (:class:`sandbox.OnCpu`), a query is stopped once the time has
    passed and its thread had the CPU time, not while it waits off the cores; its time limit still holds."""
    con = sandbox.connect("1GB", 1).cursor()
    con.create_function("pause", _pause, ["DOUBLE"], "DOUBLE", side_effects=True)
    with pytest.raises(sandbox.TimeLimit):
        sandbox.run(con, "SELECT pause(0.5)", 0.2, 10)
    assert sandbox.run(con, "SELECT pause(0.5)", 5, 10, on_cpu=sandbox.OnCpu(0.2, 0.1))[1] == [(0.5,)]
    clock = time.pthread_getcpuclockid(threading.get_ident())
    used, began = time.clock_gettime(clock), time.monotonic()
    with pytest.raises(sandbox.TimeLimit):
        sandbox.run(con, ENDLESS, 5, 10, on_cpu=sandbox.OnCpu(0.3, 0.2))
    assert time.clock_gettime(clock) - used >= 0.2 and 0.3 <= time.monotonic() - began < 2
    began = time.monotonic()
    with pytest.raises(sandbox.TimeLimit):
        sandbox.run(con, ENDLESS, 0.2, 10, on_cpu=sandbox.OnCpu(0.1, 5))
    assert 0.2 <= time.monotonic() - began < 2


def test_a_query_past_the_fast_lane_is_answered_from_the_slow_lane(settings):
    """A query still running after ``query_fast_lane_seconds`` is run again in the slow lane, where it
    finishes (on a thread of lower priority), or is stopped at its time limit, counted from its start."""
    lanes = settings.with_overrides(query_fast_lane_seconds=0.01, query_timeout_seconds=60)  # 1-2 s alone
    slow = "SELECT count(*) FROM range(300000000) WHERE range % 7 = 0"
    assert engine.query(lanes, slow)[1] == [(42_857_143,)]
    niceness = engine._engine(lanes)._slow_lane.submit(lambda: os.getpriority(os.PRIO_PROCESS, 0)).result()
    assert niceness == engine.SLOW_LANE_NICENESS
    stopped = settings.with_overrides(query_fast_lane_seconds=0.2, query_timeout_seconds=1)
    began = time.monotonic()
    with pytest.raises(QueryError, match=r"^stopped after 1 s, the time limit"):
        engine.query(stopped, ENDLESS)
    assert time.monotonic() - began < 3


def test_a_short_query_kept_off_the_cores_is_answered_beside_the_slow_lane(settings):
    """A query that waits off the cores past ``query_fast_lane_seconds`` stays in the fast lane (until
    it had its share of CPU time, :data:`engine.FAST_LANE_CPU_SHARE`, or a few times as long) and is
    answered while a long query holds the slow lane, behind which it would wait until its time limit."""
    lanes = settings.with_overrides(query_fast_lane_seconds=0.2, query_timeout_seconds=3)
    held = engine._engine(lanes)
    held._db.create_function("pause", _pause, ["DOUBLE"], "DOUBLE", side_effects=True)
    with ThreadPoolExecutor(1) as pool:
        endless, deadline = pool.submit(engine.query, lanes, ENDLESS), time.monotonic() + 2
        while held._slow_run is None:
            assert time.monotonic() < deadline, "the endless query never took the slow lane"
            time.sleep(0.01)
        assert engine.query(lanes, "SELECT pause(0.5)")[1] == [(0.5,)]
        assert not endless.done()
        with pytest.raises(QueryError, match=r"^stopped after 3 s, the time limit"):
            endless.result()


def test_slow_queries_take_the_slow_lane_one_at_a_time(settings):
    """Two queries past the fast lane at once: one runs in the slow lane while the other waits its turn,
    and the waiting counts against its time limit."""
    lanes = settings.with_overrides(query_fast_lane_seconds=0.1, query_timeout_seconds=2)
    with ThreadPoolExecutor(2) as pool:
        began = time.monotonic()
        runs = [pool.submit(engine.query, lanes, ENDLESS) for _ in range(2)]
        for run in runs:
            with pytest.raises(QueryError, match=r"^stopped after 2 s, the time limit"):
                run.result()
    assert time.monotonic() - began < 3.5  # the second one did not get 2 s of its own after the first


def test_the_slow_lane_gives_its_memory_way_to_the_fast_lane(settings):
    """A query refused for memory while a query in the slow lane holds most of it is answered: the slow
    lane's query is stopped (or, if it ran out of memory first, refused), in one line, and the refused
    one runs again."""
    lanes = settings.with_overrides(query_memory_limit="128MB", query_fast_lane_seconds=1.0)
    letters = "'abcdefghijklmnopqrstuvwxyz'"
    hoarding = (  # a hash table of a million strings (85 MB), then probed for hours
        f"SELECT count(*) FROM (SELECT range::VARCHAR || {letters} AS s FROM range(1000000)) "
        f"JOIN (SELECT (range % 1000000)::VARCHAR || {letters} AS s FROM range(1000000000000)) USING (s)"
    )
    hungry = f"SELECT count(DISTINCT range::VARCHAR || {letters}) FROM range(700000)"  # about 60 MB
    held = engine._engine(lanes)
    with ThreadPoolExecutor(1) as pool:
        hoarder = pool.submit(engine.query, lanes, hoarding)
        deadline, built = time.monotonic() + 20, False
        while held._slow_run is None:
            assert time.monotonic() < deadline and not hoarder.done(), "the hoarding query never took the slow lane"
            time.sleep(0.01)
        while not built:  # in the slow lane, its hash table made (what it holds no longer grows)
            assert time.monotonic() < deadline and not hoarder.done(), "the hoarding query never held its memory"
            before = held.memory()[0]
            time.sleep(0.3)
            built = before > 80 * 2**20 and held.memory()[0] - before < 2**20
        assert engine.query(lanes, hungry)[1] == [(700_000,)]
        with pytest.raises(QueryError, match=f"^({re.escape(engine.GAVE_WAY)}|refused: needs more memory .*)$"):
            hoarder.result(timeout=5)
    assert engine.query(lanes, hungry)[1] == [(700_000,)]  # and nothing is held after


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _heap_in_use() -> int:
    """Bytes of the process's heap in use (glibc's mallinfo2: Arrow's and DuckDB's C++ allocations too)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    heap = libc.mallinfo2()
    return heap.uordblks + heap.hblkhd


def _append_partials(settings: Deployment, hours: int, first: int = 0) -> None:
    """Partials of page_views_per_minute for ``hours`` windows, an hour apart from the ``first`` hour of a
    day no test made final, with 40 text columns besides: a file each (one per view and hour)."""
    start = datetime(2026, 1, 3, tzinfo=UTC)
    partials = _partials(*((start + timedelta(hours=first + i), "/", 1, ("u1",)) for i in range(hours)))
    for k in range(40):
        partials = partials.add_column(1, f"s{k}", pa.array([f"{k}:{i}" for i in range(hours)]))
    write_deltalake(settings.table("speed_partials"), partials, mode="append", partition_by=["view", "window_hour"])


def _speed_rows(settings: Deployment) -> list[tuple]:
    return engine.query(settings, "SELECT count(*) FROM page_views_per_minute WHERE source = 'speed'")[1]


def test_folded_files_leave_no_metadata_behind(settings):
    """A Parquet fragment once scanned keeps its file's metadata, and the engine keeps its tables'
    fragments: if it folded partials from them, the view's speed rows, brought up to date at each
    micro-batch (speed_partials gets a file per view and hour), would hold the metadata of every file the
    table ever had (120 KB a file of speed_partials). Folding 300 appended files of 40 columns (100 KB of
    metadata each, once read) grows the heap by the fragments the engine keeps, a few KB a file.
    (Measured in a process of its own: the heap of a test worker is also that of whatever threads
    earlier tests left running in it.)"""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as process:
        growth, fragments = process.submit(_heap_growth_folding_300_files, settings).result()
    assert fragments == 601
    assert growth < 300 * 10_000


def _heap_growth_folding_300_files(settings: Deployment) -> tuple[int, int]:
    """The heap's growth over a query that folds 300 files appended to speed_partials into the view's
    speed rows (after the engine has folded 301 before), and how many files the engine then keeps."""
    _append_partials(settings, 1)
    assert _speed_rows(settings) == [(1,)]
    _append_partials(settings, 300, first=1)
    _speed_rows(settings)  # the first scan of 300 new files: Arrow's and DuckDB's own buffers settle
    _append_partials(settings, 300, first=301)
    gc.collect()
    before = _heap_in_use()
    assert _speed_rows(settings) == [(601,)]
    gc.collect()
    growth, kept = _heap_in_use() - before, engine._engine(settings)._tables["speed_partials"].dataset
    assert kept is not None
    return growth, len(list(kept.get_fragments()))


def _sketch(*users: str) -> bytes:
    sketch = hll_sketch(SKETCH_LGK)
    for user in users:
        sketch.update(user)
    return sketch.serialize_compact()


def _partials(*rows: tuple[datetime, str, int, tuple[str, ...]]) -> pa.Table:
    """Speed partials of page_views_per_minute: per row its minute, page, views (and rows) and users."""
    partial = pa.struct(
        [
            ("window_start", WINDOW),
            ("window_end", WINDOW),
            ("page", pa.string()),
            ("_rows", pa.int64()),
            ("views", pa.int64()),
            ("unique_users_sketch", pa.binary()),
        ]
    )
    return pa.table(
        {
            "view": ["page_views_per_minute"] * len(rows),
            "page_views_per_minute": pa.array(
                [
                    {
                        "window_start": start,
                        "window_end": start + timedelta(minutes=1),
                        "page": page,
                        "_rows": views,
                        "views": views,
                        "unique_users_sketch": _sketch(*users),
                    }
                    for start, page, views, users in rows
                ],
                partial,
            ),
            "window_hour": pa.array([start.replace(minute=0) for start, *_ in rows], WINDOW),
        }
    )


def test_a_micro_batch_brings_the_speed_rows_up_to_date_in_place(settings):
    """The engine keeps each merged view's batch and speed rows as tables of its own. A micro-batch that
    appends partials makes again, in place, the windows it touches (a window grown, a window new, a
    window of a final day ignored), when a query reads the view; a day made final leaves its windows out
    of a copy of them, even with new partials of it; a rewrite of the partials makes them anew. Each
    time the view's rows are the merge's own SQL over the same tables."""
    path, view = settings.table("speed_partials"), "page_views_per_minute"
    noon, day_one = datetime(2026, 1, 2, 12, tzinfo=UTC), datetime(2026, 1, 1, 10, tzinfo=UTC)
    served = lambda: engine.query(settings, f"FROM {view} ORDER BY window_start, page")[1]  # noqa: E731
    merged = lambda: engine.query(  # noqa: E731
        settings,
        merge.merged_sql(get(view), f"batch_{view}", "speed_partials", "serving_state")
        + " ORDER BY window_start, page",
    )[1]
    speed_table = lambda: engine._engine(settings)._parts[(view, "speed")].table  # noqa: E731

    def append(*rows, mode="append"):
        write_deltalake(path, _partials(*rows), mode=mode, partition_by=["view", "window_hour"])

    append((noon, "/", 2, ("u1", "u2")))
    assert served() == merged() and [(r[2], r[3], r[4], r[5]) for r in served()[1:]] == [("/", 2, 2, "speed")]
    first, made_from = speed_table(), engine._engine(settings)._parts[(view, "speed")].made_from
    append((noon, "/", 3, ("u2", "u3")), (noon + timedelta(minutes=1), "/a", 1, ("u4",)), (day_one, "/", 5, ("u5",)))
    engine.query(settings, "SELECT count(*) FROM speed_partials")  # copies the new rows; the view waits
    assert engine._engine(settings)._parts[(view, "speed")].made_from == made_from
    rows = served()
    assert rows == merged() and speed_table() == first
    assert [(r[0], r[2], r[3], r[4], r[5]) for r in rows] == [
        (day_one, "/", 3, 2, "batch"),
        (noon, "/", 5, 3, "speed"),
        (noon + timedelta(minutes=1), "/a", 1, 1, "speed"),
    ]
    append((noon, "/", 1, ("u9",)), mode="overwrite")
    assert served() == merged() and served()[1][3] == 1 and speed_table() != first
    anew = speed_table()
    append((noon + timedelta(days=1), "/b", 4, ("u6",)))
    assert served() == merged() and len(served()) == 3
    write_deltalake(
        settings.table("serving_state"), pa.table({"view": [view], "day": [date(2026, 1, 2)]}), mode="append"
    )
    append((noon, "/", 7, ("u7",)), (noon + timedelta(days=1, minutes=1), "/b", 1, ("u8",)))
    rows = served()
    assert rows == merged() and speed_table() != anew  # a copy: a query that began before reads the part it found
    assert [(r[2], r[3], r[5]) for r in rows] == [("/", 3, "batch"), ("/b", 4, "speed"), ("/b", 1, "speed")]


def test_a_query_reads_the_state_it_began_on_while_a_day_is_made_final(settings, monkeypatch):
    """A query that began before a batch run made a day final reads the view as it was: the day's speed
    rows, though another query left them out of the view's speed part meanwhile (the batch rows of a day
    made final come in a new batch part, which the first query does not read): no day goes missing."""
    view, noon = "page_views_per_minute", datetime(2026, 1, 2, 12, tzinfo=UTC)
    write_deltalake(
        settings.table("speed_partials"),
        _partials((noon, "/", 4, ("u1",)), (noon + timedelta(days=1), "/", 2, ("u2",))),
        partition_by=["view", "window_hour"],
    )
    write_deltalake(
        versions.current(settings, view),
        pa.table(
            {
                "window_start": pa.array([noon], WINDOW),
                "window_end": pa.array([noon + timedelta(minutes=1)], WINDOW),
                "page": ["/"],
                "views": [5],
                "unique_users": [1],
            }
        ),
        mode="append",
    )
    sql = f"SELECT window_start, views, source FROM {view} ORDER BY window_start"
    first_day, next_day = (datetime(2026, 1, 1, 10, tzinfo=UTC), 3, "batch"), (noon + timedelta(days=1), 2, "speed")
    before = [first_day, (noon, 4, "speed"), next_day]
    assert engine.query(settings, sql)[1] == before
    began, go, run = threading.Event(), threading.Event(), sandbox.run

    def paused(con, text, *args):
        if threading.current_thread().name.startswith("first"):
            began.set()
            go.wait(10)
        return run(con, text, *args)

    monkeypatch.setattr(sandbox, "run", paused)
    with ThreadPoolExecutor(1, "first") as first:
        found = first.submit(engine.query, settings, sql)
        assert began.wait(10)
        write_deltalake(
            settings.table("serving_state"), pa.table({"view": [view], "day": [noon.date()]}), mode="append"
        )
        assert engine.query(settings, sql)[1] == [first_day, (noon, 5, "batch"), next_day]
        go.set()
        assert found.result(10)[1] == before


def test_finality_is_the_ledgers_days_and_the_other_days_of_the_speed_rows(settings):
    """A view's final days are the ledger's; its provisional days those of its speed partials that are not
    final, a window whose rows were all taken back among them, though the view shows no row of it. Neither
    the days nor which views have data fold the view's rows (a health check does not stall the queries
    of a view it does not read)."""
    view, day_one = "page_views_per_minute", datetime(2026, 1, 1, 11, tzinfo=UTC)
    second, third = day_one + timedelta(days=1), day_one + timedelta(days=2)
    write_deltalake(
        settings.table("speed_partials"),
        _partials(
            (day_one, "/", 1, ("u1",)), (second, "/", 2, ("u2",)), (third, "/", 1, ("u3",)), (third, "/", -1, ())
        ),
        partition_by=["view", "window_hour"],
    )
    days = engine.finality(settings)
    assert days[view] == {"final": {day_one.date()}, "provisional": {second.date(), third.date()}}
    assert view in engine.with_data(settings) and (view, "speed") not in engine._engine(settings)._parts
    assert all(days[other] == {"final": set(), "provisional": set()} for other in set(settings.views) - {view})
    assert [r[0] for r in engine.query(settings, f"SELECT window_start FROM {view} WHERE source = 'speed'")[1]] == [
        second
    ]


def test_a_speed_part_is_made_anew_once_it_held_more_deleted_rows_than_rows(settings):
    """Rows deleted from a table stay in DuckDB's memory until the table is dropped: a speed part that
    micro-batches keep updating in place is copied anew once its deleted rows outnumber its rows, so
    that what it holds stays in proportion to the view."""
    path, view = settings.table("speed_partials"), "page_views_per_minute"
    noon = datetime(2026, 1, 3, 12, tzinfo=UTC)  # a day no test made final
    served = lambda: engine.query(  # noqa: E731
        settings, f"FROM {view} WHERE window_start = TIMESTAMPTZ '{noon}' ORDER BY page"
    )[1]
    part = lambda: engine._engine(settings)._parts[(view, "speed")]  # noqa: E731
    pages = [f"/{n}" for n in range(3)]
    write_deltalake(
        path,
        _partials(*((noon, page, 1, ("u1",)) for page in pages)),
        mode="overwrite",
        partition_by=["view", "window_hour"],
    )
    served()
    tables_made = [part().table]
    for views in range(2, 8):
        write_deltalake(path, _partials((noon, "/0", 1, ("u1",))), mode="append", partition_by=["view", "window_hour"])
        rows = served()
        assert [(r[2], r[3]) for r in rows] == [("/0", views), ("/1", 1), ("/2", 1)]
        assert part().deleted <= part().rows == 3
        tables_made.append(part().table)
    assert tables_made == [tables_made[0]] * 2 + [tables_made[2]] * 2 + [tables_made[4]] * 2 + [tables_made[6]]
    assert len(set(tables_made)) == 4


def test_a_version_that_only_rearranged_rows_keeps_the_views_speed_rows(settings):
    """A compaction that rewrites files without changing the rows (Delta's dataChange false: the speed
    layer's packing, OPTIMIZE) is read from the log and folds nothing: the view's speed rows stay. Rows
    appended before and after it, while no query read the view, are folded into the same speed rows when
    one does (the files the packing replaced are still there to read), and they are the merge's own SQL
    over the same tables."""
    path, view, noon = settings.table("speed_partials"), "page_views_per_minute", datetime(2026, 1, 3, 12, tzinfo=UTC)
    served = lambda: engine.query(  # noqa: E731
        settings, f"FROM {view} WHERE window_start >= TIMESTAMPTZ '{noon}' ORDER BY window_start, page"
    )[1]
    merged = lambda: engine.query(  # noqa: E731
        settings,
        f"FROM ({merge.merged_sql(get(view), f'batch_{view}', 'speed_partials', 'serving_state')}) "
        f"WHERE window_start >= TIMESTAMPTZ '{noon}' ORDER BY window_start, page",
    )[1]
    part = lambda: engine._engine(settings)._parts[(view, "speed")]  # noqa: E731

    def append(minute: int, first: bool = False) -> None:
        write_deltalake(
            path,
            _partials((noon + timedelta(minutes=minute), "/", 1, ("u1",))),
            mode="overwrite" if first else "append",
            partition_by=["view", "window_hour"],
        )

    for n in range(3):
        append(n, first=n == 0)
        before = served()
    kept = part()
    DeltaTable(path).optimize.compact()
    assert DeltaTable(path).get_add_actions().num_rows == 1
    assert served() == before and part() is not kept and part().table == kept.table and part().rows == kept.rows
    append(3)
    engine.query(settings, "SELECT count(*) FROM speed_partials")  # the table's change is read; the view waits
    DeltaTable(path).optimize.compact()
    engine.query(settings, "SELECT count(*) FROM speed_partials")
    append(1)
    rows = served()
    assert rows == merged() and part().table == kept.table
    assert [(r[0], r[3]) for r in rows] == [(noon, 1), (noon + timedelta(minutes=1), 2)] + [
        (noon + timedelta(minutes=n), 1) for n in (2, 3)
    ]


def _resident() -> int:
    """The process's resident memory, bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_whole_read_gives_back_the_memory_it_freed(settings):
    """Reading a table's files whole leaves most of what it took free but held by malloc (Arrow's share
    too when it allocates from malloc, as the HTTP API has it): the engine gives that back to the system
    after a whole copy or fold, so that trimming the heap again just after folding 300 files gives back
    little: 0-8 MB in 24 runs here (some of what the read took is freed only after the engine's trim),
    and 34 MB in most runs without it. (Measured in a process of its own, as above: what earlier tests freed meanwhile
    would be given back too.)"""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as process:
        assert process.submit(_trimmed_after_folding_300_files, settings).result() < 16 * 2**20


def _trimmed_after_folding_300_files(settings: Deployment) -> int:
    """What trimming the heap gives back just after the engine folded 300 files whole, bytes."""
    pa.set_memory_pool(pa.system_memory_pool())
    _append_partials(settings, 300)
    assert _speed_rows(settings) == [(300,)]  # folded from the partials' files, whole
    before = _resident()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return before - _resident()


def test_a_query_does_not_wait_for_another_querys_refresh(settings, monkeypatch):
    """While one query copies a large new version of a table, a query of a view read a moment before
    runs on the state it found and answers at once; the copy's query then sees the whole version. (How
    long a moment may be is widened: on a loaded machine the copy's query may take long to begin.)"""
    monkeypatch.setattr(engine, "FOLLOW_SECONDS", 60.0)
    rows = 4_000_000
    write_deltalake(settings.table("quality_results"), pa.table({"n": pa.array(range(rows), pa.int64())}))
    view = "SELECT views FROM page_views_per_minute"
    assert engine.query(settings, view)[1] == [(3,)]
    with ThreadPoolExecutor(1) as pool:
        copying = pool.submit(engine.query, settings, "SELECT count(*) FROM quality_results")
        while engine._engine(settings)._refresh_began is None and not copying.done():
            time.sleep(0.001)
        assert engine.query(settings, view)[1] == [(3,)]
        assert not copying.done()
        assert copying.result()[1] == [(rows,)]


def test_a_watching_engine_brings_what_queries_read_up_to_date_before_they_ask(settings):
    """Once a query read the ledger, a new version of it is copied as soon as it is committed, with no
    query asking; a table no query read is left alone until one does."""
    watching = engine.Engine(settings)
    try:
        watching.watch()
        assert watching.query("SELECT count(*) FROM serving_state")[1] == [(1,)]
        copies = watching.copied()
        write_deltalake(
            settings.table("serving_state"), pa.table({"view": ["a"], "day": [date(2026, 1, 2)]}), mode="append"
        )
        write_deltalake(settings.table("quality_results"), pa.table({"n": [1]}))
        deadline = time.monotonic() + 30
        while watching.copied()["serving_state"] == copies["serving_state"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watching.copied()["serving_state"] == copies["serving_state"] + 1
        assert watching.copied()["quality_results"] == 0
        assert watching.query("SELECT count(*) FROM serving_state")[1] == [(2,)]
    finally:
        watching.close()
