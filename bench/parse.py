"""The parse alone, against Spark's own.

The speed layer's parse (`views.events.parse`: typed columns, every validation rule and a reason per
record) against Spark's own parse of the same records into raw_events' columns without the rules
(`from_json`, as the bare stream parses them), warm, in one session.

The records: the backlog's mix (late, resent and malformed ones among them) as Spark's Kafka source
reads them, cached. Each parse writes every column of every record to Spark's `noop` sink; the first
runs warm the JIT and are not counted. It runs in a process of its own
(`python -m bench.parse HOME RECORDS RUNS`) and prints seconds per run and parse as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from bench import bare_stream, landing
from domains.clickstream import generator
from infra import spark as sparks
from infra.deployment import Deployment, load
from speed_layer.queries import ensure_tables
from views import events

WARM = 3
OURS, BASELINE = "speed layer (`events.parse`)", "Spark's `from_json` (baseline)"


def run(settings: Deployment, count: int, runs: int) -> dict[str, list[float]]:
    spark = sparks.session(settings, "lambdalake-bench-parse")
    try:
        ensure_tables(spark, settings)
        now = datetime.now(UTC)
        records = landing.kafka_records(
            spark, generator.generate(now - timedelta(hours=1), now, count), settings.home / "records.parquet"
        ).cache()
        records.count()
        source = settings.source
        parses = {
            OURS: lambda: events.parse(records, source, settings.max_payload_bytes, settings.future_horizon_seconds),
            BASELINE: lambda: bare_stream.as_raw_events(records, settings),
        }
        seconds: dict[str, list[float]] = {name: [] for name in parses}
        for round_ in range(WARM + runs):
            for name, parse in parses.items():
                began = time.perf_counter()
                parse().write.format("noop").mode("overwrite").save()
                if round_ >= WARM:
                    seconds[name].append(time.perf_counter() - began)
        return seconds
    finally:
        spark.stop()


def measure(settings: Deployment, count: int, runs: int) -> dict[str, list[float]]:
    """:func:`run`, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.parse", str(settings.home), str(count), str(runs)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode:
        raise RuntimeError(f"the parse micro-benchmark failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    home, count, runs = sys.argv[1:]
    print(json.dumps(run(load(home), int(count), int(runs))))
