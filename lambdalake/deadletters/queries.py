"""What the dead letters hold, asked through the serving engine (serving_layer.engine): a summary by
reason with replay counts, the latest dead letters, the dead letters to replay, and those replayed.

Each function takes ``rows(sql, params) -> list[dict]``, which runs sandboxed SQL (:func:`over`), so
that the same queries run over any DuckDB relations named ``dead_letters`` and ``dead_letter_replays``.
"""

from __future__ import annotations

from collections.abc import Callable

from infra.deployment import Deployment
from lambdalake.deadletters.corrections import Coordinates, DeadLetter
from serving_layer import engine
from views import tables

DEAD_LETTERS, REPLAYS = tables.DEAD_LETTERS.name, tables.DEAD_LETTER_REPLAYS.name
#: Payload characters shown in a listing.
PAYLOAD_WIDTH = 100
_COORDINATES = 'topic, "partition", "offset"'
#: ``dead_letter_replays`` before the first replay wrote it: none.
_NO_REPLAYS = (
    f'WITH {REPLAYS} AS (SELECT NULL::VARCHAR AS topic, NULL::INTEGER AS "partition", '
    f'NULL::BIGINT AS "offset" WHERE FALSE) '
)

Rows = Callable[[str, dict], list[dict]]


def over(settings: Deployment) -> Rows:
    """Run SQL through the deployment's serving engine; ``dead_letter_replays`` is empty until it exists."""
    known = engine.with_data(settings)
    if DEAD_LETTERS not in known:
        raise ValueError(
            f"no dead_letters table at {tables.DEAD_LETTERS.path(settings)} yet: the speed layer "
            f"creates it when it starts (`lambdalake up`)"
        )
    prefix = "" if REPLAYS in known else _NO_REPLAYS

    def rows(sql: str, params: dict) -> list[dict]:
        columns, found = engine.query(settings, prefix + sql, params)
        return [dict(zip(columns, row, strict=True)) for row in found]

    return rows


def shorten(raw: bytes, width: int = PAYLOAD_WIDTH) -> str:
    """A payload as one line of at most ``width`` characters."""
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _matching(reason: str | None) -> tuple[str, dict]:
    """A WHERE clause keeping the dead letters ``d`` whose reason contains ``reason`` (any case)."""
    return ("WHERE contains(lower(d.reason), lower($reason))", {"reason": reason}) if reason else ("", {})


def summary(rows: Rows, reason: str | None = None) -> list[dict]:
    """Per reason: how many dead letters, how many of them were replayed, the first and last."""
    where, params = _matching(reason)
    return rows(
        f"""
        SELECT d.reason, count(*) AS count, count(r."offset") AS replayed,
               min(d.dead_lettered_at) AS first, max(d.dead_lettered_at) AS last
        FROM dead_letters d LEFT JOIN (SELECT DISTINCT {_COORDINATES} FROM dead_letter_replays) r
             USING ({_COORDINATES})
        {where} GROUP BY d.reason ORDER BY count DESC, d.reason""",
        params,
    )


def latest(rows: Rows, limit: int, reason: str | None = None) -> list[dict]:
    """The ``limit`` newest dead letters, their payload shortened to one line."""
    where, params = _matching(reason)
    found = rows(
        f"""
        SELECT {_COORDINATES}, d.dead_lettered_at, d.key, d.reason, d.raw AS payload FROM dead_letters d
        {where} ORDER BY d.dead_lettered_at DESC, {_COORDINATES} DESC LIMIT $limit""",
        {**params, "limit": limit},
    )
    return [{**row, "payload": shorten(row["payload"])} for row in found]


def dead_letters(
    rows: Rows, reason: str | None = None, at: list[Coordinates] | None = None
) -> dict[Coordinates, DeadLetter]:
    """The dead letters whose reason contains ``reason``, or those at the coordinates ``at``."""
    if at is None:
        where, params = _matching(reason)
    else:
        where, params = (
            "WHERE list_contains($at, d.topic || '/' || d.\"partition\" || '/' || d.\"offset\")",
            {"at": [str(c) for c in at]},
        )
    found = rows(f"SELECT {_COORDINATES}, d.key, d.raw FROM dead_letters d {where} ORDER BY {_COORDINATES}", params)
    return {
        Coordinates(r["topic"], r["partition"], r["offset"]): DeadLetter(
            Coordinates(r["topic"], r["partition"], r["offset"]), r["key"], r["raw"]
        )
        for r in found
    }


def replayed(rows: Rows) -> set[Coordinates]:
    return {
        Coordinates(r["topic"], r["partition"], r["offset"])
        for r in rows(f"SELECT {_COORDINATES} FROM dead_letter_replays", {})
    }
