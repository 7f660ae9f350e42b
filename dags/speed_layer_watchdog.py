"""# speed_layer_watchdog

Every five minutes: is the speed layer alive, reporting its health, free of failed queries, and
making progress while Kafka holds unprocessed records? If not, restart it (it resumes from its
checkpoints, exactly once). A speed layer stopped on purpose (`lambdalake speed stop`) is left alone
until `lambdalake speed start`. It watches the **batch engine** too (the Spark Connect server the batch
and maintenance tasks send their work to): if it died or does not answer, it is started again, and the
batch tasks that failed meanwhile succeed on their retry.

It also **announces late data**: when late events have arrived for days batch has made final
(`batch_layer.stale`) and none has arrived for them in the last `late_data_quiet_minutes` (10), it
updates the late_events table's Asset, on which `late_data_recompute` is scheduled, so a burst of late
events is corrected once, minutes after it, rather than at the next hour. Late events that keep
coming (just after midnight, for the day before) are corrected by that DAG's hourly run instead of
every five minutes. Otherwise that task is skipped and the Asset is not updated.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowSkipException

from infra import dags
from infra.deployment import load
from views import tables

settings = load()

with DAG(
    dag_id="speed_layer_watchdog",
    doc_md=__doc__,
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args=dags.default_args(),
    tags=["lambdalake", "speed"],
):

    @task
    def watch() -> str:
        """Check the speed layer and restart it if needed; say what was found."""
        from infra.services import watch_speed

        return watch_speed(settings)

    @task(outlets=[dags.table(settings, tables.LATE_EVENTS)])
    def announce_late_data() -> list[str]:
        """Update the late_events Asset if final days have late events to correct that stopped coming;
        else skip."""
        from batch_layer.stale import settled_days

        days = settled_days(settings, datetime.now(UTC))
        if not days:
            raise AirflowSkipException("no final day has late events to correct that stopped coming")
        return [day.isoformat() for day in days]

    @task
    def watch_engine() -> str:
        """Restart the batch engine if it is not running or does not answer; say what was found."""
        from infra import batch_engine

        return batch_engine.watch(settings)

    watch()
    watch_engine()
    announce_late_data()
