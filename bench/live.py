"""Live load: the highest steady rate the speed layer keeps up with, and how fresh the merged views are.

The load is the backlog's full event mix (browsing sessions, late, resent and malformed records; the
clickstream generator's), each record sent at its time by producer processes (one per 2,500 events/s,
with librdkafka's client, batching up to 100 ms of records) that generate their share before the load
starts, so the producers are not the bottleneck. The rate is steady from the load's first second: the
sessions begun up to the longest a session lasts (28 minutes) before it send their later events in it
too. (Runs before 2026-12-07 had every session begin in the load, whose rate then climbed as sessions
piled up: a five-minute run at a rate sent 0.6x it in its first half minute and 1.5x in its last.)

- **Steady rate:** at each rate tried, the load runs for `seconds`, its users and sessions growing as in
  the backlog (a user per 20 events). The rate is kept up with when the producers reached it (at least
  95% of it, counted from Kafka's end offsets), the speed layer processed at least 98% of what was
  produced over the run (the offsets of its last committed micro-batch), and the true lag at the end
  (the broker's end offsets minus those, from its health report) is at most 5 s of input.
- **Freshness:** over the same mix by a fixed pool of 200 users, at 1,000 events/s and at half the
  highest steady rate, each on a deployment of its own: after a minute of warm-up no event of the load
  opens a session or brings a user new to its hour. Markers are then sent one after the other, each
  after a wait drawn uniformly below a second, so that it comes at any moment of a micro-batch (sent as
  soon as the one before showed, it would come just after a commit, at the same moment of each): a new
  user's purchase of a new product (its own category sent to the products changelog before the load),
  page view of a new page and search for a new query, each a row or an increment of its own in every
  view (its user one that active_users_hourly's HyperLogLog sketch of the hour counts: `_marker_user`).
  Each view, and raw_events, is polled by a thread of its own through `serving_layer.engine.query`
  (what `lambdalake query` runs) until the marker shows; its freshness is the time from the send to the
  end of the poll that saw it. A poller looks at the Delta log of the table the marker comes through
  (speed_partials for a view, raw_events for itself) every 10 ms and polls when it changed, and at least
  every second: seven pollers querying every 100 ms took half a core from the two the speed layer shares
  with them. A marker waits out the first minute of an hour, in which the pool's users enter it.
- **The floor:** the same load and markers against the bare Structured Streaming job
  (`bench/bare_stream.py`) writing a raw_events table of its own, polled the same way.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import multiprocessing
import os
import random
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from domains.clickstream import generator
from infra import kafka, producer, services
from infra.deployment import Deployment
from lake import sketches
from serving_layer import engine
from views import tables
from views.compile import SKETCH_LGK

PER_PRODUCER = 2_500
#: The rate of the freshness load that the speed layer's freshness targets name.
FRESH_RATE = 1_000
#: Steady rates tried, as shares of the median drain rate with every view: in this order, up to the first
#: that is not kept up with (from a quarter, 5,900 events/s, kept up with on 2 cores where a half was not;
#: the steps above a half tell how close a run comes to the target of 0.8).
STEADY_SHARES = (0.25, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25)
#: A load producer's linger (ms) and the seconds between its sends: batched as a producer of thousands of
#: records/s is. At 5 ms and 0.01 s the broker took 0.50 core and the producers 0.22 at 11,400 events/s,
#: CPU the speed layer shares on 2 cores; at 100 ms and 0.05 s, 0.25 and 0.08.
LINGER_MS, TICK = 100, 0.05
#: A load starts once its producers may have generated their share, at this share of the speed one core
#: generated a sample of the same load at just before (:func:`_generated_per_second`): they share the
#: machine's cores with one another and the services. :meth:`Load.begin` refuses a load that was not ready.
GENERATING_SHARE = 0.5
#: Records of that sample.
SAMPLE = 20_000
#: The freshness load's users.
USERS = 200
WARM_UP = 60
#: Seconds between looks at the Delta log a relation's marker comes through; at most between polls.
LOOK, POLL = 0.01, 1.0
MARKER_TIMEOUT = 30
#: Seconds of load a freshness run plans per marker; markers stop when the load does.
PER_MARKER = 6
#: Before each marker, a wait drawn (seeded) uniformly below this many seconds.
MARKER_SPACING = 1.0
#: What a freshness run polls: every view, and raw_events.
RELATIONS = (
    "raw_events",
    "page_views_per_minute",
    "trending_products",
    "search_ctr_hourly",
    "revenue_by_category_hourly",
    "active_users_hourly",
    "sessions_hourly",
)


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _produce(
    bootstrap: str,
    topic: str,
    start: float,
    rate: float,
    seconds: float,
    users: int | None,
    seed: int,
    ready: multiprocessing.Queue,
) -> None:
    """Generate ``rate`` events per second over ``seconds`` from ``start`` (seconds since the epoch), say
    when on ``ready``, then send each at its time (a producer process)."""
    began = datetime.fromtimestamp(start, UTC)
    records = generator.generate(
        began, began + timedelta(seconds=seconds), round(rate * seconds), seed=seed, shaped=False, users=users
    )
    ready.put(time.time())
    sender = _sender(bootstrap, linger_ms=LINGER_MS)
    sent = 0
    while sent < len(records):
        due = bisect.bisect_right(records, datetime.now(UTC), lo=sent, key=lambda r: r.send_at)
        _send(sender, topic, [{"key": record.key, "value": record.value} for record in records[sent:due]])
        sent = due
        time.sleep(TICK)
    sender.flush()


def _send(sender, topic: str, messages: list[dict]) -> None:
    """Queue ``messages`` (dicts of key and value) in one call into librdkafka, those it refused for a
    full queue again once it delivered some."""
    from confluent_kafka import KafkaError

    while messages:
        sender.produce_batch(topic, messages)
        refused = [m for m in messages if "_error" in m]
        errors = [m.pop("_error") for m in refused]
        if any(error.code() != KafkaError._QUEUE_FULL for error in errors):
            raise RuntimeError(f"librdkafka refused a record of the load: {errors[0]}")
        if refused:  # its queue is full: let it deliver some first
            sender.poll(0.1)
        messages = refused
    sender.poll(0)


def _sender(bootstrap: str, linger_ms: int):
    """A producer of librdkafka (confluent-kafka): 9 µs of CPU a record sent by ``produce`` here (7 by
    :func:`_send`, its dicts built as it sends: held for a whole load, they would take 184 bytes a record
    beside its 480), where kafka-python's took 128 µs, a third of a core at 2,500 records/s, taken from
    the speed layer on a 2-core machine."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "acks": 1})


