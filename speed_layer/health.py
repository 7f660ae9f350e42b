"""The speed layer's health: one typed record from Spark's own progress and the true Kafka lag
(speed_layer.lag), written to one JSON file every second.

``status``, ``/health``, the watchdog DAG, ``wait_for_landing`` and the benchmark read it. It says when
the landing query last finished a micro-batch and after how long without one, while input waits, the
speed layer counts as stalled (:data:`STALL_FACTOR` times its usual micro-batch, at least the setting
``speed_stall_seconds``): a micro-batch that hangs (a blocked sink) is found however small the backlog.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql.streaming import StreamingQuery

from infra import processes
from infra.settings import Settings
from speed_layer.lag import Meter

#: A micro-batch that runs this many times the median of the recent ones (with input) is stalled.
STALL_FACTOR = 10
#: The recent micro-batches (with input) whose median that is.
RECENT = 20


@dataclass
class QueryHealth:
    active: bool
    batch_id: int | None = None
    last_progress: str | None = None
    input_rows: int | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    #: Milliseconds of the last micro-batch, as Spark reports them (triggerExecution, addBatch, ...).
    durations_ms: dict[str, int] = field(default_factory=dict)


@dataclass
class Health:
    pid: int
    updated_at: str
    error: str | None
    #: Kafka records of the events topic not yet processed: its end offsets now minus the offsets
    #: processed (None if the broker does not answer).
    lag: int | None = None
    end_offsets: dict[str, int] = field(default_factory=dict)
    processed_offsets: dict[str, int] = field(default_factory=dict)
    #: When the landing query last finished a micro-batch (or, before its first, started).
    progressed_at: str | None = None
    #: Seconds without a finished micro-batch, while input waits, after which the speed layer is stalled.
    stall_after_seconds: float | None = None
    watermark: str | None = None
    #: Records, dead letters and late events since the speed layer started.
    totals: dict[str, int] = field(default_factory=dict)
    #: Seconds per step of the last micro-batch (parse, dedupe, each view, each commit).
    steps: dict[str, float] = field(default_factory=dict)
    queries: dict[str, QueryHealth] = field(default_factory=dict)


def _progress(query: StreamingQuery) -> dict:
    progress = query.lastProgress
    return json.loads(progress.json) if progress else {}


def _finished(progress: dict) -> float:
    """When a progress report's micro-batch ended, seconds since the epoch."""
    took = (progress.get("durationMs") or {}).get("triggerExecution", 0)
    return processes.parse_utc(progress["timestamp"]) + took / 1000


def _query(query: StreamingQuery, progress: dict) -> QueryHealth:
    return QueryHealth(
        active=query.isActive, batch_id=progress.get("batchId"), last_progress=progress.get("timestamp"),
        input_rows=progress.get("numInputRows"), input_rows_per_second=progress.get("inputRowsPerSecond"),
        processed_rows_per_second=progress.get("processedRowsPerSecond"),
        durations_ms=progress.get("durationMs") or {})


class Monitor:
    """The health of the speed layer's queries: the events query (``fold`` is its
    :class:`~speed_layer.fold.Fold`, started at ``starting_offsets``) and the others, with the true lag
    (:class:`~speed_layer.lag.Meter`) and the durations of its recent micro-batches with input, learnt
    from its progress reports as they come."""

    def __init__(self, settings: Settings, events: StreamingQuery, fold, others: list[StreamingQuery],
                 starting_offsets: str):
        self._settings, self._events, self._fold, self._others = settings, events, fold, others
        self._meter, self._started = Meter(settings, starting_offsets), time.time()
        self._seen: str | None = None
        self._recent: deque[float] = deque(maxlen=RECENT)

    def report(self, error: str | None) -> Health:
        """The health now (``error``: why the speed layer stops, if it does)."""
        queries = [self._events, *self._others]
        progress = {q.name: _progress(q) for q in queries}
        landing = progress[self._events.name]
        if landing and landing["timestamp"] != self._seen:
            self._seen = landing["timestamp"]
            if landing.get("numInputRows"):
                self._recent.append(landing["durationMs"].get("triggerExecution", 0) / 1000)
        lag, floor = self._meter.measure(), self._settings.speed_stall_seconds
        return Health(
            pid=os.getpid(), updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), error=error,
            lag=lag.records, end_offsets=lag.end_offsets, processed_offsets=lag.processed_offsets,
            progressed_at=datetime.fromtimestamp(_finished(landing) if landing else self._started,
                                                 UTC).isoformat(),
            stall_after_seconds=max(floor, STALL_FACTOR * statistics.median(self._recent)) if self._recent else floor,
            watermark=self._fold.state.watermark.isoformat() if self._fold.state.watermark else None,
            totals=dict(self._fold.totals), steps=dict(self._fold.timings),
            queries={q.name: _query(q, progress[q.name]) for q in queries})

    def close(self) -> None:
        self._meter.close()


def write(settings: Settings, health: Health | dict) -> None:
    """Replace the health report (``settings.speed_health_file``) atomically."""
    target = settings.speed_health_file
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    record = dataclasses.asdict(health) if dataclasses.is_dataclass(health) else health
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(target)
