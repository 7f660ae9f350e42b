"""Batch: a day's recompute of every view against one plain Spark SQL job, its growth, and late events.

What a day's recompute of every view costs against the same aggregations written as one plain Spark
SQL job, how both grow with the day's events, and what correcting one late event costs against
rebuilding every day held.

The data is built in deployments of the bench's own, without Kafka: each day's generated events (the
default mix: late, resent and malformed ones among them) are landed in raw_events as the speed layer
lands them (``events.parse``, ``events.landed``), except the day's last hour, which goes through the
speed layer's fold (``speed_layer.fold``), so that the batch layer's corrections have speed rows to
compare with; a products changelog (creations, changes, deletions) makes the products dimension.

Two jobs recompute a day, in one Spark session of the local Spark the layers use (``infra.spark``;
JVM start-up not counted):

- the batch layer: ``batch_layer.recompute.recompute_day``, what the nightly ``batch_recompute`` task
  runs: the Great Expectations checks of the day's raw_events and of every view's rows, the six views
  compiled from their declarations, each replacing the day in its table, the corrections against the
  speed layer's rows and the ledger;
- the baseline, one plain Spark SQL job written by hand (``bench/batch.py``): the events of the day
  and the days either side read once, each event_id's first received copy kept and cached (``CACHE
  TABLE``), then each view's aggregation in SQL (the products dimension joined as of the purchase,
  the search's click as an ``EXISTS``, exact ``count(DISTINCT)``, sessions by window functions: a user's
  event starts a new one 30 minutes or more after the previous, as the view declares; Spark's
  ``session_window`` would also join events exactly 30 minutes apart), each replacing the day in a
  Delta table of its own.

After its first run on a day, each view's rows from the baseline are checked to equal the batch
layer's (floats to rounding); the bench stops if they differ. A time is the wall-clock time of the
call.

- **Ratio:** a day of N events; each job run once untimed, then 3 times, in turn; the median. Also
  the batch layer with its quality checks and corrections replaced by no-ops, to show their share.
- **Growth:** days of N, 2N and 4N events, a day apart in one deployment (a day's sessions read the
  day before and after); at 2N and 4N one run of each job.
- **Late event:** a week of days of N events each is made final by a full rebuild
  (``recompute_day`` over the whole week, after an untimed recompute of an empty day warms the
  deployment). Then one late event for the newest day goes through the speed layer's fold, which
  counts it in late_events, and the correction runs as ``late_data_recompute`` does it:
  ``batch_layer.stale.stale_days``, then ``recompute_day`` for each run of consecutive stale days. One
  run each.
"""

from __future__ import annotations

import bisect
import json
import math
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TypeVar
from unittest import mock

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from batch_layer import corrections, quality
from batch_layer.recompute import recompute_day
from batch_layer.stale import stale_days
from bench import landing
from domains.clickstream import PRODUCTS, generator
from infra import spark as sparks
from infra.deployment import Deployment
from infra.processes import Say
from infra.producer import Record
from lake import versions
from speed_layer.queries import ensure_tables
from views import changelog
from views.model import View
from views.timebase import DAY, UTC, day_start, ranges

BASELINE, BATCH, UNCHECKED = (
    "plain Spark SQL (baseline)",
    "batch layer (recompute_day)",
    "batch layer without quality checks and corrections",
)
#: The batch layer's target: at most this many times the plain Spark SQL job's time, at each size.
BATCH_RATIO = 1.2
SIZES = (1, 2, 4)  # the growth's days, in multiples of the ratio's day
WEEK = 7  # days held for the late event
SPEED = timedelta(hours=1)  # the end of each day that goes through the speed layer's fold
SLICE = 500_000  # records landed per append
LATE_PAGE = "/late"
T = TypeVar("T")

#: The baseline's read: the events of the day and the days either side, each event_id's first copy.
READ = """CACHE TABLE day_events AS
SELECT event_time, event_type, user_id, session_id, page, query, product_id, quantity, amount
FROM (SELECT *, row_number() OVER (PARTITION BY event_id
                                   ORDER BY ingested_at, kafka_timestamp, `partition`, `offset`) AS copy
      FROM raw_events WHERE event_date BETWEEN {first} AND {last})
WHERE copy = 1"""

