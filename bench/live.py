"""Live load: the highest steady rate the speed layer keeps up with, and how fresh the merged views are.

Load comes from separate producer processes (``multiprocessing``, one per 5,000 events/s), each sending
page views of a fixed pool of users stamped with the current time, so the producers are not the
bottleneck and the steady stream opens no new sessions and no new users once it runs.

- **Steady rate:** at each rate tried, the load runs for ``seconds``; the lag (Kafka records not yet
  processed: the broker's end offsets minus the speed layer's last committed offsets, from its health
  report) is sampled every second; a second without a reading counts as none, not as 0. The rate is kept up with
  when the producers reached it (at least 95% of it, counted from Kafka's end offsets over the run)
  and the median lag of the last minute is at most that of the second minute plus five seconds of
  input.
- **Freshness:** at a steady 1,000 events/s, after a minute of warm-up, markers are sent one after the
  other: a new user's purchase of a new product, page view of a new page and search for a new query,
  each marker a row or an increment of its own in every view. Each view is polled through
  ``serving_layer.engine.query`` (what ``lambdalake query`` runs) every 100 ms until the marker shows;
  its freshness is the time from the send to the end of the poll that saw it.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from infra import kafka, services
from infra.settings import Settings
from serving_layer import engine

USERS = 200
PAGES = tuple(f"/page/{i}" for i in range(20))
PER_PRODUCER = 5_000
POLL = 0.1
MARKER_TIMEOUT = 30


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _produce(bootstrap: str, topic: str, rate: float, seconds: float, seed: int) -> None:
    """Send ``rate`` page views per second for ``seconds`` (a producer process)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    began, sent, tick = time.monotonic(), 0, 0.05
    while (elapsed := time.monotonic() - began) < seconds:
        now = _stamp(datetime.now(timezone.utc))
        for _ in range(int(rate * (elapsed + tick)) - sent):
            user = f"steady-{sent % USERS}"
            event = {"event_id": f"{seed}-{sent}", "event_type": "page_view", "event_time": now, "user_id": user,
                     "session_id": user, "page": PAGES[sent % len(PAGES)]}
            producer.send(topic, key=user.encode(), value=json.dumps(event).encode())
            sent += 1
        time.sleep(max(0.0, began + elapsed + tick - time.monotonic()))
    producer.flush()
    producer.close()


def load(settings: Settings, rate: float, seconds: float, seed: int) -> list[multiprocessing.Process]:
    """Start producer processes sending ``rate`` events/s in all for ``seconds``."""
    count = max(1, math.ceil(rate / PER_PRODUCER))
    procs = [multiprocessing.Process(target=_produce, daemon=True,
                                     args=(settings.kafka_bootstrap, settings.topic, rate / count, seconds,
                                           seed * 100 + i)) for i in range(count)]
    for proc in procs:
        proc.start()
    return procs


@dataclass
class Steady:
    rate: float
    kept_up: bool
    lag_second_minute: float
    lag_last_minute: float
    processed_per_second: float
    #: What the producers sent, per second (Kafka's end offsets before and after).
    produced_per_second: float


def steady(settings: Settings, rate: float, seconds: float, seed: int) -> Steady:
    """Run the load at ``rate`` for ``seconds`` and judge whether the lag stayed bounded."""
    began, lags, start_done, start_sent = time.monotonic(), [], _processed(settings), _sent(settings)
    procs = load(settings, rate, seconds, seed)
    while time.monotonic() - began < seconds:
        lag = (services.speed_health(settings) or {}).get("lag")
        if lag is not None:  # no report, or the broker did not answer: unknown, not 0
            lags.append((time.monotonic() - began, lag))
        time.sleep(1)
    elapsed = time.monotonic() - began
    processed = (_processed(settings) - start_done) / elapsed
    for proc in procs:
        proc.join()
    produced = (_sent(settings) - start_sent) / elapsed
    second = statistics.median([lag for t, lag in lags if 60 <= t < 120] or [math.inf])
    last = statistics.median([lag for t, lag in lags if t >= seconds - 60] or [math.inf])
    kept_up = produced >= 0.95 * rate and math.isfinite(last) and last <= second + 5 * rate
    return Steady(rate, kept_up, second, last, processed, produced)


