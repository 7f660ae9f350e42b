"""The speed layer's true Kafka lag: the events topic's end offsets now, from the broker, minus the
offsets its landing query has processed (its checkpoint's last committed micro-batch, or where it
starts), per partition, summed.

Spark's progress reports cannot tell it: their ``latestOffset`` is where Kafka stood when a micro-batch
was planned, so a backlog that one micro-batch took whole, or a micro-batch that hangs, reads as lag 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from infra import kafka
from infra.deployment import Deployment
from speed_layer import resume


@dataclass(frozen=True)
class Lag:
    """Records of the events topic not yet processed (None if the broker did not answer), and the
    offsets it is the difference of, by partition."""

    records: int | None
    end_offsets: dict[str, int]
    processed_offsets: dict[str, int]


def committed(checkpoint: Path) -> dict[str, int] | None:
    """The offsets up to which the query checkpointed at ``checkpoint`` has processed its Kafka source
    (those of its last committed micro-batch), by partition; None before its first commit."""
    commits = [int(f.name) for f in (checkpoint / "commits").glob("[0-9]*") if f.name.isdigit()]
    if not commits:
        return None
    *_, offsets = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    return {p: int(o) for topic in json.loads(offsets).values() for p, o in topic.items()}


class Meter:
    """Measures the landing query's :class:`Lag` whenever asked, through one Kafka consumer kept open
    (it joins no group and reads no record)."""

    def __init__(self, settings: Deployment, starting_offsets: str):
        self._settings, self._starting = settings, starting_offsets
        self._broker = kafka.Offsets(settings, settings.topic)

    def measure(self) -> Lag:
        ends = self._broker.read()
        done = committed(resume.checkpoint(self._settings))
        if ends is None:
            return Lag(None, {}, done or {})
        processed = done if done is not None else self._start(ends)
        return Lag(sum(max(0, end - processed.get(p, 0)) for p, end in ends.items()), ends, processed)

    def _start(self, partitions: dict[str, int]) -> dict[str, int]:
        """Where the query starts in each of ``partitions`` (before its first commit): the offset it
        was given, or the oldest Kafka still holds."""
        given = {} if self._starting == "earliest" else json.loads(self._starting)[self._settings.topic]
        offsets = {p: int(given.get(p, resume.EARLIEST)) for p in partitions}
        oldest = (self._broker.read(oldest=True) or {}) if resume.EARLIEST in offsets.values() else {}
        return {p: oldest.get(p, 0) if offset == resume.EARLIEST else offset for p, offset in offsets.items()}

    def close(self) -> None:
        self._broker.close()
