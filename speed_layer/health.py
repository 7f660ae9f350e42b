"""The speed layer's health report: one JSON file, rewritten atomically every few seconds."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql.streaming import StreamingQuery

from infra import kafka
from infra.settings import Settings
from speed_layer.queries import view_checkpoint


def _progress(query: StreamingQuery) -> dict:
    """The query's last progress as plain JSON (empty before its first batch)."""
    progress = query.lastProgress
    return json.loads(progress.json) if progress else {}


def watermarks(settings: Settings, view_queries: list[StreamingQuery]) -> dict[str, datetime]:
    """Each view query's current event-time watermark: from its progress, or, before its first
    micro-batch after a restart, the one its checkpoint restores."""
    marks = {}
    for query in view_queries:
        mark = (_progress(query).get("eventTime") or {}).get("watermark")
        if mark:
            marks[query.name] = datetime.fromisoformat(mark.replace("Z", "+00:00"))
        elif (restored := _checkpointed_watermark(view_checkpoint(settings, query.name))) is not None:
            marks[query.name] = restored
    return marks


def _checkpointed_watermark(checkpoint: Path) -> datetime | None:
    """The watermark in the newest entry of a checkpoint's offset log (line 2: the batch metadata)."""
    log = checkpoint / "offsets"
    entries = [f for f in log.iterdir() if f.name.isdigit()] if log.is_dir() else []
    if not entries:
        return None
    metadata = json.loads(max(entries, key=lambda f: int(f.name)).read_text().splitlines()[1])
    return datetime.fromtimestamp(metadata["batchWatermarkMs"] / 1000, timezone.utc)


def _processed_offsets(progress: dict) -> dict[int, int]:
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, dict):
            return {int(p): int(o) for offsets in end.values() for p, o in offsets.items()}
    return {}


def _query(query: StreamingQuery, progress: dict) -> dict:
    return {
        "active": query.isActive,
        "batch_id": progress.get("batchId"),
        "last_progress": progress.get("timestamp"),
        "input_rows": progress.get("numInputRows"),
        "input_rows_per_second": progress.get("inputRowsPerSecond"),
        "processed_rows_per_second": progress.get("processedRowsPerSecond"),
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
    }


def report(settings: Settings, landing: StreamingQuery, others: list[StreamingQuery], error: str | None) -> dict:
    """Collect the health of every query and the landing's lag behind Kafka's end offsets."""
    progress = {q.name: _progress(q) for q in [landing, *others]}  # one reading, so offsets match batch ids
    processed = _processed_offsets(progress[landing.name])
    try:
        ends = kafka.end_offsets(settings, settings.events_topic)
        lag = sum(end - processed.get(p, 0) for p, end in ends.items())
    except Exception as exc:  # the broker may be restarting; report it rather than die
        ends, lag = {}, None
        error = error or f"cannot read Kafka end offsets: {exc}"
    return {
        "pid": os.getpid(),
        "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "error": error,
        "lag": lag,
        "end_offsets": ends,
        "processed_offsets": processed,
        "queries": {q.name: _query(q, progress[q.name]) for q in [landing, *others]},
    }


def write(settings: Settings, health: dict) -> None:
    """Replace the health report (``settings.speed_health_file``) atomically."""
    target = settings.speed_health_file
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(health, indent=2, default=str))
    tmp.replace(target)

