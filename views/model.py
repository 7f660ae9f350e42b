"""The vocabulary of a view declaration: windows, joins, mergeable measures and expectations.

A view is data, not code: the batch layer, the speed layer, the serving layer and ``lambdalake views``
all read the same :class:`View` and none restates its logic (``views.compile`` turns it into Spark).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from views.timebase import DAY, day_start


def interval(size: timedelta) -> str:
    """``size`` as Spark writes an interval: ``"600 seconds"``."""
    return f"{int(size.total_seconds())} seconds"


@dataclass(frozen=True)
class Tumbling:
    """Fixed, non-overlapping event-time windows aligned to the epoch (UTC)."""

    size: timedelta

    @property
    def reach(self) -> timedelta:
        """How far past the end of a run of whole days the events of its windows may lie (none: sizes
        divide a day)."""
        return timedelta()

    def spark(self) -> tuple[str, ...]:
        return (interval(self.size),)

    def __str__(self) -> str:
        return f"tumbling {self.size}"


@dataclass(frozen=True)
class Hopping(Tumbling):
    """Windows of ``size`` starting every ``slide``: an event is in ``size / slide`` of them."""

    slide: timedelta = timedelta(minutes=1)

    @property
    def reach(self) -> timedelta:
        return self.size

    def spark(self) -> tuple[str, ...]:
        return (interval(self.size), interval(self.slide))

    def __str__(self) -> str:
        return f"hopping {self.size} every {self.slide}"


@dataclass(frozen=True)
class Session:
    """Sessions of one ``per`` value that go on while events come less than ``gap`` apart, counted in
    the ``bucket`` window where they start. A session's rows are its start time (``event_time``),
    ``duration_s`` and ``events``."""

    gap: timedelta
    per: str
    bucket: Tumbling
    #: How long a session may last for a batch run of a day to see all of it (read on both sides).
    longest: timedelta = timedelta(days=1)

    @property
    def reach(self) -> timedelta:
        return self.longest

    def __str__(self) -> str:
        return f"session (gap {self.gap}, per {self.per}) counted by start, {self.bucket}"


@dataclass(frozen=True)
class Dimension:
    """Join the dimension table ``table`` on ``key``, adding ``column`` (``default`` when there is no
    row). Batch takes the row valid at the event's time; speed the latest it knows."""

    table: str
    key: str
    column: str
    default: str

    def __str__(self) -> str:
        return (
            f"{self.table}.{self.column} by {self.key} (batch: as of the event's time; speed: latest; "
            f"else {self.default!r})"
        )


@dataclass(frozen=True)
class FollowedBy:
    """Flag each event ``flag`` when an ``event_type`` event with the same ``on`` values follows it
    within ``within`` (0 <= its time - the event's time <= within)."""

    event_type: str
    on: tuple[str, ...]
    within: timedelta
    flag: str

    def __str__(self) -> str:
        return f"{self.flag}: followed by {self.event_type} with the same {', '.join(self.on)} within {self.within}"


@dataclass(frozen=True)
class Measure:
    """A mergeable aggregate of the view's rows.

    ``count`` (rows; with ``column``: rows flagged by that FollowedBy flag), ``sum``, ``min``, ``max``,
    ``mean`` (kept as sum and count), ``distinct`` (exact in batch, a HyperLogLog sketch in speed) and
    ``ratio`` (of the measures ``column`` and ``over``, computed after merging).
    """

    name: str
    kind: str
    column: str | None = None
    over: str | None = None

    @property
    def approximate_in_speed(self) -> bool:
        return self.kind == "distinct"


def count(name: str, flagged: str | None = None) -> Measure:
    return Measure(name, "count", flagged)


def total(name: str, column: str) -> Measure:
    return Measure(name, "sum", column)


def minimum(name: str, column: str) -> Measure:
    return Measure(name, "min", column)


def maximum(name: str, column: str) -> Measure:
    return Measure(name, "max", column)


def mean(name: str, column: str) -> Measure:
    return Measure(name, "mean", column)


