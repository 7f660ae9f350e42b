"""Throughput: how fast a pre-produced backlog drains.

A backlog of generated events (the default mix: late, resent and malformed ones among them, event times
over the last hour) is produced to the benchmark's broker first, so the producer is not in the measured
path. Then each job drains the whole topic from its start, in a deployment of its own:

- the baseline, a bare Structured Streaming job (``bench/bare_stream.py``);
- the speed layer landing alone (``speed_views`` empty): parse, validate, raw_events, dead_letters;
- the speed layer landing plus every speed view.

All three run with the same trigger (a micro-batch at most every ``trigger_seconds``, back to back
under a backlog) and ``maxOffsetsPerTrigger`` (a memory guard). A drain's time runs from the start of
its first micro-batch to the end of the micro-batch that reached Kafka's end offsets, both in Spark's
own progress reports; JVM and query start-up are left out for every job alike. Each drain runs in a
new process, the baseline's too: every job starts with a JVM whose JIT has compiled nothing yet.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import psutil

from infra import processes, services
from infra.deployment import Deployment

TIMEOUT = 1800  # seconds one drain may take
#: The jobs each drain runs: the baseline, landing alone, landing and every speed view.
JOBS = ("bare Structured Streaming (baseline)", "speed layer, landing only", "speed layer, landing + all six views")


@dataclass
class Drain:
    seconds: float
    batches: int
    #: Resident memory of the speed layer's processes (Python driver and JVM) by quarter of the drain
    #: (0: its start, 4: its end; a quarter a micro-batch spanned is missing).
    memory_mb: dict[int, float] = field(default_factory=dict)
    #: With ``live_heap``: the JVM's heap in use right after a full collection, at each quarter.
    live_heap_mb: list[float] = field(default_factory=list)
    #: Seconds per step, summed over the micro-batches seen.
    steps: dict[str, float] = field(default_factory=dict)


def batch_end(started: str, durations_ms: dict) -> float:
    """When a micro-batch ended, from its progress report's start time and durations."""
    return processes.parse_utc(started) + durations_ms.get("triggerExecution", 0) / 1000


def bare(settings: Deployment, total: int) -> Drain:
    """Drain the topic with the bare Structured Streaming job, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.bare_stream", str(settings.home), str(total)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT + 120,
    )
    if done.returncode:
        raise RuntimeError(f"the bare stream failed:\n{done.stderr[-3000:]}")
    drained = json.loads(done.stdout.strip().splitlines()[-1])
    return Drain(drained["seconds"], drained["batches"])


def _memory_mb(pid: int) -> float:
    process, rss = psutil.Process(pid), 0
    for part in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # a short-lived Python worker of Spark's
            rss += part.memory_info().rss
    return rss / 2**20


def live_heap_mb(pid: int) -> float:
    """The heap in use in the JVM of process ``pid`` (the JVM itself, or its parent) right after a full
    collection (``jcmd GC.run``), from ``jstat``: its live objects, what a leak would grow."""
    process = psutil.Process(pid)
    [jvm] = [p.pid for p in (process, *process.children(recursive=True)) if p.name() == "java"]
    subprocess.run(["jcmd", str(jvm), "GC.run"], check=True, capture_output=True, timeout=60)
    header, values = subprocess.run(
        ["jstat", "-gc", str(jvm)], check=True, capture_output=True, text=True, timeout=60
    ).stdout.split("\n")[:2]
    gc = dict(zip(header.split(), values.split(), strict=True))
    return sum(float(gc[space]) for space in ("S0U", "S1U", "EU", "OU")) / 1024


def speed(settings: Deployment, total: int, live_heap: bool = False) -> Drain:
    """Drain the topic with the speed layer's own process, watching its health report (and, with
    ``live_heap``, its live heap at each quarter: each a full collection, which the drain's time pays)."""
    services.start_speed(settings)
    pid = processes.running_pid(settings, services.SPEED)
    assert pid is not None  # start_speed waited until it was healthy
    try:
        deadline, first, seen = time.monotonic() + TIMEOUT, None, set()
        memory: dict[int, float] = {}
        steps: dict[str, float] = {}
        live: dict[int, float] = {}
        while time.monotonic() < deadline:
            report = services.speed_health(settings)
            if report is None:
                raise processes.ServiceError(
                    f"the speed layer stopped while draining"
                    f"{processes.log_tail(processes.log_file(settings, services.SPEED))}"
                )
            query = report.queries["landing"]
            if query.last_progress:
                first = first or query.last_progress
                if query.batch_id not in seen:
                    seen.add(query.batch_id)
                    for step, seconds in report.steps.items():
                        steps[step] = steps.get(step, 0) + seconds
                done = report.processed
                quarter = min(4, 4 * done // total)
                memory.setdefault(quarter, _memory_mb(pid))
                if live_heap and quarter not in live:
                    live[quarter] = live_heap_mb(pid)
                if done >= total:
                    return Drain(
                        batch_end(query.last_progress, query.durations_ms) - processes.parse_utc(first),
                        (query.batch_id or 0) + 1,
                        dict(sorted(memory.items())),
                        [live[q] for q in sorted(live)],
                        steps,
                    )
            time.sleep(0.2)
        raise TimeoutError(f"the speed layer did not drain {total:,} records in {TIMEOUT}s")
    finally:
        services.stop_speed(settings)


def median_rate(total: int, drains: list[Drain]) -> float:
    return statistics.median(total / d.seconds for d in drains)
