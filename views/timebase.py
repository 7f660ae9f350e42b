"""Event time, days and the finality rule, defined once for every layer.

Batch recomputes whole UTC days and records each (view, day) it computed in the ledger (serving_state).
A window belongs to the UTC day it starts on; the merged view takes batch rows for the days the ledger
names final and speed rows for every other day, whatever order the days were computed in, so it never
double-counts, never shows a gap, and a final day never turns provisional again.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

UTC = UTC
DAY = timedelta(days=1)


def utc(moment: datetime) -> datetime:
    """``moment`` as a plain aware UTC datetime (naive values are taken to be UTC; subclasses such as
    Airflow's pendulum DateTime, which break stdlib arithmetic, become plain datetimes)."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return datetime(*moment.timetuple()[:6], moment.microsecond, tzinfo=UTC)


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def days_between(start: datetime, end: datetime) -> list[date]:
    """The UTC days of ``[start, end)``; both ends must fall on midnight."""
    start, end = utc(start), utc(end)
    if start.time() != time() or end.time() != time() or end <= start:
        raise ValueError(f"a batch interval must be whole UTC days, got [{start}, {end})")
    return [(start + i * DAY).date() for i in range((end - start) // DAY)]


def ranges(days: Iterable[date]) -> list[tuple[date, date]]:
    """``days`` as runs of consecutive days, (first, last) each, in order; repeats count once."""
    runs: list[tuple[date, date]] = []
    for day in sorted(set(days)):
        if runs and day == runs[-1][1] + DAY:
            runs[-1] = (runs[-1][0], day)
        else:
            runs.append((day, day))
    return runs


def spans(days: Iterable[date]) -> str:
    """``days`` as text: ``2026-11-18..2026-11-20, 2026-11-22``; ``none`` if there are none."""
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in ranges(days)) or "none"
