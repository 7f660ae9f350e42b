"""Dead letters: ``lambdalake deadletters`` lists them by reason (lambdalake.deadletters.queries, through
the serving engine) and ``deadletters replay`` sends them back through the pipeline
(lambdalake.deadletters.replay), from a file of corrections (lambdalake.deadletters.corrections)
or as they were."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from infra.deployment import Deployment
from lambdalake.deadletters import queries
from lambdalake.deadletters.corrections import Coordinates
from lambdalake.deadletters.replay import Replayed, replay


@dataclass(frozen=True)
class Listing:
    """The dead letters by reason and the latest ones (of those whose reason contains ``reason``)."""

    reason: str | None
    by_reason: list[dict]
    latest: list[dict]


def _listed(coordinates: list[Coordinates], most: int = 5) -> str:
    if not coordinates:
        return ""
    more = f", and {len(coordinates) - most} more" if len(coordinates) > most else ""
    return f" ({', '.join(map(str, coordinates[:most]))}{more})"


def render_listing(listing: Listing) -> str:
    """The summary by reason and the latest dead letters, as text tables."""
    from tabulate import tabulate

    if not listing.by_reason:
        return "no dead letters" + (f" whose reason contains {listing.reason!r}" if listing.reason else "")

    def table(rows: list[dict]) -> str:
        rows = [{k: f"{v:%Y-%m-%d %H:%M:%S}" if isinstance(v, datetime) else v for k, v in row.items()} for row in rows]
        return tabulate(rows, headers="keys", tablefmt="simple", disable_numparse=True)

    total = sum(r["count"] for r in listing.by_reason)
    return "\n".join(
        [
            f"{total} dead letter{'s' * (total != 1)} by reason (times in UTC):",
            table(listing.by_reason),
            "",
            f"latest {len(listing.latest)}:",
            table(listing.latest),
        ]
    )


def render_replay(result: Replayed) -> str:
    """One line: how many were sent, skipped as already replayed, and not found."""
    return (
        f"sent {len(result.sent)} to {result.topic}; skipped {len(result.already_replayed)} "
        f"already replayed{_listed(result.already_replayed)}; "
        f"{len(result.not_found)} not found{_listed(result.not_found)}"
    )


def listing(settings: Deployment, limit: int, reason: str | None = None) -> Listing:
    """The summary by reason and the ``limit`` latest dead letters (of those whose reason matches)."""
    rows = queries.over(settings)
    return Listing(reason, queries.summary(rows, reason), queries.latest(rows, limit, reason))


def command(
    settings: Deployment, action: str | None, *, reason: str | None, limit: int, from_file: Path | None, as_json: bool
) -> str:
    """The output of ``lambdalake deadletters [replay]``."""
    if action == "replay":
        result = replay(settings, from_file, reason)
        if as_json:
            return json.dumps(
                {
                    "topic": result.topic,
                    **{k: [c._asdict() for c in getattr(result, k)] for k in ("sent", "already_replayed", "not_found")},
                },
                indent=1,
            )
        return render_replay(result)
    if from_file is not None:
        raise ValueError("--from-file goes with `deadletters replay`")
    found = listing(settings, limit, reason)
    return json.dumps(asdict(found), indent=1, default=datetime.isoformat) if as_json else render_listing(found)
