"""A freshness marker's user is one that active_users_hourly's HyperLogLog sketch of the hour counts, so
that its marker shows there as in every other view."""

from bench.live import counted
from lake import sketches
from views.compile import SKETCH_LGK


def _with(sketch: bytes | None, user: str) -> int | None:
    return sketches.estimate(sketches.union([sketch, sketches.sketch_of([user], SKETCH_LGK)]))


def test_users_that_leave_the_hour_s_estimate_as_it_was_are_passed_over():
    hour = sketches.sketch_of([f"user-{i}" for i in range(400)], SKETCH_LGK)
    before = sketches.estimate(hour)
    candidates = [f"marker-user-{i}" for i in range(300)]
    uncounted = [user for user in candidates if _with(hour, user) == before]
    assert uncounted, "a sketch of 400 users counts every new one: nothing here to pass over"
    chosen = counted(hour, [*uncounted, *candidates])
    assert chosen not in uncounted
    assert _with(hour, chosen) > before


def test_the_first_user_is_counted_in_an_hour_without_a_sketch():
    assert counted(None, ["marker-user-1", "marker-user-1-1"]) == "marker-user-1"
