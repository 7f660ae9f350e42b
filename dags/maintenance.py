"""# maintenance

Every hour, off the speed layer's hot path: fold the speed layer's partials of every closed hour into
one row per window and key (`speed_layer.compact`). Each micro-batch appends a partial per window it
touches; an hour is closed once no new event can change its windows (the watermark has passed them by
as far as the view reaches back: a click may still flag a 30-minute-old search, a session may still
grow from a day ago). An hour is replaced in one Delta commit, so analysts never see a half-folded
view, and the speed layer never appends to it again, so the two never conflict.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task

from infra import dags
from infra.settings import load

with DAG(
    dag_id="maintenance",
    doc_md=__doc__,
    schedule="@hourly",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args=dags.default_args(timedelta(minutes=5), pool="spark"),
    tags=["lambdalake", "speed"],
):

    @task
    def compact_speed_partials() -> dict:
        """Fold the closed hours of every view; the hours folded per view."""
        from infra import spark as sparks
        from speed_layer.compact import compact

        settings = load()
        return compact(sparks.session(settings, "lambdalake-maintenance"), settings)

    compact_speed_partials()
