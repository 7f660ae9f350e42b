"""The speed bench's summary of the steady rates it tried."""

from bench.__main__ import _highest
from bench.live import Steady


def tried(rate, kept_up):
    return Steady(rate, kept_up, 0, 0, rate, rate)


def test_the_highest_rate_kept_up_with_and_the_first_one_missed_are_named():
    summary = _highest([tried(6_000, True), tried(9_600, True), tried(12_000, False)])
    assert summary == "Highest steady rate kept up with: 9,600 events/s; the next rate tried, 12,000 events/s, was not."


def test_when_every_rate_was_kept_up_with_the_maximum_is_not_claimed():
    summary = _highest([tried(6_000, True), tried(15_000, True)])
    assert "15,000 events/s, the highest rate tried: the true maximum may be higher" in summary


def test_when_no_rate_was_kept_up_with_it_says_so():
    assert _highest([tried(6_000, False)]) == "No rate tried was kept up with, not even the first, 6,000 events/s."