@dataclass
class Load:
    """Producer processes sending from ``start`` (seconds since the epoch) for ``seconds``."""

    procs: list[multiprocessing.Process]
    start: float
    seconds: float
    #: When each producer had generated its records (seconds since the epoch), one put each.
    ready: multiprocessing.Queue

    @property
    def end(self) -> float:
        return self.start + self.seconds

    def begin(self) -> None:
        """Wait until the load starts. A producer that finished generating after the start would send
        every record due meanwhile at once, a burst instead of the rate: such a load is refused."""
        latest = max(self.ready.get(timeout=max(0.0, self.start - time.time()) + 600) for _ in self.procs)
        if latest > self.start:
            raise RuntimeError(
                f"the load's producers had generated their records {latest - self.start:.0f} s after "
                f"its start: bench.live.GENERATING_SHARE is too high for this machine"
            )
        time.sleep(max(0.0, self.start - time.time()))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.join()


def _generated_per_second(seconds: float, users: int | None) -> float:
    """Records per second one core generates of a load of ``seconds``, timed on :data:`SAMPLE` of them
    (per record, a short load costs more: its sessions begun before it are more of those generated)."""
    began, timed = datetime.now(UTC), time.perf_counter()
    generator.generate(began, began + timedelta(seconds=seconds), SAMPLE, seed=0, shaped=False, users=users)
    return SAMPLE / (time.perf_counter() - timed)


