from datetime import date, datetime, timedelta

import pytest

from views.timebase import EPOCH, UTC, boundary, days_between


def test_boundary_is_end_of_contiguous_complete_days():
    days = [date(2026, 11, 18), date(2026, 11, 19), date(2026, 11, 20)]
    assert boundary(days) == datetime(2026, 11, 21, tzinfo=UTC)


def test_boundary_stops_at_the_first_gap_and_ignores_repeats():
    days = [date(2026, 11, 18), date(2026, 11, 18), date(2026, 11, 19), date(2026, 11, 21)]
    assert boundary(days) == datetime(2026, 11, 20, tzinfo=UTC)


def test_no_complete_day_means_everything_is_speed():
    assert boundary([]) == EPOCH


def test_days_between_lists_utc_days():
    start = datetime(2026, 11, 19, tzinfo=UTC)
    assert days_between(start, start + timedelta(days=2)) == [date(2026, 11, 19), date(2026, 11, 20)]


@pytest.mark.parametrize("start,end", [
    (datetime(2026, 11, 19, 3, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)),
    (datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)),
])
def test_days_between_rejects_partial_or_empty_intervals(start, end):
    with pytest.raises(ValueError, match="whole UTC days"):
        days_between(start, end)
