"""View declarations: what every layer reads from them, and the mistakes they refuse."""

from datetime import date, timedelta

import pytest

from views import all_views
from views.model import Tumbling, View, count, ratio


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
