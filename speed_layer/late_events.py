"""Late events: those the speed layer's rows cannot show, which it leaves to batch.

An event is late for a view when it is behind the speed layer's watermark (the speed views drop it),
or when it can change a day that batch has made final for the view (the merged view serves batch rows
there, whatever the speed layer adds). They are in raw_events all the same; late_events counts them
per view and event day, with the time they arrived and the first one's event time, so that the batch
layer recomputes exactly the final days they can change (batch_layer.stale).

They are counted in Python from the micro-batch's :class:`Tally` (counted from the records the fold
collects) and written with delta-rs: no Spark job of their own.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime

import pyarrow as pa
import pyarrow.compute as pc

from infra.deployment import Deployment
from lake import ledger
from views import tables
from views.model import View


@dataclass(frozen=True)
class Final:
    """What batch made final of a view: its newest final day, and until when an event after that day
    can change one of its final days (the latest of their ledger entries' View.open_until)."""

    day: date
    until: datetime


def finals(settings: Deployment, views: list[View]) -> dict[str, Final]:
    """Per view with final days, its :class:`Final`; read from the ledger."""
    named = {view.name: view for view in views}
    found: dict[str, Final] = {}
    for entry in ledger.entries(settings):
        view = named.get(entry.view)
        if view is None:
            continue
        until = entry.open_until or view.open_until(entry.day)
        known = found.get(view.name)
        found[view.name] = Final(
            entry.day if known is None else max(known.day, entry.day),
            until if known is None else max(known.until, until),
        )
    return found


#: The column of a micro-batch's tally that says whether its events are behind the watermark.
BEHIND = "_behind"


@dataclass(frozen=True)
class Tally:
    """A micro-batch's records counted: the valid ones and those behind the watermark, the dead ones,
    the newest valid event time, and the valid ones per (event type, day, behind the watermark) with the
    first event time of each, which the late counts need."""

    valid: int
    behind: int
    dead: int
    newest: datetime | None
    groups: tuple[tuple[str, date, bool, int, datetime], ...]

    @property
    def total(self) -> int:
        return self.valid + self.dead


def tallied(rows: pa.Table, watermark: datetime | None) -> Tally:
    """Count a micro-batch's ``rows`` (:func:`views.events.collected`, in the driver), behind
    ``watermark`` or not."""
    fine = pc.is_null(rows["reason"])
    valid, dead = rows.filter(fine), rows.filter(pc.invert(fine))
    behind = (
        pc.fill_null(pc.less(valid["event_time"], watermark), False)
        if watermark is not None
        else pa.array([False] * valid.num_rows)
    )
    groups = (
        valid.select(["event_type", "event_date", "event_time"])
        .append_column(BEHIND, behind)
        .group_by(["event_type", "event_date", BEHIND])
        .aggregate([([], "count_all"), ("event_time", "min")])
    )
    return Tally(
        valid.num_rows,
        pc.sum(behind).as_py() or 0,
        dead.num_rows,
        pc.max(valid["event_time"]).as_py(),
        tuple(
            zip(
                *(groups[c].to_pylist() for c in ("event_type", "event_date", BEHIND, "count_all", "event_time_min")),
                strict=True,
            )
        ),
    )


def count(counted: Tally, views: list[View], finals: dict[str, Final], batch_id: int) -> pa.Table:
    """Per view and day, how many of the micro-batch's events are late for the view, and the first of
    them: behind the speed layer's watermark, or on a day the view's :class:`Final` (``finals``) makes
    final, or on a later day with events before its ``until`` (all of that day's are counted)."""
    late: Counter[tuple[str, date]] = Counter()
    first: dict[tuple[str, date], datetime] = {}
    for view in views:
        final = finals.get(view.name)
        for event_type, day, behind_mark, n, earliest in counted.groups:
            if event_type in view.reads and (
                behind_mark or (final is not None and (day <= final.day or earliest < final.until))
            ):
                late[view.name, day] += n
                first[view.name, day] = min(first.get((view.name, day), earliest), earliest)
    now = datetime.now(UTC)
    return pa.Table.from_pylist(
        [
            {
                "view": view,
                "day": day,
                "events": events,
                "received_at": now,
                "batch_id": batch_id,
                "first_event": first[view, day],
            }
            for (view, day), events in sorted(late.items())
        ],
        tables.LATE_EVENTS.schema,
    )