#: The baseline's aggregation per view, over ``day_events``, for windows starting in [start, end).
SQL = {
    "page_views_per_minute": """
SELECT date_trunc('MINUTE', event_time) AS window_start,
       date_trunc('MINUTE', event_time) + INTERVAL 1 MINUTE AS window_end,
       page, count(*) AS views, count(DISTINCT user_id) AS unique_users
FROM day_events WHERE event_type = 'page_view' AND event_time >= {start} AND event_time < {end}
GROUP BY 1, 2, 3""",
    "active_users_hourly": """
SELECT date_trunc('HOUR', event_time) AS window_start, date_trunc('HOUR', event_time) + INTERVAL 1 HOUR AS window_end,
       count(DISTINCT user_id) AS active_users
FROM day_events WHERE event_time >= {start} AND event_time < {end}
GROUP BY 1, 2""",
    "revenue_by_category_hourly": """
SELECT date_trunc('HOUR', e.event_time) AS window_start,
       date_trunc('HOUR', e.event_time) + INTERVAL 1 HOUR AS window_end, coalesce(p.category, 'unknown') AS category,
       count(*) AS orders, sum(e.quantity) AS items, sum(e.amount) AS revenue
FROM day_events e LEFT JOIN products p ON p.product_id = e.product_id AND p.valid_from <= e.event_time
                                         AND (p.valid_to IS NULL OR e.event_time < p.valid_to)
WHERE e.event_type = 'purchase' AND e.event_time >= {start} AND e.event_time < {end}
GROUP BY 1, 2, 3""",
    "search_ctr_hourly": """
SELECT window_start, window_end, query, count(*) AS searches, count_if(clicked) AS clicks,
       CAST(count_if(clicked) AS DOUBLE) / count(*) AS ctr
FROM (SELECT date_trunc('HOUR', s.event_time) AS window_start,
             date_trunc('HOUR', s.event_time) + INTERVAL 1 HOUR AS window_end, s.query,
             EXISTS (SELECT 1 FROM day_events c
                     WHERE c.event_type = 'click' AND c.session_id = s.session_id AND c.query = s.query
                       AND c.event_time BETWEEN s.event_time AND s.event_time + INTERVAL 30 MINUTES) AS clicked
      FROM day_events s WHERE s.event_type = 'search' AND s.event_time >= {start} AND s.event_time < {end})
GROUP BY 1, 2, 3""",
    "sessions_hourly": """
SELECT date_trunc('HOUR', start) AS window_start, date_trunc('HOUR', start) + INTERVAL 1 HOUR AS window_end,
       count(*) AS sessions, avg(duration_s) AS avg_duration_s, avg(events) AS avg_events
FROM (SELECT min(event_time) AS start, count(*) AS events,
             (unix_micros(max(event_time)) - unix_micros(min(event_time))) / 1e6 AS duration_s
      FROM (SELECT user_id, event_time,
                   sum(starts) OVER (PARTITION BY user_id ORDER BY event_time ROWS UNBOUNDED PRECEDING) AS session
            FROM (SELECT user_id, event_time,
                         CASE WHEN event_time < lag(event_time) OVER (PARTITION BY user_id ORDER BY event_time)
                                                + INTERVAL 30 MINUTES THEN 0 ELSE 1 END AS starts
                  FROM day_events))
      GROUP BY user_id, session)
WHERE start >= {start} AND start < {end}
GROUP BY 1, 2""",
    "trending_products": """
SELECT window_start, window_end, product_id, purchases, revenue
FROM (SELECT window.start AS window_start, window.end AS window_end, product_id, count(*) AS purchases,
             sum(amount) AS revenue
      FROM day_events
      WHERE event_type = 'purchase' AND event_time >= {start} AND event_time < {end} + INTERVAL 10 MINUTES
      GROUP BY window(event_time, '10 minutes', '1 minute'), product_id)
WHERE window_start >= {start} AND window_start < {end}""",
}


@dataclass
class Day:
    """A measured day: its events and each job's timed runs, in seconds."""

    day: date
    events: int
    seconds: dict[str, list[float]]


@dataclass
class Late:
    """The late event's part: the days held, events per day, the stale days corrected, and seconds."""

    days: list[date]
    events: int  # per day
    stale: list[date]
    rebuild_seconds: float
    correction_seconds: float


def _at(moment: datetime | date) -> str:
    return f"TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S}'" if isinstance(moment, datetime) else f"DATE '{moment}'"


def baseline(spark: SparkSession, settings: Deployment, start: datetime, end: datetime) -> None:
    """The plain Spark SQL job: every view of ``SQL`` for the day ``[start, end)``, each replacing the
    day in its Delta table ``baseline/<view>``."""
    for name in ("raw_events", "products"):
        spark.read.format("delta").load(settings.table(name)).createOrReplaceTempView(name)
    spark.sql(READ.format(first=_at((start - DAY).date()), last=_at(end.date())))
    try:
        for name, sql in SQL.items():
            (
                spark.sql(sql.format(start=_at(start), end=_at(end)))
                .write.format("delta")
                .mode("overwrite")
                .option("replaceWhere", f"window_start >= {_at(start)} AND window_start < {_at(end)}")
                .save(settings.table(f"baseline/{name}"))
            )
    finally:
        spark.sql("DROP VIEW day_events")  # and its cache


