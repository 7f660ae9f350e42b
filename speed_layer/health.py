"""The speed layer's health: one typed record from Spark's own progress, written to one JSON file.

``status``, the watchdog DAG, ``wait_for_landing`` and the benchmark read it. Kafka lag comes from the
source's own offsets in each progress (latest offset minus the offset processed), so nothing opens a
Kafka consumer to find it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field

from pyspark.sql.streaming import StreamingQuery

from infra.settings import Settings


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
    #: Kafka records of the events topic not yet processed (None before the first progress).
    lag: int | None = None
    latest_offsets: dict[str, int] = field(default_factory=dict)
    processed_offsets: dict[str, int] = field(default_factory=dict)
    watermark: str | None = None
    #: Records, dead letters and late events since the speed layer started.
    totals: dict[str, int] = field(default_factory=dict)
    #: Seconds per step of the last micro-batch (parse, dedupe, each view, each commit).
    steps: dict[str, float] = field(default_factory=dict)
    queries: dict[str, QueryHealth] = field(default_factory=dict)


def _progress(query: StreamingQuery) -> dict:
    progress = query.lastProgress
    return json.loads(progress.json) if progress else {}


def _offsets(progress: dict, key: str) -> dict[str, int]:
    """A Kafka source's offsets (``endOffset`` processed, ``latestOffset`` available) by partition."""
    for source in progress.get("sources", []):
        offsets = source.get(key)
        if isinstance(offsets, dict):
            return {str(p): int(o) for topic in offsets.values() for p, o in topic.items()}
    return {}


def _query(query: StreamingQuery, progress: dict) -> QueryHealth:
    return QueryHealth(
        active=query.isActive, batch_id=progress.get("batchId"), last_progress=progress.get("timestamp"),
        input_rows=progress.get("numInputRows"), input_rows_per_second=progress.get("inputRowsPerSecond"),
        processed_rows_per_second=progress.get("processedRowsPerSecond"),
        durations_ms=progress.get("durationMs") or {})


def report(events: StreamingQuery, fold, others: list[StreamingQuery], error: str | None) -> Health:
    """The health of the events query (``fold`` is its :class:`~speed_layer.fold.Fold`) and the others."""
    progress = {q.name: _progress(q) for q in [events, *others]}
    processed, latest = _offsets(progress[events.name], "endOffset"), _offsets(progress[events.name], "latestOffset")
    return Health(
        pid=os.getpid(), updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), error=error,
        lag=sum(o - processed.get(p, 0) for p, o in latest.items()) if latest else None,
        latest_offsets=latest, processed_offsets=processed,
        watermark=fold.state.watermark.isoformat() if fold.state.watermark else None,
        totals=dict(fold.totals), steps=dict(fold.timings),
        queries={q.name: _query(q, progress[q.name]) for q in [events, *others]})


def write(settings: Settings, health: Health | dict) -> None:
    """Replace the health report (``settings.speed_health_file``) atomically."""
    target = settings.speed_health_file
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    record = dataclasses.asdict(health) if dataclasses.is_dataclass(health) else health
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(target)
