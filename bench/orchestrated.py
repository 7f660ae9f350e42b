"""Airflow: a nightly run and a 30-day backfill of demo-sized days, through Airflow's REST API.

A deployment of the bench's own runs the batch engine (a Spark Connect server) and Airflow (scheduler,
dag-processor, triggerer, API server), no Kafka: each day's generated events (demo-sized, the default
mix) are landed in raw_events as in the batch part, the last hour of each day through the speed
layer's fold. Everything is timed by the clock of Airflow's own records (REST API v2).

- **Nightly run:** `batch_recompute` starts yesterday and is unpaused on an engine just started as
  `lambdalake up` starts it (its warm-up job on a scratch table, none of the deployment's data, is
  all it has run); the scheduler runs yesterday's day. Measured: its task's start to success, and the
  moment the run was due (unpaused) to its success. The baseline: the same day's `recompute_day` in
  a warm Spark session of the bench's own process (one untimed run, then the median of 3), so the ratio
  is what Airflow, the task's process and the engine's client add.
- **Backfill:** `POST /api/v2/backfills` (what the UI's "Trigger → Backfill" dialog calls) of the 30
  days before, as many runs in flight as the DAG allows; from the call to every run's success, and
  each task's seconds.
- **Engine memory:** the engine's resident memory as the nightly run and as the backfill end, and
  again after 30 s without work (what a long-lived engine holds at rest: its collector gives back
  heap it no longer needs when it idles), then its live heap (in use right after a full collection,
  forced last). The target is judged at rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime

from batch_layer.recompute import recompute_day
from bench import batch, throughput
from infra import airflow, batch_engine, services
from infra import spark as sparks
from infra.deployment import Deployment
from infra.processes import Say
from views.timebase import DAY, UTC, day_start

DAG = "batch_recompute"
BACKFILL_DAYS = 30


@dataclass
class Memory:
    """The engine's memory, MB: resident as a run ends (``busy``) and after :data:`IDLE` seconds
    without work (``idle``), then its live heap (in use right after a full collection, forced last)."""

    busy: int
    idle: int
    live: float


#: Seconds the engine is left without work before its memory at rest is read.
IDLE = 30


@dataclass
class Runs:
    """The part's figures, seconds and MB."""

    events: int  # per day
    nightly_task: float
    nightly_due_to_success: float
    warm_recompute: list[float]
    backfill_days: int
    backfill: float
    backfill_tasks: list[float]
    engine_after_first: Memory
    engine_after_backfill: Memory
    runs_in_flight: int


def _when(moment: datetime | None) -> float:
    assert moment is not None, "a finished run or task has an end and a start"
    return moment.timestamp()


def _task_seconds(client: airflow.AirflowClient, run_id: str) -> float:
    [task] = client.task_runs(DAG, run_id)
    return _when(task.end_date) - _when(task.start_date)


def _engine_memory(settings: Deployment) -> Memory:
    """The engine's :class:`Memory` now."""
    busy = batch_engine.status(settings).rss_mb
    time.sleep(IDLE)
    status = batch_engine.status(settings)
    assert busy is not None and status.rss_mb is not None and status.pid is not None, "the batch engine stopped"
    return Memory(busy, status.rss_mb, throughput.live_heap_mb(status.pid))


def _warm(settings: Deployment, day: date, runs: int) -> list[float]:
    """``recompute_day`` of ``day`` in this process's own session: one untimed run, then ``runs`` timed."""
    spark, times = sparks.session(settings, "lambdalake-bench-warm"), []
    for _ in range(runs + 1):
        began = time.perf_counter()
        recompute_day(spark, settings, day_start(day), day_start(day) + DAY)
        times.append(time.perf_counter() - began)
    return times[1:]


def run(settings: Deployment, events: int, say: Say) -> tuple[Runs]:
    """Land the days, then the nightly run, the warm baseline and the backfill."""
    yesterday = datetime.now(UTC).date() - DAY
    days = [yesterday - i * DAY for i in range(BACKFILL_DAYS, -1, -1)]
    settings = settings.save(batch_start_date=yesterday.isoformat())
    spark = sparks.session(settings, "lambdalake-bench-build")
    batch.build(spark, settings, dict.fromkeys(days, events), say)
    try:
        for name, start in (("batch engine", batch_engine.start), ("Airflow", services.start_airflow)):
            say(f"orchestrated: starting the {name} ...")
            start(settings)
        client = airflow.AirflowClient(settings)
        client.wait_for_dag(DAG)
        say(f"orchestrated: the nightly run of {yesterday} ...")
        due = time.time()
        client.unpause(DAG)
        [(nightly, _)] = client.wait_for_runs(DAG, 1, timeout=600).items()
        [run] = [r for r in client.dag_runs(DAG) if r.run_id == nightly]
        first = _engine_memory(settings)
        say(f"orchestrated: warm recompute_day of {yesterday} in this process ...")
        warm = _warm(settings, yesterday, 3)
        say(f"orchestrated: backfill of {days[0]} .. {days[-2]} ...")
        began = time.time()
        client.create_backfill(DAG, day_start(days[0]), day_start(days[-2]))
        done = client.wait_for_runs(DAG, len(days), timeout=3600)
        finished = max(_when(r.end_date) for r in client.dag_runs(DAG) if r.run_type == "backfill")
        backfilled = [run_id for run_id in done if run_id != nightly]
        last = _engine_memory(settings)
        return (
            Runs(
                events,
                _task_seconds(client, nightly),
                _when(run.end_date) - due,
                warm,
                len(backfilled),
                finished - began,
                [_task_seconds(client, r) for r in backfilled],
                first,
                last,
                airflow.BATCH_RUNS_IN_FLIGHT,
            ),
        )
    finally:
        airflow.stop(settings)
        batch_engine.stop(settings)
        spark.stop()