def load(settings: Deployment, rate: float, seconds: float, seed: int, users: int | None = None) -> Load:
    """Producer processes that send ``rate`` events/s in all for ``seconds``, from when they may have
    generated their share."""
    count = max(1, math.ceil(rate / PER_PRODUCER))
    cores = min(count, os.cpu_count() or 1)
    speed = GENERATING_SHARE * cores * _generated_per_second(seconds, users)
    start = time.time() + 5 + rate * seconds / speed
    ready: multiprocessing.Queue = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(
            target=_produce,
            daemon=True,
            args=(settings.kafka_bootstrap, settings.topic, start, rate / count, seconds, users, seed * 100 + i, ready),
        )
        for i in range(count)
    ]
    for proc in procs:
        proc.start()
    return Load(procs, start, seconds, ready)


@dataclass
class Steady:
    rate: float
    #: What the producers sent (Kafka's end offsets) and what the speed layer processed, per second.
    produced_per_second: float
    processed_per_second: float
    #: The true lag at the end of the run (inf: unknown).
    lag_at_end: float
    kept_up: bool


def steady(settings: Deployment, rate: float, seconds: float, seed: int) -> Steady:
    """Run the full mix at ``rate`` for ``seconds``; whether the speed layer kept up with it."""
    run = load(settings, rate, seconds, seed)
    try:
        run.begin()
        sent, done = _sent(settings), _processed(settings)
        time.sleep(max(0.0, run.end - time.time()))
        produced, processed = _sent(settings) - sent, _processed(settings) - done
        report = services.speed_health(settings)
    finally:
        run.stop()
    # no report, or the broker did not answer: unknown, not 0
    lag = math.inf if report is None or report.lag is None else float(report.lag)
    return Steady(rate, produced / seconds, processed / seconds, lag, kept_up(rate, seconds, produced, processed, lag))


def kept_up(rate: float, seconds: float, produced: int, processed: int, lag: float) -> bool:
    """Whether a run at ``rate`` for ``seconds`` was kept up with: the producers reached 95% of the rate,
    98% of what they produced was processed, and the lag at the end is at most 5 s of input."""
    return produced >= 0.95 * rate * seconds and processed >= 0.98 * produced and lag <= 5 * rate


def _sent(settings: Deployment) -> int:
    return sum(kafka.end_offsets(settings, settings.topic).values())


def _processed(settings: Deployment) -> int:
    report = services.speed_health(settings)
    return report.processed if report else 0


def _checks(marker: int, now: datetime) -> dict[str, str]:
    """Per relation, SQL whose single value grows when marker ``marker`` (sent at ``now``) shows (for
    views without a key of its own: the value in the marker's hour)."""
    at = f"window_start = TIMESTAMPTZ '{now.replace(minute=0, second=0, microsecond=0).isoformat()}'"
    since = f"TIMESTAMPTZ '{(now - timedelta(seconds=1)).isoformat()}'"
    return {
        "raw_events": f"SELECT count(*) FROM raw_events WHERE event_date = DATE '{now.date()}' "
        f"AND event_time >= {since} AND event_id = 'marker-{marker}-1'",
        "page_views_per_minute": f"SELECT count(*) FROM page_views_per_minute WHERE page = '/marker-{marker}'",
        "trending_products": f"SELECT count(*) FROM trending_products WHERE product_id = 'marker-{marker}'",
        "search_ctr_hourly": f"SELECT count(*) FROM search_ctr_hourly WHERE query = 'marker-{marker}'",
        "revenue_by_category_hourly": f"SELECT count(*) FROM revenue_by_category_hourly "
        f"WHERE category = 'marker-{marker}'",
        "active_users_hourly": f"SELECT coalesce(max(active_users), 0) FROM active_users_hourly WHERE {at}",
        "sessions_hourly": f"SELECT coalesce(max(sessions), 0) FROM sessions_hourly WHERE {at}",
    }


