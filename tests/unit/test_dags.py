"""The DAG files parse, the nightly batch run recomputes the day that just ended, and the reprocess DAG's
form refuses what is wrong."""

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from infra.airflow import DAG_IDS
from infra.deployment import REPO

pytestmark = pytest.mark.processes

MIDNIGHT_NOV_19 = datetime(2026, 11, 19, tzinfo=UTC)
MIDNIGHT_NOV_20 = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    """Every DAG in dags/, parsed as the dag-processor does, for an empty deployment."""
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as env:
        env.setenv("LAMBDALAKE_HOME", str(tmp_path_factory.mktemp("home")))
        return DagBag(dag_folder=str(REPO / "dags"))  # Airflow 3 DagBags have no example DAGs


def _serialized(dagbag, dag_id: str):
    """The DAG as the scheduler and API server see it: after serialization."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags[dag_id]))


@pytest.fixture(scope="module")
def batch_timetable(dagbag):
    """batch_recompute's timetable as the scheduler sees it (the core timetable)."""
    return _serialized(dagbag, "batch_recompute").timetable


@pytest.fixture(scope="module")
def reprocess_form(dagbag):
    """Validate a trigger of the reprocess DAG as the API server does (its trigger form posts the same)."""
    params = _serialized(dagbag, "reprocess").params
    return lambda conf: params.deep_merge(conf).validate()


def test_every_dag_imports(dagbag):
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dag_ids) == list(DAG_IDS)
    assert all(dag.doc_md for dag in dagbag.dags.values())


