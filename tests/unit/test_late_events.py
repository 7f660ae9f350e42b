"""Which of a micro-batch's events each view counts as late, from the micro-batch's tally (no Spark)."""

from datetime import date

from speed_layer.late_events import Tally, count
from views import all_views
from views.tables import LATE_EVENTS

D20, D21, D22 = (date(2026, 11, d) for d in (20, 21, 22))


def _late(tally: Tally, finals: dict) -> dict:
    views = all_views()
    chosen = [views["page_views_per_minute"], views["search_ctr_hourly"]]
    table = count(tally, chosen, finals, batch_id=7)
    assert table.schema == LATE_EVENTS.schema and set(table.column("batch_id").to_pylist()) <= {7}
    return {(row["view"], row["day"]): row["events"] for row in table.to_pylist()}


def test_events_behind_the_watermark_are_late_for_every_view_of_their_type():
    tally = Tally(
        valid=55,
        behind=5,
        dead=1,
        newest=None,
        groups=(("page_view", D22, True, 3), ("search", D22, True, 2), ("page_view", D22, False, 50)),
    )
    assert _late(tally, {}) == {("page_views_per_minute", D22): 3, ("search_ctr_hourly", D22): 2}


def test_events_on_a_views_final_days_are_late_for_that_view_only():
    tally = Tally(
        valid=18,
        behind=0,
        dead=0,
        newest=None,
        groups=(("page_view", D20, False, 4), ("search", D21, False, 5), ("page_view", D22, False, 9)),
    )
    late = _late(tally, {"page_views_per_minute": D21, "search_ctr_hourly": D20})
    assert late == {("page_views_per_minute", D20): 4}
    assert _late(tally, {"search_ctr_hourly": D21}) == {("search_ctr_hourly", D21): 5}
