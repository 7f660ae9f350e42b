"""What the lambdalake DAGs share: their owner and retries, the Delta tables they read and write as
Airflow Assets (lineage in the UI), and the link to the data-quality reports their docs give."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset

from batch_layer import versions
from infra.settings import Settings
from views import all_views

#: The team that answers for the DAGs (Airflow's owner column).
OWNER = "data-platform"


def default_args(retry_delay: timedelta = timedelta(minutes=1), **more) -> dict:
    return {"owner": OWNER, "retries": 1, "retry_delay": retry_delay, **more}


def table(settings: Settings, name: str) -> Asset:
    """The Delta table ``name`` as an Asset."""
    return Asset(name=f"lambdalake.{name.replace('/', '.')}", uri=f"file://{settings.table(name)}", group="delta")


def batch_tables(settings: Settings) -> list[Asset]:
    """What a batch recompute writes: each view's batch table (one Asset for all its versions, named by
    the first), the ledger, quality results and corrections."""
    names = [versions.table_name(name) for name in all_views(settings.view_modules, settings.domain)]
    return [table(settings, name) for name in (*names, "serving_state", "quality_results", "corrections")]


def quality_docs(settings: Settings) -> str:
    """Markdown for a DAG's docs: where the Great Expectations Data Docs of its checks are."""
    return (f"\n\n**Data quality.** Each recompute checks raw_events and every view with Great Expectations "
            f"suites before writing; a critical failure fails the task and leaves the days as they were. "
            f"Data Docs: `{settings.data_docs}`; results: `lambdalake query \"SELECT * FROM quality_results\"`.")