def _last_line(probe: str, home) -> str:
    """The last line ``probe`` prints, run by a new Python for a deployment at ``home`` (the unit tests'
    throwaway Airflow home)."""
    env = {"LAMBDALAKE_HOME": str(home), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    env["AIRFLOW_HOME"] = os.environ["AIRFLOW_HOME"]
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    return result.stdout.strip().splitlines()[-1]


def test_dag_files_import_no_spark_or_great_expectations(tmp_path):
    """The dag-processor parses every DAG file often: none may start importing Spark, Delta or GX."""
    probe = (
        "import runpy, sys\n"
        f"for path in sorted(__import__('pathlib').Path({str(REPO / 'dags')!r}).glob('*.py')):\n"
        "    runpy.run_path(str(path))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'delta', 'great_expectations'}))"
    )
    assert _last_line(probe, tmp_path) == "[]"


def test_after_the_dag_processors_preload_a_parse_imports_only_the_domain_and_the_dag_files(tmp_path):
    """infra.dag_processor: what the DAG files import is loaded before the dag-processor forks its parses;
    a parse then imports the deployment's domain (its views, which the DAG files list) and nothing else."""
    probe = (
        "import sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "from infra.dag_processor import preload\n"
        "preload()\n"
        "before = set(sys.modules)\n"
        f"bag = DagBag(dag_folder={str(REPO / 'dags')!r})\n"
        "assert not bag.import_errors, bag.import_errors\n"
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    imported = _last_line(probe, tmp_path).split()  # after DagBag's log lines
    dag_files = {name for name in imported if name.startswith("unusual_prefix_")}  # DagBag's: a hash, the stem
    assert sorted(name.split("_", 3)[-1] for name in dag_files) == sorted(p.stem for p in (REPO / "dags").glob("*.py"))
    # of Airflow, at most a module a DagBag imports itself (airflow.version)
    assert {name.split(".")[0] for name in imported if name not in dag_files} - {"airflow"} == {"domains"}


def test_every_dag_has_its_owner_retries_and_docs(dagbag):
    from infra.dags import OWNER

    for dag in dagbag.dags.values():
        assert dag.owner == OWNER and dag.doc_md and dag.tags
        assert all(task.retries >= 1 for task in dag.tasks), dag.dag_id


def _tables(assets) -> set[str]:
    """The tables ``assets`` are, by their path in the deployment's data folder."""
    return {asset.uri.split("/data/", 1)[1] for asset in assets}


def test_batch_dags_write_the_view_tables_as_assets_and_link_the_data_docs(dagbag):
    for dag_id in ("batch_recompute", "late_data_recompute"):
        dag = dagbag.dags[dag_id]
        recompute = dag.get_task("recompute")
        assert _tables(recompute.inlets) >= {"raw_events"}
        assert _tables(recompute.outlets) >= {
            "batch/page_views_per_minute",
            "batch/sessions_hourly",
            "serving_state",
            "quality_results",
        }
        assert "Data Docs: `" in dag.doc_md and "gx/uncommitted/data_docs/local_site/index.html" in dag.doc_md


def test_late_data_recompute_runs_on_the_late_events_the_watchdog_announces_or_hourly(dagbag):
    announce = dagbag.dags["speed_layer_watchdog"].get_task("announce_late_data")
    assert _tables(announce.outlets) == {"late_events"}
    timetable = _serialized(dagbag, "late_data_recompute").timetable
    assert [asset.uri for asset in timetable.asset_condition.objects] == [asset.uri for asset in announce.outlets]
    assert timetable.description == "Triggered by assets or Every hour"


def test_batch_recompute_is_configuration(dagbag):
    dag = dagbag.dags["batch_recompute"]
    assert dag.catchup and dag.max_active_runs == 4
    assert dag.doc_md and "batch_recompute" in dag.doc_md and "Run After" in dag.doc_md
    assert dag.default_args["retries"] >= 1
    assert [t.task_id for t in dag.tasks] == ["recompute"]


def test_scheduled_run_at_midnight_recomputes_the_day_that_ended(batch_timetable):
    from airflow.timetables.base import DataInterval, TimeRestriction

    info = batch_timetable.next_dagrun_info(
        last_automated_data_interval=DataInterval(datetime(2026, 11, 18, tzinfo=UTC), MIDNIGHT_NOV_19),
        restriction=TimeRestriction(earliest=None, latest=None, catchup=True),
    )
    assert info.run_after == MIDNIGHT_NOV_20
    assert info.data_interval == DataInterval(MIDNIGHT_NOV_19, MIDNIGHT_NOV_20)
    assert info.logical_date == MIDNIGHT_NOV_19


def test_manual_run_for_midnight_recomputes_the_day_before(batch_timetable):
    from airflow.timetables.base import DataInterval

    interval = batch_timetable.infer_manual_data_interval(run_after=MIDNIGHT_NOV_20)
    assert interval == DataInterval(MIDNIGHT_NOV_19, MIDNIGHT_NOV_20)


def test_batch_tasks_go_before_maintenance_and_retry_past_the_watchdogs_restart_of_the_engine(dagbag):
    from infra.dags import BATCH_PRIORITY, MAINTENANCE_PRIORITY

    batch = [
        dagbag.dags[dag].get_task(task)
        for dag, task in (
            ("batch_recompute", "recompute"),
            ("late_data_recompute", "recompute"),
            ("reprocess", "reprocess"),
        )
    ]
    upkeep = [dagbag.dags["maintenance"].get_task(task) for task in ("compact_speed_partials", "optimize_and_vacuum")]
    assert BATCH_PRIORITY > MAINTENANCE_PRIORITY
    assert [t.priority_weight for t in batch + upkeep] == [BATCH_PRIORITY] * 3 + [MAINTENANCE_PRIORITY] * 2
    assert {t.weight_rule for t in batch + upkeep} == {"absolute"}
    assert {t.pool for t in batch + upkeep} == {"default_pool"}  # no one-slot pool: runs share the engine
    for recompute in batch[:2]:  # doubling waits between tries: 1 + 2 + 4 minutes
        waits = sum((recompute.retry_delay * 2**n for n in range(recompute.retries)), timedelta())
        assert recompute.retry_exponential_backoff and waits > timedelta(minutes=5), recompute.dag_id


def test_reprocess_is_manual_and_writes_every_batch_table_and_the_version_pointers(dagbag):
    dag = dagbag.dags["reprocess"]
    assert not dag.timetable.can_be_scheduled and dag.max_active_runs == 1
    assert _tables(dag.get_task("reprocess").outlets) >= {
        "batch/page_views_per_minute",
        "serving_state",
        "serving_versions",
    }


def test_reprocess_form_takes_views_days_or_all_history_and_a_label(reprocess_form):
    from views import all_views

    assert reprocess_form({"label": "v2"}) == {
        "views": list(all_views()),
        "start": None,
        "end": None,
        "all_history": False,
        "label": "v2",
    }
    days = reprocess_form(
        {"label": "fix-2026_11", "views": ["sessions_hourly"], "start": "2026-11-01", "end": "2026-11-02"}
    )
    assert (days["views"], days["start"], days["end"]) == (["sessions_hourly"], "2026-11-01", "2026-11-02")
    assert reprocess_form({"label": "v3", "all_history": True})["all_history"] is True


@pytest.mark.parametrize(
    "conf,param",
    [
        ({}, "label"),
        ({"label": "V2"}, "label"),
        ({"label": "new version"}, "label"),
        ({"label": "-v2"}, "label"),
        ({"label": "v2", "views": ["no_such_view"]}, "views"),
        ({"label": "v2", "views": []}, "views"),
        ({"label": "v2", "start": "2026-11-31"}, "start"),
        ({"label": "v2", "end": "yesterday"}, "end"),
    ],
)
def test_reprocess_form_refuses_a_bad_label_view_or_day(reprocess_form, conf, param):
    from airflow.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=f"Invalid input for param {param}:"):
        reprocess_form(conf)


def test_a_table_s_asset_is_named_by_its_location_so_moved_tables_are_new_assets(tmp_path):
    """Airflow activates an Asset only while no active one has its name: tables moved by ``storage``
    must not reuse the old Assets' names (their tasks would fail on inactive Assets)."""
    from infra import dags
    from infra.deployment import load
    from views import tables

    local = load(tmp_path)
    moved = local.with_overrides(storage="s3a://lake/lambdalake")
    here, there = (dags.table(settings, tables.RAW_EVENTS) for settings in (local, moved))
    assert (here.name, here.uri) == (here.uri, (local.data / "raw_events").as_uri())
    assert (there.name, there.uri) == ("s3a://lake/lambdalake/raw_events",) * 2
