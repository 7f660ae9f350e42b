"""View declarations: what every layer reads from them, and the mistakes they refuse."""

from datetime import date, datetime, timedelta

import pytest

from views import all_views
from views.model import Tumbling, View, count, ratio
from views.timebase import UTC


def test_each_view_says_how_far_its_windows_reach_across_days():
    views = all_views()
    assert {name: (v.reach, v.lookback) for name, v in views.items()} == {
        "page_views_per_minute": (timedelta(), timedelta()),
        "active_users_hourly": (timedelta(), timedelta()),
        "revenue_by_category_hourly": (timedelta(), timedelta()),
        "search_ctr_hourly": (timedelta(minutes=30), timedelta()),
        "sessions_hourly": (timedelta(days=1), timedelta(days=1)),
        "trending_products": (timedelta(minutes=10), timedelta()),
    }
    day = date(2026, 11, 20)
    assert views["trending_products"].days_affected(day) == [date(2026, 11, 19), day]
    assert views["sessions_hourly"].days_affected(day) == [date(2026, 11, 19), day, date(2026, 11, 21)]
    assert views["sessions_hourly"].windows == Tumbling(timedelta(hours=1))


def test_a_day_stays_open_to_later_events_as_far_as_its_windows_reach():
    views, day = all_views(), date(2026, 11, 20)
    midnight = datetime(2026, 11, 21, tzinfo=UTC)
    assert views["page_views_per_minute"].open_until(day) == midnight
    assert views["search_ctr_hourly"].open_until(day) == midnight + timedelta(minutes=30)
    sessions = views["sessions_hourly"]
    assert sessions.open_until(day) == midnight + timedelta(days=1)  # what batch saw unknown: the longest session
    # its newest session's last event at 23:50: an event from 00:20 on starts a session of its own
    assert sessions.open_until(day, midnight - timedelta(minutes=10)) == midnight + timedelta(minutes=20)
    assert sessions.open_until(day, datetime(2026, 11, 20, tzinfo=UTC)) == midnight  # no session began that day
    assert sessions.open_until(day, midnight + timedelta(days=3)) == midnight + timedelta(days=1)


def test_a_view_reads_its_own_events_and_those_its_joins_look_for():
    views = all_views()
    assert views["search_ctr_hourly"].reads == ("search", "click")
    assert views["page_views_per_minute"].reads == ("page_view",)


@pytest.mark.parametrize(
    "measures,problem",
    [
        ((count("n"), count("n")), "measure n is declared twice"),
        ((count("n"), ratio("r", "n", "m")), "ratio r divides n by m, which must both be measures"),
        ((count("n", flagged="clicked"),), "count n counts rows flagged clicked, but no FollowedBy join sets it"),
    ],
)
def test_a_wrong_declaration_is_refused_with_its_reason(measures, problem):
    with pytest.raises(ValueError, match=f"view v: {problem}"):
        View("v", "", ("page_view",), Tumbling(timedelta(minutes=1)), (), measures)
