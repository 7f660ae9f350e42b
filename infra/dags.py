"""What the lambdalake DAGs share: their owner, retries and priorities, the batch engine their Spark
work goes to, the Delta tables they read and write as Airflow Assets (lineage in the UI), and the link
to the data-quality reports their docs give."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset

from infra import storage
from infra.airflow import BATCH_RUNS_IN_FLIGHT, ENGINE_CONNECTION  # noqa: F401 (the DAGs' settings)
from infra.deployment import Deployment
from views import tables

#: The team that answers for the DAGs (Airflow's owner column).
OWNER = "data-platform"


#: A batch task's retries outlast the watchdog's period (5 minutes), which restarts a lost engine: 1, 2, 4 min.
ENGINE_RETRIES: dict[str, Any] = {"retries": 3, "retry_exponential_backoff": True}
#: Tasks' priorities when they wait for a slot: batch runs before maintenance.
BATCH_PRIORITY, MAINTENANCE_PRIORITY = 10, 1


def default_args(retry_delay: timedelta = timedelta(minutes=1), **more: object) -> dict:
    return {"owner": OWNER, "retries": 1, "retry_delay": retry_delay, "weight_rule": "absolute", **more}


def returned(per_view: Mapping[str, Any]) -> dict[str, dict]:
    """A task's answer per view (the batch layer's dataclasses) as its XCom: JSON."""
    return {name: asdict(answer) for name, answer in per_view.items()}


def engine(settings: Deployment) -> AbstractContextManager:
    """A session of the batch engine at the address the Airflow Connection holds (infra.spark.engine);
    call within a task."""
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    from infra import spark as sparks

    try:
        connection = Connection.get(ENGINE_CONNECTION)
    except AirflowNotFoundException:
        raise sparks.EngineError(
            f"no Airflow Connection {ENGINE_CONNECTION!r} (the batch engine's address): run `lambdalake up`"
        ) from None
    return sparks.engine(settings, f"sc://{connection.host}:{connection.port}")


def table(settings: Deployment, table: tables.Table) -> Asset:
    """A Delta table as an Asset, named by its location (Airflow's default: the URI). Airflow activates an
    Asset only while no active one has its name: under a fixed name, tables moved by the ``storage``
    setting would be inactive Assets until the scheduler next retired the old ones, and a task writing
    them would fail meanwhile, without retries."""
    location = table.path(settings)
    return Asset(
        location if storage.local_path(location) is None else f"file://{storage.local_path(location)}", group="delta"
    )


def batch_tables(settings: Deployment) -> list[Asset]:
    """What a batch recompute writes: each view's batch table (one Asset for all its versions, named by
    the first), the ledger, quality results and corrections."""
    batch = [tables.batch(name) for name in settings.views]
    return [table(settings, t) for t in (*batch, tables.SERVING_STATE, tables.QUALITY_RESULTS, tables.CORRECTIONS)]


def quality_docs(settings: Deployment) -> str:
    """Markdown for a DAG's docs: where the Great Expectations Data Docs of its checks are."""
    return (
        f"\n\n**Data quality.** Each recompute checks raw_events and every view with Great Expectations "
        f"suites before writing; a critical failure fails the task and leaves the days as they were. "
        f'Data Docs: `{settings.data_docs}`; results: `lambdalake query "SELECT * FROM quality_results"`.'
    )
