"""The sustained rate of the speed layer, against Spark reading the same topic as a plain batch.

A backlog of generated events (the default mix: late, resent and malformed ones among them, event
times over the last hour) is produced to the benchmark's own broker first. Then the speed layer starts,
with the deployment's default trigger and ``max_offsets_per_trigger`` set to a fixed batch size, and
drains it. Each query's last progress in the health report (start, input rows, processed rows per
second) gives the start and end of every micro-batch in the speed layer's own clock. The rates count
the records from the start of the second landing batch (the first one warms the JVM up) to
- landing: the end of the landing batch that reached Kafka's end offsets, and
- landing + views: that, or the end of the last view batch that read new rows if later (known once
  every view query has run a batch that began after the landing's end).

Baseline, same run, same broker, speed layer stopped: Spark reads the whole topic as a batch
(``spark.read.format("kafka")``) and sums the payload lengths, so every record is fetched; the median of
three reads, the first one cold.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from infra import generator, kafka, processes, producer, services
from infra import spark as sparks
from infra.settings import Settings

#: The benchmark's own ports, beside a demo (9092, 8080) and the tests (19092, 18080).
PORTS = {"kafka_port": 29092, "kafka_controller_port": 29093, "airflow_port": 28080}
LANDING = "landing"  # the landing query's name in the health report
PRODUCTS = "products"  # the products changelog's query: no view, and idle in this benchmark
BATCH_SIZE = 25_000  # max_offsets_per_trigger
MIN_EVENTS = 3 * BATCH_SIZE  # at least two batches after the first
EVENT_SPAN = timedelta(hours=1)
BASELINE_RUNS = 3
TIMEOUT = 900  # seconds the speed layer may take to drain the backlog


@dataclass(frozen=True)
class Batch:
    """One micro-batch of one query, as the health report showed it; times in epoch seconds."""

    batch_id: int
    start: float
    rows: int
    end: float
    processed: int  # landing only: Kafka records processed up to this batch's end


class Timeline:
    """Every micro-batch the health report has shown, per query (keyed by its start)."""

    def __init__(self) -> None:
        self.queries: dict[str, dict[float, Batch]] = {}

    def observe(self, report: dict) -> None:
        processed = sum(int(o) for o in (report.get("processed_offsets") or {}).values())
        for name, query in report["queries"].items():
            seen = self.queries.setdefault(name, {})
            if not query.get("last_progress"):
                continue
            start = processes.parse_utc(query["last_progress"])
            rows, rate = query.get("input_rows") or 0, query.get("processed_rows_per_second") or 0
            batch = Batch(query["batch_id"], start, rows, start + rows / rate if rows and rate else start,
                          processed if name == LANDING else 0)
            # the report reads the landing's offsets before its query, so a later look can be fresher
            if start not in seen or seen[start].processed < batch.processed:
                seen[start] = batch

    def batches(self, name: str) -> list[Batch]:
        return sorted(self.queries.get(name, {}).values(), key=lambda b: b.start)

    def landed(self, total: int) -> Batch | None:
        """The landing batch that reached ``total`` records, if seen."""
        return next((b for b in self.batches(LANDING) if b.processed >= total), None)

    def caught_up(self, name: str, after: float) -> float | None:
        """When view query ``name`` had read everything landed before ``after``; None if not known yet."""
        batches = self.batches(name)
        for i, batch in enumerate(batches):
            if batch.start >= after:
                if batch.rows:
                    return batch.end
                with_rows = [b for b in batches[:i] if b.rows]
                if not with_rows:
                    return batch.start
                seen = {b.batch_id for b in batches if with_rows[-1].start <= b.start <= batch.start}
                # with no batch missed in between, the last one with rows was the last to read any
                return with_rows[-1].end if seen == set(range(min(seen), max(seen) + 1)) else batch.start
        return None

    def drained(self, total: int) -> float | None:
        """When ``total`` records were landed and every view had read them all; None if not known yet."""
        landed = self.landed(total)
        views = [name for name in self.queries if name not in (LANDING, PRODUCTS)]
        ends = [self.caught_up(name, landed.end) for name in views] if landed and views else [None]
        return None if None in ends else max(landed.end, *ends)


@dataclass(frozen=True)
class Result:
    events: int
    counts: dict[str, int]
    payload_bytes: int
    produce_seconds: float
    trigger_seconds: int
    startup_seconds: float
    cold_seconds: float  # speed layer start to views caught up
    landing_batches: int
    batch_seconds: float  # median duration of the sustained landing batches
    landing_rate: float
    views_rate: float
    baseline_rates: list[float]

    @property
    def baseline(self) -> float:
        return statistics.median(self.baseline_rates)

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(metric, value, baseline, ratio) rows for BENCHMARKS.md."""
        base = f"{self.baseline:,.0f} events/s"
        return [
            ("speed layer, landing (Kafka → raw_events, dead_letters, late_events), sustained",
             f"{self.landing_rate:,.0f} events/s", base, f"{self.landing_rate / self.baseline:.3f}"),
            ("speed layer, landing + every speed view caught up, sustained",
             f"{self.views_rate:,.0f} events/s", base, f"{self.views_rate / self.baseline:.3f}"),
        ]

    def notes(self) -> list[str]:
        bound = (" (shorter than the trigger interval: the rate is bounded by the trigger, not the machine)"
                 if self.batch_seconds < self.trigger_seconds else "")
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in self.counts.items() if kind != "total")
        return [
            f"Backlog: {self.events:,} records ({self.payload_bytes / 1e6:.0f} MB; {kinds}), "
            f"produced to Kafka in {self.produce_seconds:.0f} s.",
            f"Speed layer: trigger {self.trigger_seconds} s, max_offsets_per_trigger {BATCH_SIZE:,}; "
            f"{self.landing_batches} landing batches, the sustained ones {self.batch_seconds:.1f} s each "
            f"(median){bound}.",
            f"Cold start: queries active {self.startup_seconds:.0f} s after the process started; backlog "
            f"landed and every view caught up {self.cold_seconds:.0f} s after it started "
            f"({self.events / self.cold_seconds:,.0f} events/s with start-up and the first batch).",
            f"Baseline reads: {', '.join(f'{r:,.0f}' for r in self.baseline_rates)} events/s.",
        ]


