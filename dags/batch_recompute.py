"""# batch_recompute

Nightly batch layer: recompute every view, exactly, for the day that just ended, from the master
dataset (`raw_events`), replacing that day in `batch/<view>` and recording that day final in the ledger.

- **Which day.** The run that fires at midnight D has the data interval [D-1, D) and recomputes that
  day (a `CronDataIntervalTimetable`; Airflow 3's default cron timetable would give start == end).
- **Backfills.** Runs since `batch_start_date` are caught up; older or repeated days can be backfilled
  from the UI ("Trigger" → "Backfill") or `POST /api/v2/backfills`. A day's recompute replaces exactly
  that day, so reruns converge.
- **One at a time.** One run, one task at a time: each starts a Spark JVM on a small machine.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, CronDataIntervalTimetable, get_current_context, task

from infra import dags
from infra.settings import load
from views import tables

settings = load()


def _start_date() -> datetime:
    """The deployment's first batch day, or three days ago if ``lambdalake up`` has not set one."""
    configured = settings.batch_start_date
    if configured:
        return datetime.fromisoformat(configured).replace(tzinfo=timezone.utc)
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=3)


with DAG(
    dag_id="batch_recompute",
    doc_md=__doc__ + dags.quality_docs(settings),
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=_start_date(),
    catchup=True,
    max_active_runs=1,
    max_active_tasks=1,
    default_args=dags.default_args(pool="spark"),
    tags=["lambdalake", "batch"],
):

    @task(inlets=[dags.table(settings, tables.RAW_EVENTS)], outlets=dags.batch_tables(settings))
    def recompute() -> dict:
        """Recompute all views for the run's data interval; return the batch layer's summary."""
        from batch_layer.recompute import recompute_day

        context = get_current_context()
        return recompute_day(settings, context["data_interval_start"], context["data_interval_end"])

    recompute()
