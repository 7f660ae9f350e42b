"""The DAG files parse, and the nightly batch run recomputes the day that just ended."""

from datetime import datetime, timezone

import pytest

from infra.airflow import DAG_IDS
from infra.settings import REPO

MIDNIGHT_NOV_19 = datetime(2026, 11, 19, tzinfo=timezone.utc)
MIDNIGHT_NOV_20 = datetime(2026, 11, 20, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    """Every DAG in dags/, parsed as the dag-processor does, for an empty deployment."""
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as env:
        env.setenv("LAMBDALAKE_HOME", str(tmp_path_factory.mktemp("home")))
        return DagBag(dag_folder=str(REPO / "dags"))  # Airflow 3 DagBags have no example DAGs


@pytest.fixture(scope="module")
def batch_timetable(dagbag):
    """batch_recompute's timetable as the scheduler sees it: after serialization (the core timetable)."""
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags["batch_recompute"]))
    return dag.timetable


def test_every_dag_imports(dagbag):
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dag_ids) == list(DAG_IDS)
    assert all(dag.doc_md for dag in dagbag.dags.values())


def test_every_dag_has_its_owner_retries_and_docs(dagbag):
    from infra.dags import OWNER

    for dag in dagbag.dags.values():
        assert dag.owner == OWNER and dag.doc_md and dag.tags
        assert all(task.retries >= 1 for task in dag.tasks), dag.dag_id


def test_batch_dags_write_the_view_tables_as_assets_and_link_the_data_docs(dagbag):
    for dag_id in ("batch_recompute", "late_data_recompute"):
        dag = dagbag.dags[dag_id]
        recompute = dag.get_task("recompute")
        assert {a.name for a in recompute.inlets} >= {"lambdalake.raw_events"}
        assert {a.name for a in recompute.outlets} >= {
            "lambdalake.batch.page_views_per_minute", "lambdalake.batch.sessions_hourly",
            "lambdalake.serving_state", "lambdalake.quality_results"}
        assert "Data Docs: `" in dag.doc_md and "gx/uncommitted/data_docs/local_site/index.html" in dag.doc_md


def test_batch_recompute_is_configuration(dagbag):
    dag = dagbag.dags["batch_recompute"]
    assert dag.catchup and dag.max_active_runs == 1
    assert dag.doc_md and "batch_recompute" in dag.doc_md
    assert dag.default_args["retries"] >= 1
    assert [t.task_id for t in dag.tasks] == ["recompute"]


def test_scheduled_run_at_midnight_recomputes_the_day_that_ended(batch_timetable):
    from airflow.timetables.base import DataInterval, TimeRestriction

    info = batch_timetable.next_dagrun_info(
        last_automated_data_interval=DataInterval(datetime(2026, 11, 18, tzinfo=timezone.utc), MIDNIGHT_NOV_19),
        restriction=TimeRestriction(earliest=None, latest=None, catchup=True))
    assert info.run_after == MIDNIGHT_NOV_20
    assert info.data_interval == DataInterval(MIDNIGHT_NOV_19, MIDNIGHT_NOV_20)
    assert info.logical_date == MIDNIGHT_NOV_19


def test_manual_run_for_midnight_recomputes_the_day_before(batch_timetable):
    from airflow.timetables.base import DataInterval

    interval = batch_timetable.infer_manual_data_interval(run_after=MIDNIGHT_NOV_20)
    assert interval == DataInterval(MIDNIGHT_NOV_19, MIDNIGHT_NOV_20)
