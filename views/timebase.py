"""Event time, days and the batch/speed boundary rule, defined once for every layer.

Batch recomputes whole UTC days. A view's boundary is the end of the contiguous run of complete batch
days that starts at its earliest one: the merged view takes batch rows before it and speed rows from it,
so it never double-counts and never shows a gap.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone
from typing import Iterable

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
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


def boundary(complete_days: Iterable[date]) -> datetime:
    """End of the contiguous run of complete days from the earliest; the epoch if there is none."""
    days = sorted(set(complete_days))
    if not days:
        return EPOCH
    last = days[0]
    for day in days[1:]:
        if day != last + DAY:
            break
        last = day
    return day_start(last) + DAY
