"""# batch_recompute

Nightly batch layer: recompute every view, exactly, for the day that just ended, from the master
dataset (`raw_events`), replacing that day in `batch/<view>` and recording that day final in the ledger.

- **Which day.** The run that fires at midnight D has the data interval [D-1, D) and recomputes that
  day (a `CronDataIntervalTimetable`; Airflow 3's default cron timetable would give start == end).
- **Backfills.** Runs since `batch_start_date` are caught up; older or repeated days can be backfilled
  from the UI ("Trigger" → "Backfill") or `POST /api/v2/backfills`. A day's recompute replaces exactly
  that day, so reruns converge. In the dialog, type the *days to recompute* as the date range: from
  the first day to the last, both included (to redo 1-30 November: 2026-11-01 to 2026-11-30). Each
  run is listed under the day after its day ("Run After" 2026-11-02 for 1 November), when that day's
  data was complete; its data interval shows the day itself. Set "Max Active Runs" to 4 to run the
  days four at a time.
- **On the batch engine.** The task sends its work to the deployment's long-lived Spark engine (a
  Spark Connect server that `lambdalake up` starts; its address is the Airflow Connection
  `spark_connect_default`) and starts no JVM: several runs are in flight at once, sharing its cores.
  If the engine is down, the task fails in one line saying so; the watchdog restarts the engine and
  the task's retry reruns the day.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable, get_current_context, task

from infra import dags
from infra.deployment import load
from views import tables

settings = load()


def _start_date() -> datetime:
    """The deployment's first batch day, or three days ago if ``lambdalake up`` has not set one."""
    configured = settings.batch_start_date
    if configured:
        return datetime.fromisoformat(configured).replace(tzinfo=UTC)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=3)


with DAG(
    dag_id="batch_recompute",
    doc_md=__doc__ + dags.quality_docs(settings),
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=_start_date(),
    catchup=True,
    max_active_runs=dags.BATCH_RUNS_IN_FLIGHT,
    default_args=dags.default_args(priority_weight=dags.BATCH_PRIORITY, **dags.ENGINE_RETRIES),
    tags=["lambdalake", "batch"],
):

    @task(inlets=[dags.table(settings, tables.RAW_EVENTS)], outlets=dags.batch_tables(settings))
    def recompute() -> dict:
        """Recompute all views for the run's data interval; return the batch layer's summary."""
        from batch_layer.recompute import recompute_day

        context = get_current_context()
        with dags.engine(settings) as spark:
            return dags.returned(
                recompute_day(spark, settings, context["data_interval_start"], context["data_interval_end"])
            )

    recompute()
