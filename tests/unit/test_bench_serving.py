"""The serving bench's draw of query literals: warm-up, timed and under-writes sets share no row."""

from bench.serving import draw


def test_samples_have_their_sizes_and_share_no_row():
    samples = draw(list(range(1000)), [100, 100, 300], seed=3)
    assert [len(s) for s in samples] == [100, 100, 300]
    assert len(set().union(*samples)) == 500


def test_the_same_seed_draws_the_same_samples():
    rows = [("/cart", minute) for minute in range(500)]
    assert draw(rows, [10, 20], seed=3) == draw(rows, [10, 20], seed=3)
    assert draw(rows, [10, 20], seed=3) != draw(rows, [10, 20], seed=4)
