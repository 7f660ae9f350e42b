"""The speed bench's verdict on a steady rate, and its summary of the rates it tried."""

import math
import multiprocessing
import time

import pytest

from bench.live import Load, Steady, kept_up
from bench.report import _highest


def tried(rate, kept):
    return Steady(rate, rate, rate, 0, kept)


def test_a_rate_is_kept_up_with_when_nearly_all_was_processed_and_little_waits():
    assert kept_up(1_000, 100, produced=100_000, processed=98_000, lag=5_000)


def test_a_rate_processed_below_98_percent_of_what_was_produced_is_not_kept_up_with():
    assert not kept_up(1_000, 100, produced=100_000, processed=97_999, lag=0)


def test_a_rate_ending_with_more_than_5_seconds_of_input_waiting_is_not_kept_up_with():
    assert not kept_up(1_000, 100, produced=100_000, processed=100_000, lag=5_001)


def test_an_unknown_lag_is_not_kept_up_with():
    assert not kept_up(1_000, 100, produced=100_000, processed=100_000, lag=math.inf)


def test_a_rate_the_producers_did_not_reach_is_not_kept_up_with():
    assert not kept_up(1_000, 100, produced=94_000, processed=94_000, lag=0)


def test_the_highest_rate_kept_up_with_and_the_first_one_missed_are_named():
    summary = _highest([tried(6_000, True), tried(9_600, True), tried(12_000, False)])
    assert summary == "Highest steady rate kept up with: 9,600 events/s; the next rate tried, 12,000 events/s, was not."


def test_when_every_rate_was_kept_up_with_the_maximum_is_not_claimed():
    summary = _highest([tried(6_000, True), tried(15_000, True)])
    assert "15,000 events/s, the highest rate tried: the true maximum may be higher" in summary


def test_when_no_rate_was_kept_up_with_it_says_so():
    assert _highest([tried(6_000, False)]) == "No rate tried was kept up with, not even the first, 6,000 events/s."


def _load_ready_at(*ready: float, start: float) -> Load:
    told: multiprocessing.Queue = multiprocessing.Queue()
    for moment in ready:
        told.put(moment)
    return Load([None] * len(ready), start, 10, told)  # type: ignore[list-item]  # producers only counted


def test_a_load_whose_producers_were_ready_before_its_start_begins_at_its_start():
    start = time.time() + 0.3
    _load_ready_at(start - 1, start - 0.5, start=start).begin()
    assert time.time() >= start


def test_a_load_a_producer_was_late_for_is_refused_not_sent_as_a_burst():
    start = time.time()
    with pytest.raises(RuntimeError, match="generated their records 20 s after its start"):
        _load_ready_at(start - 1, start + 20, start=start).begin()
