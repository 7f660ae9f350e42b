"""Serving: how fast the serving layer answers queries, against Spark SQL over the same merged views.

The data is built in a deployment of the bench's own, without Kafka: 30 days of generated events (the
default mix: late, resent and malformed ones among them) are parsed and landed in raw_events as the
speed layer lands them (``events.parse``, ``events.landed``), then every view is recomputed by the
batch layer over those days, which makes them final. Before that, the speed layer folds one
micro-batch of the last hour's events (``speed_layer.fold``), so the merged views hold speed rows too.

The same SQL runs on two runners, each a function from SQL to rows:

- the serving layer: ``serving_layer.engine.query``, the one long-lived engine per deployment that
  ``lambdalake query`` and the HTTP server use (DuckDB in its sandbox);
- the baseline, Spark SQL: the same merged views in a Spark session (``serving_layer.spark_sql``) of
  the local Spark the layers use (``infra.spark``), each query's rows collected to the driver. As a
  Spark user would, the session caches the relations the merged view reads (``CACHE TABLE`` of its
  batch table, the speed partials and the ledger, each read into memory before any query).

Each runner is warmed before it is timed with queries of the same shapes at other literals (other
pages and minutes; the range queries one day shorter): no timed SQL was run before on either runner,
so the serving layer checks each timed query in its sandbox (it remembers only the queries that
passed) and neither runner has its result at hand. A latency is the wall-clock time from the call to
the rows in Python.

- **Point:** one page's one minute of page_views_per_minute; pages and minutes drawn (seeded) from
  the rows the month has, none drawn twice across the warm-up, the timed queries and the run under writes.
- **Range:** one page's whole month of page_views_per_minute, summed per day (30 rows).
- **Sandbox check:** the serving layer's check of a query alone (``sandbox.check``, which
  ``engine.query`` runs on a query it has not passed before), timed on the same point and range
  queries; it is part of the serving layer's latencies above it.
- **Throughput:** 4 threads each run the timed point queries back to back for a fixed time; queries/s
  in all (the serving layer remembers each query's check after its first run, as for a dashboard's
  repeated queries).
- **Under writes:** the serving layer's point queries at other literals, one every 20 ms, while the
  speed layer's fold (``speed_layer.fold``) commits micro-batches of 1,000 new events one after
  another; the new table versions committed meanwhile, and how many of them the engine copied
  into its database (it reads raw_events and dead_letters in place). The engine watches the tables'
  logs meanwhile, as the HTTP API's does (``engine.watch``). Spark SQL is not run under
  writes: its cached tables keep the versions cached before the writes, and a user sees a new
  micro-batch only by caching the tables again, which is a rebuild, not a query.
"""

from __future__ import annotations

import itertools
import random
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from batch_layer.recompute import recompute_view
from bench import landing
from domains.clickstream import generator
from infra import spark as sparks
from infra.deployment import Deployment
from infra.processes import Say
from lake.merge import batch_relation
from serving_layer import engine, sandbox, spark_sql
from speed_layer.fold import Fold
from speed_layer.queries import ensure_tables, speed_views
from views import tables

DAYS = 30
VIEW = "page_views_per_minute"
POINTS = 100  # timed point queries per runner, and as many to warm it (range queries: one per page)
CLIENTS = 4
SECONDS = 20  # the throughput test's duration per runner
SPEED_EVENTS = 5_000
RUNNERS = ("serving layer", "Spark SQL (baseline)")
#: The relations the merged view reads (``lake.merge.merged_sql``), cached by the baseline.
CACHED = (batch_relation(VIEW), tables.SPEED_PARTIALS.name, tables.SERVING_STATE.name)
#: Under writes: this many point queries, one every ``WRITES_EVERY`` seconds, while micro-batches of
#: ``BATCH_EVENTS`` events are committed.
WRITES_POINTS = 1_000
WRITES_EVERY = 0.02
BATCH_EVENTS = 1_000
#: The tables a micro-batch commits to.
WRITTEN = (tables.RAW_EVENTS.name, tables.DEAD_LETTERS.name, tables.LATE_EVENTS.name, tables.SPEED_PARTIALS.name)

Runner = Callable[[str], list]


@dataclass
class Data:
    start: datetime
    end: datetime
    events: int
    batch_rows: int
    speed_rows: int
    build_seconds: float


@dataclass
class Queries:
    """The SQL of the runs: timed, run to warm a runner first, and run under writes."""

    points: list[str]
    ranges: list[str]
    warm: list[str]
    under_writes: list[str]


