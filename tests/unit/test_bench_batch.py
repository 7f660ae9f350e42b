"""The batch bench's check that the plain Spark SQL baseline computes the batch layer's rows."""

from datetime import datetime

from bench.batch import differences
from views import get

VIEW = get("search_ctr_hourly")
AT = datetime(2026, 11, 22, 10)


def row(query="shoes", searches=4, ctr=0.25, start=AT):
    return {"window_start": start, "window_end": start, "query": query, "searches": searches, "clicks": 1, "ctr": ctr}


def test_equal_rows_in_any_order_and_floats_to_rounding_agree():
    ours = [row(), row("hat", 3, 1 / 3)]
    theirs = [row("hat", 3, 1 / 3 * (1 + 1e-12)), row()]
    assert differences(VIEW, ours, theirs) == []


def test_each_kind_of_difference_is_named():
    ours = [row(), row("hat"), row("hat")]
    theirs = [row(searches=5), row("socks")]
    found = differences(VIEW, ours, theirs)
    assert len(found) == 4
    assert "1 windows twice in the batch layer's rows" in found
    assert any("'hat'" in f and "only the batch layer" in f for f in found)
    assert any("'socks'" in f and "only the baseline" in f for f in found)
    assert any("'searches': 4" in f and "'searches': 5" in f for f in found)


def test_a_float_off_by_more_than_rounding_differs():
    assert differences(VIEW, [row(ctr=0.25)], [row(ctr=0.2500001)])