def unchecked(spark: SparkSession, settings: Deployment, start: datetime, end: datetime) -> None:
    """``recompute_day`` with its quality checks and corrections replaced by no-ops: a view's rows are
    brought to the driver for its writer as the check would bring them, unchecked."""

    def rows_only(settings, view, rows, events, start, end) -> quality.Check:
        return quality.Check(f"view.{view.name}", (start.date(), start.date()), [], rows=rows.toArrow())

    with ExitStack() as stack:
        for module, name, stand_in in (
            (quality, "check_raw_events", lambda *args, **kwargs: None),
            (quality, "check_view", rows_only),
            (corrections, "record", lambda *args, **kwargs: None),
        ):
            stack.enter_context(mock.patch.object(module, name, stand_in))
        recompute_day(spark, settings, start, end)


def differences(view: View, ours: list[dict], theirs: list[dict]) -> list[str]:
    """How the baseline's rows of ``view`` (``theirs``) differ from the batch layer's, by window and
    key (floats to a relative 1e-9); empty if they are equal."""

    def keyed(rows: list[dict]) -> dict:
        return {(r["window_start"], *(r[k] for k in view.keys)): r for r in rows}

    a, b = keyed(ours), keyed(theirs)
    found = [
        f"{len(rows) - len(by)} windows twice in the {side}'s rows"
        for side, rows, by in (("batch layer", ours, a), ("baseline", theirs, b))
        if len(rows) != len(by)
    ]
    found += [f"{k}: only the batch layer has it" for k in a.keys() - b.keys()]
    found += [f"{k}: only the baseline has it" for k in b.keys() - a.keys()]
    found += [f"{k}: batch layer {a[k]}, baseline {b[k]}" for k in a.keys() & b.keys() if not _equal(a[k], b[k])]
    return sorted(found)


def _equal(ours: dict, theirs: dict) -> bool:
    return ours.keys() == theirs.keys() and all(
        math.isclose(value, theirs[c], rel_tol=1e-9)
        if isinstance(value, float) and isinstance(theirs[c], float)
        else value == theirs[c]
        for c, value in ours.items()
    )


def check(spark: SparkSession, settings: Deployment, start: datetime, end: datetime) -> None:
    """Raise unless every view's rows from the baseline equal the batch layer's for ``[start, end)``."""
    views = settings.views
    if set(views) != set(SQL):
        raise RuntimeError(f"the baseline has SQL for {sorted(SQL)}, the batch layer computes {sorted(views)}")
    within = (F.col("window_start") >= F.lit(start)) & (F.col("window_start") < F.lit(end))
    for name, view in views.items():
        ours, theirs = (
            [r.asDict() for r in spark.read.format("delta").load(path).where(within).collect()]
            for path in (versions.current(settings, name), settings.table(f"baseline/{name}"))
        )
        found = differences(view, ours, theirs) or ([] if ours else ["no rows at all"])
        if found:
            raise RuntimeError(
                f"{name} for {start:%Y-%m-%d}: the baseline's rows differ from the batch layer's "
                f"({len(found)} differences): {'; '.join(found[:5])}"
            )


def build(spark: SparkSession, settings: Deployment, days: dict[date, int], say: Say) -> None:
    """Land ``days[d]`` generated events on each day ``d`` (its last hour through the speed layer's
    fold) and a products changelog over the days."""
    ensure_tables(spark, settings)
    first, last = day_start(min(days)), day_start(max(days)) + DAY
    products = landing.kafka_records(
        spark, generator.products(first - DAY, last), settings.home / "products", settings.topic_of(PRODUCTS.topic)
    )
    changelog.changes(changelog.parse(products, PRODUCTS), PRODUCTS).write.format("delta").mode("append").save(
        settings.table(PRODUCTS.changes)
    )
    changelog.dimension(spark.read.format("delta").load(settings.table(PRODUCTS.changes)), PRODUCTS).write.format(
        "delta"
    ).mode("overwrite").save(settings.table(PRODUCTS.name))
    for day, count in sorted(days.items()):
        start = day_start(day)
        records = generator.generate(start, start + DAY, count, seed=day.toordinal())
        say(f"batch: landing {len(records):,} events of {day} ...")
        speed = bisect.bisect_left(records, start + DAY - SPEED, key=lambda r: r.send_at)
        for i in range(0, speed, SLICE):
            landing.land(spark, settings, records[i : min(i + SLICE, speed)], settings.home / f"{day}-{i}")
        landing.fold(spark, settings, records[speed:], settings.home / f"{day}-speed", f"bench-{day}")


