"""Which failed Airflow API calls the client makes again: those that lost SQLite's lock, when that is safe."""

from __future__ import annotations

import pytest

from infra.airflow import AirflowError, _lost_the_lock

LOCKED = 'HTTP 500: {"detail":{"reason":"Database error","statement":"hidden"}}'


@pytest.mark.parametrize(
    ("method", "status", "body", "again"),
    [
        ("PATCH", 500, LOCKED, True),  # a pause that met the scheduler's write
        ("GET", 500, LOCKED, True),
        ("POST", 500, LOCKED, False),  # a trigger may have written before it failed
        ("POST", 503, "Database is locked", True),  # refused before anything was written
        ("PATCH", 500, "HTTP 500: Internal Server Error", False),
        ("GET", 404, "HTTP 404: not found", False),
    ],
)
def test_a_call_is_made_again_only_when_it_lost_the_lock_and_again_is_safe(method, status, body, again):
    assert _lost_the_lock(method, AirflowError(f"{method} /api/v2/dags/x failed: {body}", status=status)) is again
    assert _lost_the_lock(method, ValueError(body)) is False
