"""A domain of a deployment's own, declared in a folder outside the checkout (``lambdalake new-domain``),
end to end: its scaffolded test passes; its events, sent from a file by ``lambdalake produce``, land
through the real speed layer (a bad one dead-lettered) and fill its view; a batch recompute makes the
day final with the same rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from batch_layer.recompute import recompute_day
from infra import kafka, services
from infra.deployment import REPO, load
from serving_layer import engine
from views import timebase

pytestmark = pytest.mark.integration


def _cli(home, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lambdalake.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "LAMBDALAKE_HOME": str(home)},
        check=True,
        timeout=120,
    )


def _orders(settings) -> dict[datetime, tuple]:
    _, rows = engine.query(settings, "SELECT window_start, orders, amount, source, is_final FROM orders_per_hour")
    return {timebase.utc(row[0]): tuple(row[1:]) for row in rows}


def test_a_domain_in_a_folder_of_its_own_runs_end_to_end(tmp_path, broker, spark):
    folder = tmp_path / "acme_shop"
    assert not folder.resolve().is_relative_to(REPO)
    _cli(tmp_path, "new-domain", str(folder))
    scaffolded = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "tests")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert scaffolded.returncode == 0, scaffolded.stdout + scaffolded.stderr

    home = tmp_path / "home"
    home.mkdir()
    stored = json.loads((broker.home / "settings.json").read_text())
    (home / "settings.json").write_text(
        json.dumps({**stored, "domain": str(folder), "view_modules": [], "topic_prefix": f"{tmp_path.name}-"})
    )
    settings = load(home)
    assert list(settings.views) == ["orders_per_hour"] and settings.topic == f"{tmp_path.name}-acme_shop-events"

    day = timebase.day_start((datetime.now(timebase.UTC) - timedelta(days=1)).date())
    events = [
        {
            "event_id": f"e{n}",
            "event_time": (day + timedelta(hours=hour, minutes=n)).isoformat(),
            "event_type": kind,
            "user_id": f"u{n % 3}",
            **({"amount": n} if kind == "order" else {}),
        }
        for n, (hour, kind) in enumerate([(9, "order"), (9, "signup"), (9, "order"), (10, "order")], 1)
    ]
    lines = [json.dumps(event) for event in events] + [json.dumps(events[0]), '{"event_id": "e9"}']
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    kafka.ensure_topics(settings)
    sent = _cli(home, "produce", "--from-file", str(tmp_path / "events.jsonl"))
    assert sent.stdout.startswith(f"sent {len(lines)} records")

    services.start_speed(settings)
    try:
        assert services.wait_for_landing(settings) == len(lines)
    finally:
        services.stop_speed(settings)
    _, [(dead, reason)] = engine.query(settings, "SELECT count(*), min(reason) FROM dead_letters")
    assert dead == 1 and reason
    at = {hour: day + timedelta(hours=hour) for hour in (9, 10)}
    assert _orders(settings) == {at[9]: (2, 4, "speed", False), at[10]: (1, 4, "speed", False)}

    recompute_day(spark, settings, day, day + timedelta(days=1))
    assert _orders(settings) == {at[9]: (2, 4, "batch", True), at[10]: (1, 4, "batch", True)}