def distinct(name: str, column: str) -> Measure:
    return Measure(name, "distinct", column)


def ratio(name: str, numerator: str, denominator: str) -> Measure:
    return Measure(name, "ratio", numerator, denominator)


@dataclass(frozen=True)
class View:
    """What a view computes, from which events, in which windows, per which keys."""

    name: str
    description: str
    event_types: tuple[str, ...]
    window: Tumbling | Session
    keys: tuple[str, ...]
    measures: tuple[Measure, ...]
    event_time: str = "event_time"
    joins: tuple[Dimension | FollowedBy, ...] = ()
    #: SQL conditions every row must meet (data-quality expectations checked on each batch write).
    expectations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [m.name for m in self.measures]
        flags = {j.flag for j in self.joins if isinstance(j, FollowedBy)}
        problems = [f"measure {n} is declared twice" for n in sorted(set(names)) if names.count(n) > 1]
        for m in self.measures:
            if m.kind == "ratio" and not {m.column, m.over} <= set(names):
                problems.append(f"ratio {m.name} divides {m.column} by {m.over}, which must both be measures")
            if m.kind == "count" and m.column and m.column not in flags:
                problems.append(f"count {m.name} counts rows flagged {m.column}, but no FollowedBy join sets it")
            if isinstance(self.window, Session) and m.kind in ("min", "max", "distinct"):
                problems.append(
                    f"{m.kind} {m.name} cannot be taken back when a session grows in speed; "
                    f"sessions support count, total, mean and ratio"
                )
        if problems:
            raise ValueError(f"view {self.name}: {'; '.join(problems)}")

    @property
    def reads(self) -> tuple[str, ...]:
        """The event types that can change its rows: its own and those its FollowedBy joins look for."""
        followed = (j.event_type for j in self.joins if isinstance(j, FollowedBy))
        return tuple(dict.fromkeys((*self.event_types, *followed)))

    @property
    def columns(self) -> tuple[str, ...]:
        """The view table's columns, in order."""
        return ("window_start", "window_end", *self.keys, *(m.name for m in self.measures))

    @property
    def session(self) -> Session:
        """The window of a view of sessions (a view of other windows: TypeError)."""
        if not isinstance(self.window, Session):
            raise TypeError(f"view {self.name} counts no sessions: its window is {self.window}")
        return self.window

    @property
    def windows(self) -> Tumbling:
        """The windows rows are counted in (for sessions: the bucket of their start)."""
        return self.window.bucket if isinstance(self.window, Session) else self.window

    @property
    def reach(self) -> timedelta:
        """How far past the end of a run of whole days the events of its windows may lie."""
        return self.window.reach + self.follow

    def days_affected(self, day: date) -> list[date]:
        """The UTC days whose windows an event on ``day`` can change: its own, and the days before
        (and after) it that the view's windows reach."""
        before, after = math.ceil(self.reach / DAY), math.ceil(self.lookback / DAY)
        return [day + i * DAY for i in range(-before, after + 1)]

    def open_until(self, day: date, newest: datetime | None = None) -> datetime:
        """Until when (exclusive) an event after ``day`` can change its rows: the day's end plus how far
        its windows reach; for sessions, once batch saw ``newest`` (the newest event of a session that
        began on the day; the day's start if none did), no later than that plus the gap (and the joins'
        follow): a later event starts a session of its own."""
        end = day_start(day) + DAY
        if newest is None or not isinstance(self.window, Session):
            return end + self.reach
        return min(end + self.reach, max(end, newest + self.window.gap + self.follow))

    @property
    def follow(self) -> timedelta:
        """How long after an event another may still flag it (its FollowedBy joins)."""
        return max((j.within for j in self.joins if isinstance(j, FollowedBy)), default=timedelta())

    @property
    def lookback(self) -> timedelta:
        """How far before the start of a run of whole days events may shape its windows (a session
        that began earlier and goes on)."""
        return self.window.longest if isinstance(self.window, Session) else timedelta()
