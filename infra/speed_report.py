"""The speed layer's health report: one typed record that the speed layer writes to a JSON file every
second (speed_layer.health) and that ``status``, ``/health``, the watchdog, ``wait_for_landing`` and the
benchmark read (:func:`read`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class QueryHealth:
    active: bool
    batch_id: int | None = None
    last_progress: str | None = None
    input_rows: int | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    #: Milliseconds of the last micro-batch, as Spark reports them (triggerExecution, addBatch, ...).
    durations_ms: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
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
    #: What the speed views' state held after the last micro-batch: events remembered, open sessions,
    #: and the bytes its tables take (none: landing alone).
    state: dict[str, int] = field(default_factory=dict)
    #: Seconds per step of the last micro-batch (parse, dedupe, each view, each commit).
    steps: dict[str, float] = field(default_factory=dict)
    #: Seconds per step of the process's start, from its creation to its queries' start (imports, the
    #: resume plan, the Spark session, the tables, the queries).
    startup: dict[str, float] = field(default_factory=dict)
    queries: dict[str, QueryHealth] = field(default_factory=dict)

    @property
    def processed(self) -> int:
        """Records of the events topic processed, over its partitions."""
        return sum(self.processed_offsets.values())

    @property
    def active(self) -> bool:
        """Whether every query is active and none failed."""
        return self.error is None and bool(self.queries) and all(q.active for q in self.queries.values())


def write(path: Path, health: Health) -> None:
    """Replace the report at ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(health), indent=2, default=str))
    tmp.replace(path)


def read(path: Path) -> Health | None:
    """The report at ``path``; None if there is none (or it is being replaced)."""
    try:
        record = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    queries = {name: QueryHealth(**query) for name, query in (record.pop("queries", None) or {}).items()}
    return Health(**record, queries=queries)
