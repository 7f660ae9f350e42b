"""# speed_layer_watchdog

Every five minutes: is the speed layer alive, reporting its health, free of failed queries, and
making progress while Kafka holds unprocessed records? If not, restart it (it resumes from its
checkpoints, exactly once). A speed layer stopped on purpose (`lambdalake speed stop`) is left alone
until `lambdalake speed start`.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task

from infra import dags
from infra.settings import load

with DAG(
    dag_id="speed_layer_watchdog",
    doc_md=__doc__,
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args=dags.default_args(),
    tags=["lambdalake", "speed"],
):

    @task
    def watch() -> str:
        """Check the speed layer and restart it if needed; say what was found."""
        from infra.services import watch_speed

        return watch_speed(load())

    watch()
