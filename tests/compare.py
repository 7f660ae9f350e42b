"""How tests compare a view's rows with the oracle's: exact, except where the design allows otherwise."""

from __future__ import annotations

import math
from datetime import datetime

import pytest

from serving_layer import engine
from views import timebase
from views.timebase import DAY

#: 4 sigma of a lgk-12 HyperLogLog's relative standard error (1.04 / sqrt(4096)): the tests compare
#: hundreds of windows at once, and at 3 sigma per window a correct sketch fails a run now and then
#: (the kill -9 test once saw one window of 144 at 1,074 against 1,130, 3.05 sigma).
SKETCH_ERROR = 4 * 1.04 / 64


def within_sketch_error(estimate: int, exact: int) -> bool:
    return abs(estimate - exact) <= max(1, SKETCH_ERROR * exact)


def keyed(view, rows: list[dict]) -> dict:
    """Rows by (window_start, *keys), their window bounds as aware UTC datetimes."""
    rows = [
        {**r, "window_start": timebase.utc(r["window_start"]), "window_end": timebase.utc(r["window_end"])}
        for r in rows
    ]
    return {(r["window_start"], *(r[k] for k in view.keys)): r for r in rows}


def assert_measures(view, row: dict, expected: tuple, key, approximate: bool = False) -> None:
    """``row``'s measures equal ``expected``: exactly (floats to rounding), or for the measures that
    are approximate in speed, within the sketch's error when ``approximate``."""
    for measure, want in zip(view.measures, expected, strict=True):
        got = row[measure.name]
        if approximate and measure.approximate_in_speed:
            assert within_sketch_error(got, want), (view.name, key, measure.name, got, want)
        elif isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-9), (view.name, key, measure.name)
        else:
            assert got == want, (view.name, key, measure.name)


def merged_rows(settings, view) -> dict:
    """The merged view's rows, keyed as by :func:`keyed`."""
    columns, rows = engine.query(settings, f'SELECT * FROM "{view.name}"')
    return keyed(view, [dict(zip(columns, row, strict=True)) for row in rows])


def day_measures(view, rows: dict, day: datetime) -> dict:
    """The rows of ``view`` (merged rows as by :func:`keyed`, or the oracle's measures) in the day from
    ``day``, as {key: measures}; compare two with :func:`same_days`."""
    return {
        key: tuple(row[m.name] if isinstance(row, dict) else row[i] for i, m in enumerate(view.measures))
        for key, row in rows.items()
        if day <= key[0] < day + DAY
    }


def same_days(got: dict, want: dict) -> bool:
    """Whether two :func:`day_measures` hold the same rows: the same keys and measures, floats to rounding
    (the oracle and the engines sum in other orders). Rounding both to a number of digits is not that: a
    mean of 48 sessions' durations in ms ended in ...1875 and was 423.321187 in one, 423.321188 in the other."""
    return got.keys() == want.keys() and all(
        math.isclose(g, w, rel_tol=1e-9) if isinstance(w, float) else g == w
        for key in got
        for g, w in zip(got[key], want[key], strict=True)
    )


def assert_final_and_exact(settings, expected: dict, start, end) -> None:
    """Every view's merged rows in ``[start, end)`` are final batch rows equal to ``expected`` (the
    oracle's rows of every view)."""
    for name, view in settings.views.items():
        merged = {k: r for k, r in merged_rows(settings, view).items() if start <= k[0] < end}
        assert set(merged) == {k for k in expected[name] if start <= k[0] < end}, name
        for key, row in merged.items():
            assert (row["source"], row["is_final"]) == ("batch", True), (name, key)
            assert_measures(view, row, expected[name][key], key)
