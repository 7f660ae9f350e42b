"""# maintenance

Every hour, off the speed layer's hot path:

1. **Compact speed partials**: fold the speed layer's partials of every closed hour into one row per
   window and key (`speed_layer.compact`). Each micro-batch appends a partial per window it touches;
   an hour is closed once no new event can change its windows (the watermark has passed them by as far
   as the view reaches back: a click may still flag a 30-minute-old search, a session may still grow
   from a day ago). An hour is replaced in one Delta commit, so analysts never see a half-folded view,
   and the speed layer never appends to it again, so the two never conflict.
2. **Retire batch versions**: delete the versions of views' batch tables that serve no view and can no
   longer be switched back to (`version_retention_days` after a reprocess replaced them;
   `lake.versions.retire`).
3. **OPTIMIZE** every Delta table that has small files (bin-packing what micro-batches leave), then
   **VACUUM** the files no version within the retention (`vacuum_retention_hours`, a week by default,
   set as each table's property) reads, so time travel and running readers keep working
   (`batch_layer.maintenance`). A table with nothing to do costs no Spark job and no commit.

Its Spark work goes to the batch engine, below batch runs in priority: it never holds a nightly run up.
4. **Trim logs**: Airflow task and parsing logs older than `log_retention_days`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, chain, task

from infra import dags
from infra.deployment import load

with DAG(
    dag_id="maintenance",
    doc_md=__doc__,
    schedule="@hourly",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args=dags.default_args(timedelta(minutes=5), priority_weight=dags.MAINTENANCE_PRIORITY),
    tags=["lambdalake", "speed", "maintenance"],
):

    @task
    def compact_speed_partials() -> dict:
        """Fold the closed hours of every view; the hours folded per view."""
        from speed_layer.compact import compact

        settings = load()
        with dags.engine(settings) as spark:
            return compact(spark, settings)

    @task
    def retire_versions() -> list[str]:
        """Delete the batch versions past their retention; their names."""
        from lake.versions import retire

        return retire(load())

    @task
    def optimize_and_vacuum() -> dict:
        """Compact every table's small files, then delete the files outside the retention."""
        from batch_layer import maintenance

        settings = load()
        with dags.engine(settings) as spark:
            return {"optimized": maintenance.optimize(spark, settings), "vacuumed": maintenance.vacuum(spark, settings)}

    @task
    def trim_logs() -> int:
        """Delete old Airflow logs; how many files went."""
        from batch_layer.maintenance import trim_logs as trim

        return trim(load())

    chain(compact_speed_partials(), retire_versions(), optimize_and_vacuum(), trim_logs())
