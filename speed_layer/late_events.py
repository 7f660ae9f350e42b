"""Late events: those the speed layer's rows cannot show, which it leaves to batch.

An event is late for a view when it is behind the speed layer's watermark (the speed views drop it),
or when it can change a day that batch has made final for the view (the merged view serves batch rows
there, whatever the speed layer adds). They are in raw_events all the same; late_events counts them
per view and event day, with the time they arrived, so that the batch layer recomputes exactly the
final days they change (batch_layer.stale).

They are counted in Python from the micro-batch's :class:`Tally` (counted from the records the fold
collects) and written with delta-rs: no Spark job of their own.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime

import pyarrow as pa
import pyarrow.compute as pc

from infra.deployment import Deployment
from lake import ledger
from views import tables
from views.model import View
from views.timebase import DAY


def final_through(settings: Deployment, views: list[View]) -> dict[str, date]:
    """Per view with final days, the newest day whose events can change one of them (its newest final
    day and as many days after as its windows reach past midnight); read from the ledger."""
    newest = {view: max(days) for view, days in ledger.final_days(settings).items()}
    return {v.name: newest[v.name] + math.ceil(v.reach / DAY) * DAY for v in views if v.name in newest}


#: The column of a micro-batch's tally that says whether its events are behind the watermark.
BEHIND = "_behind"


@dataclass(frozen=True)
class Tally:
    """A micro-batch's records counted: the valid ones and those behind the watermark, the dead ones,
    the newest valid event time, and the valid ones per (event type, day, behind the watermark), which
    the late counts need."""

    valid: int
    behind: int
    dead: int
    newest: datetime | None
    groups: tuple[tuple[str, date, bool, int], ...]

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
        valid.select(["event_type", "event_date"])
        .append_column(BEHIND, behind)
        .group_by(["event_type", "event_date", BEHIND])
        .aggregate([([], "count_all")])
    )
    return Tally(
        valid.num_rows,
        pc.sum(behind).as_py() or 0,
        dead.num_rows,
        pc.max(valid["event_time"]).as_py(),
        tuple(zip(*(groups[c].to_pylist() for c in ("event_type", "event_date", BEHIND, "count_all")), strict=True)),
    )


def count(counted: Tally, views: list[View], finals: dict[str, date], batch_id: int) -> pa.Table:
    """Per view and day, how many of the micro-batch's events are late for the view: behind the speed
    layer's watermark, or on a day at or before the view's :func:`final_through` day (``finals``)."""
    late: Counter[tuple[str, date]] = Counter()
    for view in views:
        final = finals.get(view.name)
        for event_type, day, behind_mark, n in counted.groups:
            if event_type in view.event_types and (behind_mark or (final is not None and day <= final)):
                late[view.name, day] += n
    now = datetime.now(UTC)
    return pa.Table.from_pylist(
        [
            {"view": view, "day": day, "events": events, "received_at": now, "batch_id": batch_id}
            for (view, day), events in sorted(late.items())
        ],
        tables.LATE_EVENTS.schema,
    )
