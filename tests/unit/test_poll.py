"""processes.poll, the one wait every service and client uses: the first answer, a timeout, or the attempt's own
error."""

import pytest

from infra.processes import poll


def test_poll_returns_the_first_answer_that_is_not_none():
    answers = iter([None, None, 0, 5])
    assert poll(lambda: next(answers), timeout=5, every=0.01, timed_out=lambda: AssertionError("timed out")) == 0


def test_poll_raises_the_timeout_error_once_time_runs_out():
    tries = []
    with pytest.raises(TimeoutError, match=r"nothing after 0.2 s"):
        poll(lambda: tries.append(1), timeout=0.2, every=0.05, timed_out=lambda: TimeoutError("nothing after 0.2 s"))
    assert 2 <= len(tries) <= 6


def test_an_error_of_the_attempt_ends_the_wait_at_once():
    tries = []

    def attempt():
        tries.append(1)
        raise ValueError("the run failed")

    with pytest.raises(ValueError, match="the run failed"):
        poll(attempt, timeout=5, every=0.01, timed_out=lambda: TimeoutError())
    assert len(tries) == 1
