"""Which of a micro-batch's events each view counts as late, from the micro-batch's tally (no Spark)."""

from datetime import date, datetime

from speed_layer.late_events import Final, Tally, count
from views import all_views
from views.tables import LATE_EVENTS
from views.timebase import UTC

D20, D21, D22 = (date(2026, 11, d) for d in (20, 21, 22))


def at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _late(tally: Tally, finals: dict) -> dict:
    views = all_views()
    chosen = [views["page_views_per_minute"], views["search_ctr_hourly"]]
    table = count(tally, chosen, finals, batch_id=7)
    assert table.schema == LATE_EVENTS.schema and set(table.column("batch_id").to_pylist()) <= {7}
    return {(row["view"], row["day"]): (row["events"], row["first_event"]) for row in table.to_pylist()}


def _final(day: date, until: datetime | None = None) -> Final:
    return Final(day, until or at(day, 0) + (D21 - D20))


def test_events_behind_the_watermark_are_late_for_every_view_of_their_type():
    tally = Tally(
        valid=55,
        behind=5,
        dead=1,
        newest=None,
        groups=(
            ("page_view", D22, True, 3, at(D22, 1)),
            ("search", D22, True, 2, at(D22, 2)),
            ("page_view", D22, False, 50, at(D22, 3)),
        ),
    )
    assert _late(tally, {}) == {
        ("page_views_per_minute", D22): (3, at(D22, 1)),
        ("search_ctr_hourly", D22): (2, at(D22, 2)),
    }


def test_events_on_a_views_final_days_are_late_for_that_view_only():
    tally = Tally(
        valid=18,
        behind=0,
        dead=0,
        newest=None,
        groups=(
            ("page_view", D20, False, 4, at(D20, 5)),
            ("search", D21, False, 5, at(D21, 6)),
            ("page_view", D22, False, 9, at(D22, 7)),
        ),
    )
    late = _late(tally, {"page_views_per_minute": _final(D21), "search_ctr_hourly": _final(D20)})
    assert late == {("page_views_per_minute", D20): (4, at(D20, 5))}
    assert _late(tally, {"search_ctr_hourly": _final(D21)}) == {("search_ctr_hourly", D21): (5, at(D21, 6))}


def test_events_after_a_final_day_are_late_only_before_its_windows_end():
    """search_ctr_hourly's clicks flag searches up to 30 minutes before them: a click at 00:20 can
    change the final day before; one at 07:00 cannot."""
    tally = Tally(
        valid=9,
        behind=0,
        dead=0,
        newest=None,
        groups=(("click", D21, False, 4, at(D21, 0, 20)), ("click", D22, False, 5, at(D22, 7))),
    )
    final = {"search_ctr_hourly": _final(D20, at(D21, 0, 30))}
    assert _late(tally, final) == {("search_ctr_hourly", D21): (4, at(D21, 0, 20))}
    final = {"search_ctr_hourly": _final(D21, at(D22, 0, 30))}
    assert _late(tally, final) == {("search_ctr_hourly", D21): (4, at(D21, 0, 20))}
