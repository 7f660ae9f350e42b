"""How the tests compare a day's rows with the oracle's: floats to rounding, everything else exactly."""

import math

from tests.compare import same_days


def test_floats_are_the_same_to_rounding_even_where_rounding_to_digits_splits_them():
    key = ("2026-11-24 02:00",)
    mean = 423.3211875  # a mean of 48 sessions' durations, as one engine summed them
    other = math.nextafter(mean, 0)  # and as another did, one unit in the last place below
    assert round(mean, 6) != round(other, 6)
    assert same_days({key: (48, mean)}, {key: (48, other)})


def test_other_counts_floats_or_keys_are_not_the_same():
    key, other = ("a",), ("b",)
    assert not same_days({key: (48, 1.0)}, {key: (47, 1.0)})
    assert not same_days({key: (48, 1.0)}, {key: (48, 1.000001)})
    assert not same_days({key: (48, 1.0)}, {other: (48, 1.0)})
