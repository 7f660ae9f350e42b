"""The speed layer's health: its report (:class:`infra.speed_report.Health`) from Spark's own progress and
the true Kafka lag (speed_layer.lag), written to one JSON file every second.

``status``, ``/health``, the watchdog DAG, ``wait_for_landing`` and the benchmark read it. It says when
the landing query last finished a micro-batch and after how long without one, while input waits, the
speed layer counts as stalled (:data:`STALL_FACTOR` times its usual micro-batch, at least the setting
``speed_stall_seconds``): a micro-batch that hangs (a blocked sink) is found however small the backlog.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import deque
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyspark.sql.streaming import StreamingQuery

from infra import processes
from infra.deployment import Deployment
from infra.speed_report import Health, QueryHealth
from speed_layer.lag import Meter

if TYPE_CHECKING:
    from speed_layer.fold import Fold

#: A micro-batch that runs this many times the median of the recent ones (with input) is stalled.
STALL_FACTOR = 10
#: The recent micro-batches (with input) whose median that is.
RECENT = 20


def _progress(query: StreamingQuery) -> dict:
    progress = query.lastProgress
    return json.loads(progress.json) if progress else {}


def _finished(progress: dict) -> float:
    """When a progress report's micro-batch ended, seconds since the epoch."""
    took = (progress.get("durationMs") or {}).get("triggerExecution", 0)
    return processes.parse_utc(progress["timestamp"]) + took / 1000


def _query(query: StreamingQuery, progress: dict) -> QueryHealth:
    return QueryHealth(
        active=query.isActive,
        batch_id=progress.get("batchId"),
        last_progress=progress.get("timestamp"),
        input_rows=progress.get("numInputRows"),
        input_rows_per_second=progress.get("inputRowsPerSecond"),
        processed_rows_per_second=progress.get("processedRowsPerSecond"),
        durations_ms=progress.get("durationMs") or {},
    )


class Monitor:
    """The health of the speed layer's queries: the events query (``fold`` is its
    :class:`~speed_layer.fold.Fold`, started at ``starting_offsets``) and the others, with the true lag
    (:class:`~speed_layer.lag.Meter`) and the durations of its recent micro-batches with input, learnt
    from its progress reports as they come."""

    def __init__(
        self,
        settings: Deployment,
        events: StreamingQuery,
        fold: Fold,
        others: list[StreamingQuery],
        starting_offsets: str,
        startup: dict[str, float],
    ):
        self._settings, self._events, self._fold, self._others = settings, events, fold, others
        self._startup = startup
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
            pid=os.getpid(),
            updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            error=error,
            lag=lag.records,
            end_offsets=lag.end_offsets,
            processed_offsets=lag.processed_offsets,
            progressed_at=datetime.fromtimestamp(_finished(landing) if landing else self._started, UTC).isoformat(),
            stall_after_seconds=max(floor, STALL_FACTOR * statistics.median(self._recent)) if self._recent else floor,
            watermark=self._fold.state.watermark.isoformat() if self._fold.state.watermark else None,
            totals=dict(self._fold.totals),
            state=dict(self._fold.held),
            steps=dict(self._fold.timings),
            startup=self._startup,
            queries={q.name: _query(q, progress[q.name]) for q in queries},
        )

    def close(self) -> None:
        self._meter.close()
