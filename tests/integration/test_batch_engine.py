"""The batch engine (a Spark Connect server) doing what an Airflow batch task sends it, and losing it.

The recomputes run in processes of their own, as Airflow's tasks do (a Spark Connect session would
switch pyspark to Connect for the whole test process), against the session's engine: their results
equal the oracle; killed with ``kill -9`` mid-recompute, the task fails in one line, the watchdog
brings the engine back (warmed up with a rehearsed day), the rerun converges, and a reader of the
merged views meanwhile sees each view's day as it was or as it became, never a mix; with no engine,
the task fails in one line naming ``lambdalake up``.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from datetime import datetime, timedelta

import deltalake
import pytest

from batch_layer import day_task
from domains.clickstream.generator import generate
from domains.sample import Mix
from infra import batch_engine as engines
from infra import processes
from lake import versions
from speed_layer.queries import ensure_tables
from tests import oracle
from tests.compare import day_measures, merged_rows, same_days
from tests.integration.records import land
from views import timebase

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 20, tzinfo=timebase.UTC)


def _run_task(settings) -> tuple[int, str]:
    """Run the task to its end: its exit code and the last line of its error output."""
    task = day_task.start(settings, DAY)
    _, errors = task.communicate(timeout=600)
    return task.returncode, (errors.strip().splitlines() or [""])[-1]


def _measures(view, rows: dict) -> dict:
    return day_measures(view, rows, DAY)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _records(seed: int, count: int) -> list:
    return generate(
        DAY - timedelta(days=1),
        DAY + timedelta(days=2),
        count,
        seed=seed,
        mix=Mix(late=0.05, duplicate=0.05, malformed=0.03),
    )


def test_a_task_without_the_engine_fails_in_one_line_naming_up(tables):
    code, line = _run_task(tables.save(batch_engine_port=_free_port()))
    assert code == 1
    assert line.startswith("infra.spark.EngineError: the batch engine does not answer at sc://127.0.0.1:")
    assert line.endswith("start it with `lambdalake up`")


def test_engine_killed_mid_recompute_fails_the_task_in_one_line_and_the_rerun_converges(spark, batch_engine, tables):
    views = tables.views
    first, more = _records(21, 3000), _records(22, 3000)
    ensure_tables(spark, tables)
    land(spark, tables, first)
    assert _run_task(tables) == (0, "")
    old, done = oracle.views(first), oracle.views(first + more)
    before = {name: _measures(view, merged_rows(tables, view)) for name, view in views.items()}
    assert all(same_days(before[name], _measures(view, old[name])) for name, view in views.items())  # on the engine

    land(spark, tables, more)
    new = {name: _measures(view, done[name]) for name, view in views.items()}
    assert not any(same_days(new[name], before[name]) for name in views)  # the rerun changes every view's day

    seen, reading = [], threading.Event()

    def read() -> None:  # an analyst polling every merged view's day throughout, 5 times a second (not
        # back to back: on 2 cores that would take a core from the engine it watches)
        while not reading.wait(0.2):
            seen.append({name: _measures(view, merged_rows(tables, view)) for name, view in views.items()})

    reader = threading.Thread(target=read)
    reader.start()
    try:
        paths = {name: versions.current(tables, name) for name in views}
        committed = {name: deltalake.DeltaTable(path).version() for name, path in paths.items()}
        task = day_task.start(tables, DAY)
        processes.poll(
            lambda: any(deltalake.DeltaTable(path).version() > committed[name] for name, path in paths.items()) or None,
            300,
            0.05,
            lambda: AssertionError("the recompute replaced no view's day"),
        )
        os.kill(processes.running_pid(batch_engine, engines.NAME), signal.SIGKILL)  # mid-recompute
        _, errors = task.communicate(timeout=300)
        assert task.returncode == 1
        assert (
            errors.strip().splitlines()[-1].startswith("infra.spark.EngineError: the batch engine at sc://127.0.0.1:")
        )
        halfway = {name: _measures(view, merged_rows(tables, view)) for name, view in views.items()}
        assert {name for name in views if same_days(halfway[name], new[name])} and {
            name for name in views if same_days(halfway[name], before[name])
        }  # some views replaced, some not yet

        restarted = engines.watch(batch_engine.with_overrides(batch_engine_warm_up=True))  # the watchdog DAG's task
        assert restarted.startswith("restarted") and restarted.endswith("warmed up with a rehearsed day")
        assert _run_task(tables) == (0, "")
    finally:
        reading.set()
        reader.join()
    assert all(same_days(_measures(view, merged_rows(tables, view)), new[name]) for name, view in views.items())
    assert len(seen) > 10  # the reader read throughout
    for snapshot in seen:
        assert all(same_days(snapshot[name], before[name]) or same_days(snapshot[name], new[name]) for name in views)
