"""# reprocess

Manual (Trigger → fill in the form): rebuild views with the code deployed now into a **new version**
of their batch tables, `batch/<view>@<label>`, then switch serving to all of them at once
(`batch_layer.reprocess`, `lambdalake reprocess` runs the same).

- **Form.** The views (default all), the days: a first and last day, or all history (every ended
  day of `raw_events`), and a label for the new version (lowercase letters, digits, `-`, `_`;
  not one serving or kept to switch back to). The form refuses an unknown view, a bad label or date.
- **Blue/green.** The chosen days are recomputed as the nightly run does (same code, same Great
  Expectations checks, correction report); the other days are copied from the version serving now.
  Analysts keep seeing the current versions, whole, until every view is built; then one commit of
  `serving_versions` switches them all, and the days newly final enter the ledger. A failure
  switches nothing and deletes the new tables.
- **Switch back.** The versions replaced stay `version_retention_days` (7) and
  `lambdalake reprocess --switch-back --views A,B` serves them again; `maintenance` deletes them after.
- **Beside the nightly runs.** Its work runs on the batch engine beside other runs. If a nightly
  or late-data run writes one of the views while it builds, nothing is switched (the serving version
  moved) and the task's retry builds again; nightly runs after a switch write into the new version.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import DAG, Param, get_current_context, task

from infra import dags
from infra.deployment import load
from lake import versions
from views import tables

settings = load()
views = list(settings.views)

with DAG(
    dag_id="reprocess",
    doc_md=__doc__ + dags.quality_docs(settings),
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args=dags.default_args(priority_weight=dags.BATCH_PRIORITY),
    tags=["lambdalake", "batch"],
    params={
        "views": Param(
            views,
            type="array",
            title="Views",
            description="The views to rebuild.",
            items={"type": "string", "enum": views},
            examples=views,
            minItems=1,
            uniqueItems=True,
        ),
        "start": Param(
            None,
            type=["null", "string"],
            format="date",
            title="First day",
            description="First day to recompute (UTC); leave empty with all history.",
        ),
        "end": Param(
            None,
            type=["null", "string"],
            format="date",
            title="Last day",
            description="Last day to recompute (UTC), ended; leave empty with all history.",
        ),
        "all_history": Param(
            False,
            type="boolean",
            title="All history",
            description="Recompute every ended day of raw_events instead of a day range.",
        ),
        "label": Param(
            type="string",
            pattern=versions.LABEL,
            title="Label",
            description="The new version's name: lowercase letters, digits, - and _ (e.g. v2).",
        ),
    },
):

    @task(
        inlets=[dags.table(settings, tables.RAW_EVENTS)],
        outlets=[*dags.batch_tables(settings), dags.table(settings, tables.SERVING_VERSIONS)],
    )
    def reprocess() -> dict:
        """Check the form's values, build every view's new version, then switch; the summary per view."""
        from batch_layer import reprocess as run

        params = get_current_context()["params"]
        plan = run.plan(
            settings, params["label"], params["views"], params["start"], params["end"], params["all_history"]
        )
        with dags.engine(settings) as spark:
            return dags.returned(run.reprocess(spark, settings, plan))

    reprocess()
