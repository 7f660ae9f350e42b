from datetime import date, datetime, timedelta

import pytest

from views.timebase import UTC, days_between, ranges, spans


def test_days_become_runs_of_consecutive_days_in_any_order_with_repeats():
    days = [date(2026, 11, 21), date(2026, 11, 18), date(2026, 11, 19), date(2026, 11, 18), date(2026, 11, 25)]
    assert ranges(days) == [
        (date(2026, 11, 18), date(2026, 11, 19)),
        (date(2026, 11, 21), date(2026, 11, 21)),
        (date(2026, 11, 25), date(2026, 11, 25)),
    ]
    assert spans(days) == "2026-11-18..2026-11-19, 2026-11-21, 2026-11-25"


def test_no_days_read_as_none():
    assert ranges([]) == [] and spans([]) == "none"


def test_days_between_lists_utc_days():
    start = datetime(2026, 11, 19, tzinfo=UTC)
    assert days_between(start, start + timedelta(days=2)) == [date(2026, 11, 19), date(2026, 11, 20)]


@pytest.mark.parametrize(
    "start,end",
    [
        (datetime(2026, 11, 19, 3, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)),
        (datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)),
    ],
)
def test_days_between_rejects_partial_or_empty_intervals(start, end):
    with pytest.raises(ValueError, match="whole UTC days"):
        days_between(start, end)
