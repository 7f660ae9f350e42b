"""What the lambdalake DAGs share: their owner and retries, the Delta tables they read and write as
Airflow Assets (lineage in the UI), and the link to the data-quality reports their docs give."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset

from infra import storage
from infra.settings import Settings
from views import all_views, tables

#: The team that answers for the DAGs (Airflow's owner column).
OWNER = "data-platform"


def default_args(retry_delay: timedelta = timedelta(minutes=1), **more) -> dict:
    return {"owner": OWNER, "retries": 1, "retry_delay": retry_delay, **more}


def table(settings: Settings, table: tables.Table) -> Asset:
    """A Delta table as an Asset."""
    location = table.path(settings)
    return Asset(name=f"lambdalake.{table.name.replace('/', '.')}", group="delta",
                 uri=location if storage.local_path(location) is None else f"file://{storage.local_path(location)}")


def batch_tables(settings: Settings) -> list[Asset]:
    """What a batch recompute writes: each view's batch table (one Asset for all its versions, named by
    the first), the ledger, quality results and corrections."""
    batch = [tables.batch(name) for name in all_views(settings.view_modules, settings.domain)]
    return [table(settings, t) for t in (*batch, tables.SERVING_STATE, tables.QUALITY_RESULTS, tables.CORRECTIONS)]


def quality_docs(settings: Settings) -> str:
    """Markdown for a DAG's docs: where the Great Expectations Data Docs of its checks are."""
    return (f"\n\n**Data quality.** Each recompute checks raw_events and every view with Great Expectations "
            f"suites before writing; a critical failure fails the task and leaves the days as they were. "
            f"Data Docs: `{settings.data_docs}`; results: `lambdalake query \"SELECT * FROM quality_results\"`.")