@dataclass
class Result:
    #: Milliseconds per query, by kind ("point", "range").
    latency_ms: dict[str, list[float]]
    queries_per_second: float


@dataclass
class Writes:
    """The serving layer's point queries while the speed layer commits micro-batches."""

    latency_ms: list[float]
    seconds: float
    #: Per table written (:data:`WRITTEN`), the versions committed while the queries ran, and of those
    #: the versions the engine copied.
    committed: dict[str, int]
    copied: dict[str, int]


def build(spark: SparkSession, settings: Deployment, count: int, say: Say) -> Data:
    """Fold the last hour's events as speed rows, land ``count`` events of the 30 days before today
    (UTC) and recompute every view over them."""
    began, now = time.monotonic(), datetime.now(UTC)
    end = now.replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - timedelta(days=DAYS)
    ensure_tables(spark, settings)
    say(f"serving: folding {SPEED_EVENTS:,} events of the last hour into the speed views ...")
    recent = generator.generate(now - timedelta(hours=1), now, SPEED_EVENTS, seed=2)
    landing.fold(spark, settings, recent, settings.home / "recent", "bench")
    records = generator.generate(start, end, count, seed=1)
    say(f"serving: landing {len(records):,} events of {start:%Y-%m-%d} .. {end - timedelta(days=1):%Y-%m-%d} ...")
    landing.land(spark, settings, records, settings.home / "month")
    for view in settings.views.values():
        say(f"serving: recomputing {view.name} ...")
        recompute_view(spark, settings, view, start, end)
    [(batch, speed)] = engine.query(settings, f"SELECT count_if(is_final), count_if(NOT is_final) FROM {VIEW}")[1]
    return Data(start, end, len(records), batch, speed, time.monotonic() - began)


def _at(moment: datetime) -> str:
    return f"TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S}'"


def draw(rows: list, sizes: list[int], seed: int) -> list[list]:
    """Samples of ``rows``, one of each size, drawn seeded: no row is in two of them."""
    drawn = random.Random(seed).sample(rows, sum(sizes))
    bounds = [0, *itertools.accumulate(sizes)]
    return [drawn[a:b] for a, b in itertools.pairwise(bounds)]


def queries(settings: Deployment, data: Data, seed: int = 3) -> Queries:
    """Point queries at pages and minutes drawn from the view's batch rows, and range queries of each page:
    over the month (timed) and over its last 29 days (to warm a runner)."""
    rows = DeltaTable(settings.table(f"batch/{VIEW}")).to_pyarrow_table(columns=["page", "window_start"]).to_pylist()
    timed, warm, writes = (
        [
            f"SELECT * FROM \"{VIEW}\" WHERE page = '{r['page']}' AND window_start = {_at(r['window_start'])}"
            for r in sample
        ]
        for sample in draw(rows, [POINTS, POINTS, WRITES_POINTS], seed)
    )
    ranges = [
        [
            f'SELECT CAST(window_start AS DATE) AS day, sum(views) AS views FROM "{VIEW}" WHERE page = '
            f"'{page}' AND window_start >= {_at(start)} AND window_start < {_at(data.end)} GROUP BY 1 ORDER BY 1"
            for page in generator.PAGES
        ]
        for start in (data.start, data.start + timedelta(days=1))
    ]
    return Queries(timed, ranges[0], warm + ranges[1], writes)


def _timed(call: Callable[[str], object], queries: list[str], every: float = 0.0) -> tuple[list[float], list]:
    """Milliseconds of ``call`` on each query (started every ``every`` seconds, or back to back), and
    what each call returned."""
    times, results, began = [], [], time.perf_counter()
    for i, sql in enumerate(queries):
        time.sleep(max(0.0, began + i * every - time.perf_counter()))
        start = time.perf_counter()
        results.append(call(sql))
        times.append((time.perf_counter() - start) * 1000)
    return times, results


def _latencies(run: Runner, queries: list[str], rows: int) -> list[float]:
    """Milliseconds per query, each checked (after its timing) to give ``rows`` rows."""
    times, results = _timed(run, queries)
    for sql, found in zip(queries, results, strict=True):
        if len(found) != rows:
            raise RuntimeError(f"expected {rows} rows from {sql}, got {len(found)}")
    return times


