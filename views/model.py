"""The vocabulary of a view declaration: windows and mergeable measures.

A view is data, not code: the batch layer, the speed layer, the serving layer and ``lambdalake views``
all read the same :class:`View` and none restates its logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Tumbling:
    """Fixed, non-overlapping event-time windows aligned to the epoch (UTC)."""

    size: timedelta

    @property
    def spark(self) -> str:
        return f"{int(self.size.total_seconds())} seconds"


@dataclass(frozen=True)
class Measure:
    """A mergeable aggregate: ``count`` of events, or ``distinct`` values of ``column``.

    ``distinct`` is exact in batch and a HyperLogLog sketch (kept beside the estimate as
    ``<name>_sketch``) in speed.
    """

    name: str
    kind: str
    column: str | None = None

    @property
    def approximate_in_speed(self) -> bool:
        return self.kind == "distinct"


def count(name: str) -> Measure:
    return Measure(name, "count")


def distinct(name: str, column: str) -> Measure:
    return Measure(name, "distinct", column)


@dataclass(frozen=True)
class View:
    name: str
    description: str
    event_types: tuple[str, ...]
    window: Tumbling
    keys: tuple[str, ...]
    measures: tuple[Measure, ...]
    event_time: str = "event_time"
    #: How late an event may come and still count in speed (None: the deployment's default).
    watermark: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The view table's columns, in order."""
        return ("window_start", "window_end", *self.keys, *(m.name for m in self.measures))