def _value(settings: Deployment, sql: str) -> int:
    _, [[value]] = engine.query(settings, sql)
    return value


def _log_stamp(settings: Deployment, relation: str) -> int:
    """When the Delta log of the table that brings ``relation`` its rows last changed (ns)."""
    table = tables.RAW_EVENTS if relation == tables.RAW_EVENTS.name else tables.SPEED_PARTIALS
    try:
        return os.stat(Path(table.path(settings)) / "_delta_log").st_mtime_ns
    except FileNotFoundError:
        return 0


def _poll(settings: Deployment, relation: str, sql: str, before: int, sent: float) -> float:
    """Seconds from ``sent`` to the end of the first poll of ``sql`` (about ``relation``) whose value
    exceeds ``before``: a poll each time the relation's Delta log changed, and at least every :data:`POLL`."""
    polled, stamp = -math.inf, None
    while time.monotonic() - sent < MARKER_TIMEOUT:
        now = _log_stamp(settings, relation)
        if now != stamp or time.monotonic() - polled >= POLL:
            stamp, polled = now, time.monotonic()
            if _value(settings, sql) > before:
                return time.monotonic() - sent
        time.sleep(LOOK)
    return math.inf


#: The view that counts a marker's user in a HyperLogLog sketch, and the state that holds it.
SKETCHED = ("active_users_hourly", "active_users_sketch")


def counted(sketch: bytes | None, users: Iterable[str]) -> str:
    """The first of ``users`` whose addition to ``sketch`` (a union of Spark's HyperLogLog sketches, or
    none) raises its estimate."""
    before = sketches.estimate(sketch) or 0
    return next(
        u
        for u in users
        if (sketches.estimate(sketches.union([sketch, sketches.sketch_of([u], SKETCH_LGK)])) or 0) > before
    )


def _marker_user(settings: Deployment, marker: int, now: datetime, relations: tuple[str, ...]) -> str:
    """The user of marker ``marker`` (sent at ``now``; ``relations`` polled): one that
    active_users_hourly's sketch of the hour counts. A HyperLogLog sketch counts a new user only if its
    hash raises a register: with about 400 users in an hour, 6-7% of new ones leave its estimate as it
    was, so their markers never showed there (a soak probe: 4 of 45 in a 5-minute window, late in an
    hour). So the first of ``marker-user-N``, ``marker-user-N-1``, ... that raises the estimate of the
    union of the hour's speed partials (what the serving layer merges); after the warm-up no event of
    the load brings a user new to its hour, so nothing else raises it meanwhile."""
    first, (view, state) = f"marker-user-{marker}", SKETCHED
    if view not in relations:
        return first
    hour = now.replace(minute=0, second=0, microsecond=0)
    rows = (
        DeltaTable(tables.SPEED_PARTIALS.path(settings))
        .to_pyarrow_dataset()
        .to_table(
            columns=[view],
            filter=(ds.field("view") == view) & (ds.field("window_hour") == pa.scalar(hour, pa.timestamp("us", "UTC"))),
        )
    )
    hour_sketch = sketches.union(rows.column(view).combine_chunks().field(state).to_pylist())
    return counted(hour_sketch, (first if n == 0 else f"{first}-{n}" for n in itertools.count()))


def _marker_events(marker: int, now: datetime, user: str) -> list[tuple[bytes, bytes]]:
    stamp = _stamp(now)
    common = {"event_time": stamp, "user_id": user, "session_id": user}
    events: list[dict[str, object]] = [
        {"event_type": "purchase", "product_id": f"marker-{marker}", "quantity": 1, "amount": 1.0},
        {"event_type": "page_view", "page": f"/marker-{marker}"},
        {"event_type": "search", "query": f"marker-{marker}"},
    ]
    return [
        (user.encode(), json.dumps({"event_id": f"marker-{marker}-{i}", **common, **e}).encode())
        for i, e in enumerate(events)
    ]