def _timed(job: Callable[[], T]) -> tuple[float, T]:
    """Seconds ``job`` took, and what it returned."""
    began = time.perf_counter()
    done = job()
    return time.perf_counter() - began, done


def measure(
    spark: SparkSession, settings: Deployment, day: date, jobs: tuple[str, ...], runs: int, warm: bool, say: Say
) -> dict:
    """Seconds per timed run of each of ``jobs`` recomputing ``day``, in turn; the baseline's rows
    checked against the batch layer's after the first run (untimed if ``warm``)."""
    start, end = day_start(day), day_start(day) + DAY
    calls = {
        BASELINE: lambda: baseline(spark, settings, start, end),
        BATCH: lambda: recompute_day(spark, settings, start, end),
        UNCHECKED: lambda: unchecked(spark, settings, start, end),
    }
    seconds: dict[str, list[float]] = {job: [] for job in jobs}
    for run in range(runs + warm):
        for job in jobs:
            seconds[job].append(_timed(calls[job])[0])
            say(f"batch: {day}, {job}: {seconds[job][-1]:,.1f} s{' (untimed)' if warm and not run else ''}")
        if not run:
            check(spark, settings, start, end)
            say(f"batch: {day}: the baseline's rows equal the batch layer's for every view")
    return {job: times[warm:] for job, times in seconds.items()}


def _late_event(day: date) -> Record:
    """A page view of ``day`` at 23:30, sent now."""
    event = {
        "event_id": "bench-late-event",
        "event_type": "page_view",
        "user_id": "u0",
        "session_id": "bench-late",
        "page": LATE_PAGE,
        "event_time": f"{day_start(day) + DAY - timedelta(minutes=30):%Y-%m-%dT%H:%M:%SZ}",
    }
    return Record(datetime.now(UTC), b"u0", json.dumps(event).encode(), "late")


def _correct(spark: SparkSession, settings: Deployment) -> list[date]:
    """What ``late_data_recompute`` does: recompute each run of consecutive stale days together; the days."""
    days = stale_days(settings)
    for first, last in ranges(days):
        recompute_day(spark, settings, day_start(first), day_start(last) + DAY)
    return days


def late(spark: SparkSession, settings: Deployment, count: int, say: Say) -> Late:
    """A week of days of ``count`` events: a full rebuild, then the correction of one late event for
    the newest day."""
    today = datetime.now(UTC).date()
    days = [today - i * DAY for i in range(WEEK, 0, -1)]
    build(spark, settings, dict.fromkeys(days, count), say)
    first, end = day_start(days[0]), day_start(days[-1]) + DAY
    recompute_day(spark, settings, first - 3 * DAY, first - 2 * DAY)  # an empty day: the deployment's first recompute
    say(f"batch: full rebuild of {days[0]} .. {days[-1]} ...")
    rebuild, _ = _timed(lambda: recompute_day(spark, settings, first, end))
    say(f"batch: full rebuild: {rebuild:,.1f} s; one late event for {days[-1]} through the speed layer ...")
    landing.fold(spark, settings, [_late_event(days[-1])], settings.home / "late", "bench-late")
    correction, stale = _timed(lambda: _correct(spark, settings))
    say(f"batch: correction of {', '.join(map(str, stale))}: {correction:,.1f} s")
    shown = (
        spark.read.format("delta")
        .load(versions.current(settings, "page_views_per_minute"))
        .where(F.col("page") == LATE_PAGE)
        .count()
    )
    if days[-1] not in stale or stale_days(settings) or shown != 1:
        raise RuntimeError(
            f"the late event for {days[-1]} made {stale or 'no day'} stale, left "
            f"{stale_days(settings) or 'none'} stale and shows in {shown} page view windows"
        )
    return Late(days, count, stale, rebuild, correction)


def run(settings: Deployment, late_settings: Deployment, count: int, runs: int, say: Say) -> tuple[list[Day], Late]:
    """The ratio's day and the growth's, then the late event."""
    spark = sparks.session(settings, "lambdalake-bench-batch")
    try:
        today = datetime.now(UTC).date()
        sizes = {today - 2 * (len(SIZES) - i) * DAY: count * size for i, size in enumerate(SIZES)}
        build(spark, settings, sizes, say)
        (day, events), *growth = sizes.items()
        measured = [
            Day(day, events, measure(spark, settings, day, (BASELINE, BATCH, UNCHECKED), runs=runs, warm=True, say=say))
        ]
        measured += [
            Day(day, events, measure(spark, settings, day, (BASELINE, BATCH), runs=1, warm=False, say=say))
            for day, events in growth
        ]
        return measured, late(spark, late_settings, count, say)
    finally:
        spark.stop()
