"""Replays: send dead letters back to the events topic, corrected or as they were, each at most once.

Corrected values (``--from-file``) or the unchanged raw payloads of the dead letters whose reason
matches (``--reason``) go to the events topic, keyed as before, so the running speed layer lands them
like any record (or dead-letters them again). Each replay is recorded in the Delta table
``dead_letter_replays`` and a dead letter found there is never sent again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from infra.deployment import Deployment
from lambdalake.deadletters import queries
from lambdalake.deadletters.corrections import Coordinates, Replay, Request, plan, read_requests
from views import tables


@dataclass(frozen=True)
class Replayed:
    """What a replay did: the dead letters sent to ``topic``, those skipped as already replayed, and
    those asked for but not found."""

    topic: str
    sent: list[Coordinates]
    already_replayed: list[Coordinates]
    not_found: list[Coordinates]


def _send(settings: Deployment, replays: list[Replay]) -> list[bool]:
    """Whether Kafka acknowledged each replay."""
    from infra import producer

    errors = producer.publish(
        settings, ((None if r.letter.key is None else r.letter.key.encode(), r.value, None) for r in replays)
    )
    return [error is None for error in errors]


def _record(settings: Deployment, replays: list[Replay]) -> None:
    now = datetime.now(UTC)
    tables.DEAD_LETTER_REPLAYS.append(
        settings, [{**r.letter.at._asdict(), "replayed_at": now, "corrected": r.corrected} for r in replays]
    )


def replay(settings: Deployment, from_file: Path | None = None, reason: str | None = None) -> Replayed:
    """Send the corrections in ``from_file``, or the raw payloads of the dead letters whose reason
    contains ``reason``, to the events topic, skipping dead letters already replayed; record what
    Kafka acknowledged in dead_letter_replays."""
    if (from_file is None) == (reason is None):
        raise ValueError("deadletters replay needs either --from-file F or --reason TEXT")
    requests = None if from_file is None else read_requests(from_file, settings.topic)
    rows = queries.over(settings)
    found = queries.dead_letters(rows, reason, None if requests is None else [r.at for r in requests])
    done = queries.replayed(rows)
    if not found:
        raise ValueError(
            f"no dead letter's reason contains {reason!r} (see `lambdalake deadletters`)"
            if requests is None
            else f"none of the {len(requests)} dead letters named in {from_file} is in dead_letters "
            f'(a line without "topic" means {settings.topic!r})'
        )
    chosen = plan([Request(at) for at in found] if requests is None else requests, found, done)
    acknowledged = _send(settings, chosen.send) if chosen.send else []
    sent = [r for r, ok in zip(chosen.send, acknowledged, strict=True) if ok]
    if sent:
        _record(settings, sent)
    if len(sent) < len(chosen.send):
        raise ValueError(
            f"Kafka acknowledged {len(sent)} of {len(chosen.send)} records (those are recorded as "
            f"replayed); rerun to send the rest"
        )
    return Replayed(settings.topic, [r.letter.at for r in sent], chosen.already_replayed, chosen.not_found)