def _home() -> Settings:
    home = Path(tempfile.mkdtemp(prefix="lambdalake-bench-"))
    return Settings(home=home).save(**PORTS, max_offsets_per_trigger=BATCH_SIZE)


def _drain(settings: Settings, total: int) -> tuple[Timeline, float]:
    """Watch the health report until the views caught up; the timeline and that moment (epoch s)."""
    timeline, deadline = Timeline(), time.monotonic() + TIMEOUT
    log = processes.log_file(settings, services.SPEED)
    while time.monotonic() < deadline:
        report = services.speed_health(settings)
        if report is None and processes.running_pid(settings, services.SPEED) is None:
            raise processes.ServiceError(
                f"the speed layer exited while draining the backlog{processes.log_tail(log)}")
        if report:
            timeline.observe(report)
            done = timeline.drained(total)
            if done is not None:
                return timeline, done
        time.sleep(0.25)
    raise TimeoutError(f"the speed layer did not drain {total:,} records in {TIMEOUT}s{processes.log_tail(log)}")


def _baseline(settings: Settings, total: int) -> tuple[list[float], int]:
    """Events/s of Spark reading the whole topic as a batch, ``BASELINE_RUNS`` times; the payload bytes."""
    from pyspark.sql import functions as F

    spark = sparks.session(settings, "lambdalake-bench-baseline")
    try:
        rates = []
        for _ in range(BASELINE_RUNS):
            began = time.perf_counter()
            row = (spark.read.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap)
                   .option("subscribe", settings.events_topic).load()
                   .agg(F.count(F.lit(1)).alias("records"), F.sum(F.length("value")).alias("bytes")).first())
            seconds = time.perf_counter() - began
            if row["records"] != total:
                raise RuntimeError(f"the baseline read {row['records']} records, expected {total}")
            rates.append(total / seconds)
        return rates, row["bytes"]
    finally:
        spark.stop()


def run(events: int, say=print) -> Result:
    """Run the benchmark in a deployment of its own under a tmp folder, removed afterwards."""
    settings = _home()
    try:
        say(f"starting Kafka on {settings.kafka_bootstrap} (home {settings.home}) ...")
        kafka.start(settings)
        now = datetime.now(timezone.utc)
        records = generator.generate(now - EVENT_SPAN, now, events)
        say(f"producing {len(records):,} events ...")
        began = time.monotonic()
        sent = producer.send(settings, records)
        produce_seconds = time.monotonic() - began
        total = sum(kafka.end_offsets(settings, settings.events_topic).values())
        if sent != len(records) or total != sent:
            raise RuntimeError(f"produced {len(records)} records, {sent} acknowledged, {total} in the topic")

        say("starting the speed layer and draining the backlog ...")
        started = time.time()
        services.start_speed(settings)
        startup = time.time() - started
        timeline, done = _drain(settings, total)
        services.stop_speed(settings)
        landed = timeline.landed(total)
        sustained = [b for b in timeline.batches(LANDING) if 1 <= b.batch_id <= landed.batch_id]
        rows = total - (sustained[0].processed - sustained[0].rows)
        say(f"landed {landed.end - started:.0f} s after the start, views caught up after "
            f"{done - started:.0f} s; measuring the baseline ...")
        baseline, payload = _baseline(settings, total)
        return Result(
            events=total, counts=generator.counts(records), payload_bytes=payload,
            produce_seconds=produce_seconds, trigger_seconds=settings.trigger_seconds,
            startup_seconds=startup, cold_seconds=done - started, landing_batches=landed.batch_id + 1,
            batch_seconds=statistics.median(b.end - b.start for b in sustained),
            landing_rate=rows / (landed.end - sustained[0].start),
            views_rate=rows / (done - sustained[0].start), baseline_rates=baseline,
        )
    finally:
        services.stop_speed(settings)
        kafka.stop(settings)
        shutil.rmtree(settings.home, ignore_errors=True)
