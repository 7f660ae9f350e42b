"""# late_data_recompute

Eventual accuracy for late data: events behind a view's speed watermark are dropped by the speed
views but land in `raw_events`, and the speed layer counts them per view and day in `late_events`.
This DAG recomputes exactly the days that were batched already and have received late events since
that can change them (`batch_layer.stale.stale_days`: a day before the events' own, only if its windows
reach their first, as the ledger's `open_until` says), one mapped task per run of consecutive stale
days, each computed together on the batch engine (raw_events read once for the run of days), replacing
those days and recording each final on its own. It runs on data: when `speed_layer_watchdog` updates
the late_events table's Asset (it found such days whose late events stopped coming
`late_data_quiet_minutes` ago), and every hour in any case (for days whose late events keep coming).
Days not batched yet need nothing: their nightly `batch_recompute` run will count the late events.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from airflow.sdk import DAG, AssetOrTimeSchedule, CronTriggerTimetable, task

from infra import dags
from infra.deployment import load
from views import tables

settings = load()

with DAG(
    dag_id="late_data_recompute",
    doc_md=__doc__ + dags.quality_docs(settings),
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 * * * *", timezone="UTC"), assets=[dags.table(settings, tables.LATE_EVENTS)]
    ),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args=dags.default_args(priority_weight=dags.BATCH_PRIORITY, **dags.ENGINE_RETRIES),
    tags=["lambdalake", "batch"],
):

    @task
    def stale_days() -> list[list[str]]:
        """The days to recompute, as runs of consecutive days [first, last] (read from two small Delta
        tables, no Spark)."""
        from batch_layer.stale import stale_days as find
        from views.timebase import ranges

        return [[first.isoformat(), last.isoformat()] for first, last in ranges(find(settings))]

    @task(
        inlets=[dags.table(settings, tables.RAW_EVENTS), dags.table(settings, tables.LATE_EVENTS)],
        outlets=dags.batch_tables(settings),
    )
    def recompute(days: list[str]) -> dict:
        """Recompute every view for one run of consecutive stale days [first, last]."""
        from batch_layer.recompute import recompute_day
        from views.timebase import DAY, day_start

        first, last = (day_start(date.fromisoformat(day)) for day in days)
        with dags.engine(settings) as spark:
            return dags.returned(recompute_day(spark, settings, first, last + DAY))

    recompute.expand(days=stale_days())
