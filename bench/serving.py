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
  the local Spark the layers use (``infra.spark``), each query's rows collected to the driver.

Each query is run once untimed on a runner before it is timed there. A latency is the wall-clock time
from the call to the rows in Python.

- **Point:** one page's one minute of page_views_per_minute; pages and minutes drawn (seeded) from
  the rows the month has.
- **Range:** one page's whole month of page_views_per_minute, summed per day (30 rows).
- **Throughput:** 4 threads each run the point queries back to back for a fixed time; queries/s in all.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from deltalake import DeltaTable

from batch_layer.recompute import recompute_view
from bench import landing
from domains.clickstream import generator
from infra import spark as sparks
from infra.settings import Settings
from serving_layer import engine, spark_sql
from speed_layer.queries import ensure_tables
from views import all_views

DAYS = 30
VIEW = "page_views_per_minute"
POINTS = 100  # point queries per runner (range queries: one per page)
CLIENTS = 4
SECONDS = 20  # the throughput test's duration per runner
SPEED_EVENTS = 5_000
RUNNERS = ("serving layer", "Spark SQL (baseline)")

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
class Result:
    #: Milliseconds per query, by kind ("point", "range").
    latency_ms: dict[str, list[float]]
    queries_per_second: float


def build(spark, settings: Settings, count: int, say) -> Data:
    """Fold the last hour's events as speed rows, land ``count`` events of the 30 days before today
    (UTC) and recompute every view over them."""
    began, now = time.monotonic(), datetime.now(timezone.utc)
    end = now.replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - timedelta(days=DAYS)
    ensure_tables(spark, settings)
    say(f"serving: folding {SPEED_EVENTS:,} events of the last hour into the speed views ...")
    recent = generator.generate(now - timedelta(hours=1), now, SPEED_EVENTS, seed=2)
    landing.fold(spark, settings, recent, settings.home / "recent", "bench")
    records = generator.generate(start, end, count, seed=1)
    say(f"serving: landing {len(records):,} events of {start:%Y-%m-%d} .. {end - timedelta(days=1):%Y-%m-%d} ...")
    landing.land(spark, settings, records, settings.home / "month")
    for view in all_views(settings.view_modules, settings.domain).values():
        say(f"serving: recomputing {view.name} ...")
        recompute_view(spark, settings, view, start, end)
    [(batch, speed)] = engine.query(settings, f"SELECT count_if(is_final), count_if(NOT is_final) FROM {VIEW}")[1]
    return Data(start, end, len(records), batch, speed, time.monotonic() - began)


def _at(moment: datetime) -> str:
    return f"TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S}'"


def queries(settings: Settings, data: Data, seed: int = 3) -> tuple[list[str], list[str]]:
    """The point queries, at pages and minutes drawn from the view's batch rows, and the range queries."""
    rows = DeltaTable(settings.table(f"batch/{VIEW}")).to_pyarrow_table(columns=["page", "window_start"]).to_pylist()
    points = [f"SELECT * FROM \"{VIEW}\" WHERE page = '{r['page']}' AND window_start = {_at(r['window_start'])}"
              for r in random.Random(seed).sample(rows, POINTS)]
    ranges = [f"SELECT CAST(window_start AS DATE) AS day, sum(views) AS views FROM \"{VIEW}\" WHERE page = '{page}' "
              f"AND window_start >= {_at(data.start)} AND window_start < {_at(data.end)} GROUP BY 1 ORDER BY 1"
              for page in generator.PAGES]
    return points, ranges


def _latencies(run: Runner, queries: list[str], rows: int) -> list[float]:
    """Milliseconds per query, each run once untimed first (and checked to give ``rows`` rows)."""
    for sql in queries:
        if len(run(sql)) != rows:
            raise RuntimeError(f"expected {rows} rows from {sql}")
    times = []
    for sql in queries:
        began = time.perf_counter()
        run(sql)
        times.append((time.perf_counter() - began) * 1000)
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


def measure(run: Runner, points: list[str], ranges: list[str]) -> Result:
    return Result({"point": _latencies(run, points, 1), "range": _latencies(run, ranges, DAYS)},
                  _throughput(run, points))


def run(settings: Settings, count: int, say) -> tuple[Data, dict[str, Result], list[str], list[str]]:
    """Build the data, then measure the serving layer and Spark SQL with the same queries."""
    spark = sparks.session(settings, "lambdalake-bench-serving")
    try:
        data = build(spark, settings, count, say)
        points, ranges = queries(settings, data)
        session = spark_sql.session(spark, settings)
        runners = dict(zip(RUNNERS, (lambda sql: engine.query(settings, sql)[1],
                                     lambda sql: session.sql(sql).collect())))
        results = {}
        for name, runner in runners.items():
            say(f"serving: timing {name} ...")
            result = results[name] = measure(runner, points, ranges)
            say(f"  point p50 {statistics.median(result.latency_ms['point']):,.1f} ms, range p50 "
                f"{statistics.median(result.latency_ms['range']):,.1f} ms, {result.queries_per_second:,.1f} queries/s")
    finally:
        spark.stop()
    return data, results, points, ranges
