"""Airflow with its metadata in PostgreSQL (the setting ``airflow_database``), in a deployment of its own
beside the session's SQLite one: it comes up healthy with its own cluster, its scheduler runs a real
batch_recompute run to success, whose record is in PostgreSQL, starting it again brings back a database
that went away, and stopping it leaves nothing running."""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from domains.clickstream.generator import generate
from infra import airflow, postgres, processes
from infra import deployment as config
from speed_layer.queries import ensure_tables
from tests.integration.records import land
from tests.plugins.airflow_service import running
from views import timebase

pytestmark = pytest.mark.integration


@pytest.fixture
def on_postgres(deployment, batch_engine):
    """The session deployment's settings in a home of its own, Airflow on PostgreSQL at the next port,
    the batch DAG starting yesterday as of now (the session may have begun the day before). The home is
    reachable by the ``postgres`` user that runs the cluster when the tests run as root
    (pytest's own tmp folders are root's alone)."""
    home = Path(tempfile.mkdtemp(prefix="lambdalake-postgres-"))
    home.chmod(0o711)
    stored = json.loads((deployment.home / "settings.json").read_text())
    yesterday = datetime.now(timebase.UTC).date() - timedelta(days=1)
    (home / "settings.json").write_text(
        json.dumps(
            {
                **stored,
                "airflow_database": "postgresql",
                "airflow_port": deployment.airflow_port + 1,
                "batch_start_date": yesterday.isoformat(),
            }
        )
    )
    try:
        with running(config.load(home)) as service:
            yield service
    finally:
        shutil.rmtree(home)


def test_the_scheduler_runs_batch_recompute_with_its_metadata_in_postgresql(spark, on_postgres):
    settings, client = on_postgres.settings, on_postgres.client
    status = airflow.status(settings)
    assert set(status) == {*airflow.SERVICES, postgres.NAME}
    assert all(service.healthy for service in status.values())

    assert settings.batch_start_date is not None
    yesterday = datetime.fromisoformat(settings.batch_start_date).replace(tzinfo=timebase.UTC)
    ensure_tables(spark, settings)
    land(spark, settings, generate(yesterday, yesterday + timedelta(days=1), 300, seed=7))
    client.unpause("batch_recompute")  # catch-up from batch_start_date: yesterday's run (and today's, past midnight)
    runs = client.wait_for_runs("batch_recompute", 1, timeout=600)
    assert set(runs.values()) == {"success"}

    with psycopg.connect(postgres.url(settings).replace("+psycopg", "")) as metadata:
        states = metadata.execute("SELECT run_id, state FROM dag_run WHERE run_id = ANY(%s)", (list(runs),)).fetchall()
    assert dict(states) == runs
    assert not (airflow.airflow_home(settings) / "airflow.db").exists()

    assert postgres.stop(settings)  # the database gone under a running Airflow: starting it again (`up`) heals
    airflow.start(settings)
    assert all(service.healthy for service in airflow.status(settings).values())

    assert airflow.stop(settings)
    assert airflow.status(settings)[postgres.NAME].running is False
    assert processes.port_holder(settings.airflow_database_port) is None