def _sent(settings: Settings) -> int:
    return sum(kafka.end_offsets(settings, settings.topic).values())


def _processed(settings: Settings) -> int:
    return sum(((services.speed_health(settings) or {}).get("processed_offsets") or {}).values())


def _checks(marker: int, hour: str) -> dict[str, str]:
    """Per view, SQL whose single value grows when marker ``marker`` shows (for views without a key
    of its own: the value in the marker's hour)."""
    at = f"window_start = TIMESTAMPTZ '{hour}'"
    return {
        "page_views_per_minute": f"SELECT count(*) FROM page_views_per_minute WHERE page = '/marker-{marker}'",
        "trending_products": f"SELECT count(*) FROM trending_products WHERE product_id = 'marker-{marker}'",
        "search_ctr_hourly": f"SELECT count(*) FROM search_ctr_hourly WHERE query = 'marker-{marker}'",
        "revenue_by_category_hourly": f"SELECT coalesce(max(orders), 0) FROM revenue_by_category_hourly "
                                      f"WHERE category = 'unknown' AND {at}",
        "active_users_hourly": f"SELECT coalesce(max(active_users), 0) FROM active_users_hourly WHERE {at}",
        "sessions_hourly": f"SELECT coalesce(max(sessions), 0) FROM sessions_hourly WHERE {at}",
    }


def _values(settings: Settings, checks: dict[str, str]) -> dict[str, int]:
    sql = "SELECT " + ", ".join(f"({q}) AS {name}" for name, q in checks.items())
    columns, [row] = engine.query(settings, sql)
    return dict(zip(columns, row))


def _marker_events(marker: int, now: datetime) -> list[tuple[bytes, bytes]]:
    user, stamp = f"marker-user-{marker}", _stamp(now)
    common = {"event_time": stamp, "user_id": user, "session_id": user}
    events = [
        {"event_type": "purchase", "product_id": f"marker-{marker}", "quantity": 1, "amount": 1.0},
        {"event_type": "page_view", "page": f"/marker-{marker}"},
        {"event_type": "search", "query": f"marker-{marker}"},
    ]
    return [(user.encode(), json.dumps({"event_id": f"marker-{marker}-{i}", **common, **e}).encode())
            for i, e in enumerate(events)]


def freshness(settings: Settings, markers: int, warm_up: float = 60, rate: float = 1000) -> dict[str, list[float]]:
    """Seconds from send to visible, per view, for ``markers`` markers sent over a steady ``rate``."""
    from kafka import KafkaProducer

    procs = load(settings, rate, warm_up + markers * (MARKER_TIMEOUT / 3) + 60, seed=1)
    time.sleep(warm_up)
    producer = KafkaProducer(bootstrap_servers=settings.kafka_bootstrap, linger_ms=0, acks=1)
    seen: dict[str, list[float]] = {}
    try:
        for marker in range(markers):
            now = datetime.now(timezone.utc)
            checks = _checks(marker, now.replace(minute=0, second=0, microsecond=0).isoformat())
            before = _values(settings, checks)
            sent = time.monotonic()
            for key, value in _marker_events(marker, now):
                producer.send(settings.topic, key=key, value=value)
            producer.flush()
            waiting = set(checks)
            while waiting and time.monotonic() - sent < MARKER_TIMEOUT:
                polled = time.monotonic()
                values = _values(settings, {name: checks[name] for name in waiting})
                for name in [n for n in waiting if values[n] > before[n]]:
                    seen.setdefault(name, []).append(time.monotonic() - sent)
                    waiting.discard(name)
                time.sleep(max(0.0, POLL - (time.monotonic() - polled)))
            for name in waiting:
                seen.setdefault(name, []).append(math.inf)
    finally:
        producer.close()
        for proc in procs:
            proc.terminate()
    return seen


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]