def marker_products(settings: Deployment, markers: range) -> None:
    """Give each marker's product a category of its own, in the products changelog."""
    now = datetime.now(UTC)
    [products] = [d for d in settings.dimensions if d.name == "products"]
    records = [
        producer.Record(
            now,
            f"marker-{m}".encode(),
            json.dumps(
                {"product_id": f"marker-{m}", "category": f"marker-{m}", "price": 1.0, "updated_at": _stamp(now)}
            ).encode(),
            "product",
        )
        for m in markers
    ]
    producer.send_changelog(settings, records, settings.topic_of(products.topic))


class _MicroBatches:
    """The speed layer's micro-batches with input while it runs, from its health report: (records,
    seconds) by batch id (none for a job without one)."""

    def __init__(self, settings: Deployment):
        self.seen: dict[int, tuple[int, float]] = {}
        self._settings, self._done = settings, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._done.wait(0.2):
            report = services.speed_health(self._settings)
            query = report.queries.get("landing") if report else None
            if query and query.input_rows and query.batch_id is not None:
                self.seen[query.batch_id] = (query.input_rows, query.durations_ms.get("triggerExecution", 0) / 1000)

    def __enter__(self) -> _MicroBatches:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._done.set()
        self._thread.join()


@dataclass
class Fresh:
    rate: float
    #: Per relation polled, seconds from send to visible, a marker each (inf: not seen in MARKER_TIMEOUT).
    seconds: dict[str, list[float]]
    #: The speed layer's micro-batches with input during the markers: (records, seconds).
    batches: list[tuple[int, float]] = field(default_factory=list)


def freshness(
    settings: Deployment, markers: int, rate: float, first: int = 0, relations: tuple[str, ...] = RELATIONS
) -> Fresh:
    """How fresh ``relations`` are under the load at ``rate``: markers ``first`` .. ``first + markers - 1``."""
    numbers = range(first, first + markers)
    if "revenue_by_category_hourly" in relations:
        marker_products(settings, numbers)
    run = load(settings, rate, WARM_UP + markers * PER_MARKER + MARKER_TIMEOUT, seed=first + 1, users=USERS)
    try:
        run.begin()
        time.sleep(WARM_UP)
        seen, batches = markers_seen(settings, numbers, relations, run.end - MARKER_TIMEOUT)
    finally:
        run.stop()
    if not all(seen.values()):
        raise RuntimeError(f"the load at {rate:,.0f} events/s ended before a marker was sent")
    return Fresh(rate, seen, batches)


def markers_seen(
    settings: Deployment, numbers: range, relations: tuple[str, ...], until: float
) -> tuple[dict[str, list[float]], list[tuple[int, float]]]:
    """Send markers ``numbers`` one after the other until ``until`` (seconds since the epoch): per
    relation, the seconds each took to show; and the micro-batches with input meanwhile."""
    sender, spacing = _sender(settings.kafka_bootstrap, linger_ms=0), random.Random(numbers.start)
    seen: dict[str, list[float]] = {name: [] for name in relations}
    with _MicroBatches(settings) as batches, ThreadPoolExecutor(len(relations)) as pool:
        for marker in numbers:
            time.sleep(spacing.uniform(0, MARKER_SPACING))
            if time.time() > until:
                break
            now = datetime.now(UTC)
            if now.minute == 0:
                time.sleep(60 - now.second)
                now = datetime.now(UTC)
            user = _marker_user(settings, marker, now, relations)
            checks = {name: sql for name, sql in _checks(marker, now).items() if name in relations}
            before = dict(zip(checks, pool.map(lambda sql: _value(settings, sql), checks.values()), strict=True))
            sent = time.monotonic()
            for key, value in _marker_events(marker, now, user):
                sender.produce(settings.topic, key=key, value=value)
            sender.flush()
            took = pool.map(partial(_poll, settings, sent=sent), checks, checks.values(), before.values())
            for name, seconds in zip(checks, took, strict=True):
                seen[name].append(seconds)
    return seen, list(batches.seen.values())


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]