def _throughput(run: Runner, queries: list[str]) -> float:
    """Queries/s of ``CLIENTS`` threads each running ``queries`` back to back (from an offset of its own)
    for ``SECONDS``."""
    done, deadline = [0] * CLIENTS, time.monotonic() + SECONDS

    def client(i: int) -> None:
        while time.monotonic() < deadline:
            run(queries[(i * len(queries) // CLIENTS + done[i]) % len(queries)])
            done[i] += 1

    began = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.monotonic() - began)


def measure(run: Runner, queries: Queries) -> Result:
    """Warm ``run`` with the warm-up queries, then time it on the others."""
    for sql in queries.warm:
        run(sql)
    return Result(
        {"point": _latencies(run, queries.points, 1), "range": _latencies(run, queries.ranges, DAYS)},
        _throughput(run, queries.points),
    )


def check_ms(settings: Deployment, queries: list[str]) -> list[float]:
    """Milliseconds of the sandbox's check (``sandbox.check``) of each query, against the relations the
    engine has, as ``engine.query`` checks a query it has not passed before."""
    con, known = sandbox.connect(settings.query_memory_limit, settings.query_threads), engine.with_data(settings)
    try:
        return _timed(lambda sql: sandbox.check(con, sql, known), queries)[0]
    finally:
        con.close()


def under_writes(spark: SparkSession, settings: Deployment, queries: list[str]) -> Writes:
    """Time the serving layer on ``queries``, one every ``WRITES_EVERY`` seconds, while the speed layer's
    fold commits micro-batches of ``BATCH_EVENTS`` events of the last minute, one after another (the first
    before the queries start)."""
    fold = Fold(spark, settings, speed_views(settings), "bench-writes")
    batches, stop = itertools.count(), threading.Event()

    def micro_batch() -> None:
        n, now = next(batches), datetime.now(UTC)
        records = generator.generate(now - timedelta(minutes=1), now, BATCH_EVENTS, seed=100 + n)
        fold(landing.kafka_records(spark, records, settings.home / f"writes-{n}"), n)

    def write() -> None:
        while not stop.is_set():
            micro_batch()

    def versions() -> dict[str, int]:
        return {name: DeltaTable(settings.table(name)).version() for name in WRITTEN}

    engine.watch(settings)
    micro_batch()
    for view in settings.views:  # the engine takes in the first micro-batch before the counts start
        engine.query(settings, f'SELECT count(*) FROM "{view}"')
    before, copied = versions(), engine.copied(settings)
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(write)
        try:
            began = time.monotonic()
            times = _timed(lambda sql: engine.query(settings, sql)[1], queries, WRITES_EVERY)[0]
            seconds, after, copied = time.monotonic() - began, versions(), engine.copied(settings) - copied
        finally:
            stop.set()
        writer.result()
    return Writes(
        times, seconds, {name: after[name] - before[name] for name in WRITTEN}, {name: copied[name] for name in WRITTEN}
    )


def run(
    settings: Deployment, count: int, say: Say
) -> tuple[Data, dict[str, Result], Queries, dict[str, list[float]], Writes]:
    """Build the data, measure the serving layer and Spark SQL with the same queries, time the sandbox's
    check alone, then the serving layer under writes."""
    spark = sparks.session(settings, "lambdalake-bench-serving")
    try:
        data = build(spark, settings, count, say)
        sql = queries(settings, data)
        session = spark_sql.session(spark, settings)
        say(f"serving: caching {', '.join(CACHED)} in the Spark SQL session ...")
        for name in CACHED:
            session.sql(f'CACHE TABLE "{name}"')
        runners: dict[str, Runner] = dict(
            zip(
                RUNNERS,
                (lambda text: engine.query(settings, text)[1], lambda text: session.sql(text).collect()),
                strict=True,
            )
        )
        results = {}
        for name, runner in runners.items():
            say(f"serving: timing {name} ...")
            result = results[name] = measure(runner, sql)
            say(
                f"  point p50 {statistics.median(result.latency_ms['point']):,.1f} ms, range p50 "
                f"{statistics.median(result.latency_ms['range']):,.1f} ms, {result.queries_per_second:,.1f} queries/s"
            )
        session.catalog.clearCache()
        checks = {"point": check_ms(settings, sql.points), "range": check_ms(settings, sql.ranges)}
        say(
            f"  sandbox check p50: point {statistics.median(checks['point']):,.2f} ms, "
            f"range {statistics.median(checks['range']):,.2f} ms"
        )
        say(f"serving: {WRITES_POINTS:,} point queries while micro-batches of {BATCH_EVENTS:,} events commit ...")
        writes = under_writes(spark, settings, sql.under_writes)
        say(
            f"  point p50 {statistics.median(writes.latency_ms):,.1f} ms; versions committed {writes.committed}, "
            f"copied by the engine {writes.copied}"
        )
    finally:
        spark.stop()
    return data, results, sql, checks, writes
