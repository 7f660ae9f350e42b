"""Airflow losing its scheduler and API server to ``kill -9`` mid-backfill.

Nothing restarts them by itself (the watchdog is an Airflow DAG, which a dead scheduler does not run):
``lambdalake up`` starts them again. Then nothing of the dead scheduler is left running, its tasks
rerun, the backfill completes, the ledger records each day of each view final once, and the merged
views equal the oracle.
"""

from __future__ import annotations

import signal
from datetime import date
from itertools import product

import deltalake
import psutil
import pytest

from domains.clickstream.generator import generate
from domains.sample import Mix
from infra import airflow, processes, services
from speed_layer.queries import ensure_tables
from tests import oracle
from tests.compare import assert_final_and_exact
from tests.integration.records import land
from views import tables
from views.timebase import DAY, day_start

pytestmark = pytest.mark.integration

DAG = "batch_recompute"
#: Long before the DAG's start date, and no other test's: the days land in the deployment's own tables,
#: where Airflow's tasks read and write.
DAYS = [date(2026, 10, 5), date(2026, 10, 6)]


def _ledger(settings) -> list[tuple[str, date]]:
    """The ledger's (view, day) rows of :data:`DAYS`."""
    try:
        rows = deltalake.DeltaTable(tables.SERVING_STATE.path(settings)).to_pyarrow_table(columns=["view", "day"])
    except deltalake.exceptions.TableNotFoundError:
        return []
    return [(row["view"], row["day"]) for row in rows.to_pylist() if row["day"] in DAYS]


def test_scheduler_and_api_server_killed_mid_backfill_come_back_with_up_and_it_completes(
    spark, batch_engine, airflow_service
):
    settings, client = airflow_service.settings, airflow_service.client
    start, end = day_start(DAYS[0]), day_start(DAYS[-1]) + DAY
    records = generate(start, end, 1000 * len(DAYS), seed=31, mix=Mix(late=0.05, duplicate=0.05, malformed=0.03))
    ensure_tables(spark, settings)
    land(spark, settings, records)
    every = set(product(settings.views, DAYS))

    client.create_backfill(DAG, start, day_start(DAYS[-1]))
    client.unpause(DAG)
    try:
        processes.poll(
            lambda: _ledger(settings) or None, 300, 0.2, lambda: AssertionError("the backfill recorded no day final")
        )
        scheduler = psutil.Process(processes.running_pid(settings, airflow.SCHEDULER))
        forked = scheduler.children(recursive=True)  # its executor's workers and the tasks they run
        killed = [
            psutil.Process(processes.running_pid(settings, name)) for name in (airflow.SCHEDULER, airflow.API_SERVER)
        ]
        for proc in killed:
            proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(killed, timeout=30)  # gone, as before a user's `up`: a kill -9 is not instant
        assert set(_ledger(settings)) < every  # mid-backfill

        services.start_airflow(settings)  # what `lambdalake up` does
        assert [proc for proc in forked if proc.is_running()] == []
        client.wait_for_runs(DAG, [run.run_id for run in client.dag_runs(DAG)], timeout=600)
    finally:
        client.pause(DAG)
    assert sorted(_ledger(settings)) == sorted(every)
    assert_final_and_exact(settings, oracle.views(records), start, end)
