"""pytest plugin: one real Airflow 3 (scheduler, dag-processor, API server) for the whole test session.

It serves the session's ``deployment`` (tests/conftest.py), whose ports differ from a demo's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from infra import airflow, services
from infra.settings import Settings


@dataclass
class AirflowService:
    settings: Settings
    client: airflow.AirflowClient
    #: GET /api/v2/dags/<id> of every DAG as first parsed, before any test changed it.
    initial_dags: dict[str, dict]


@pytest.fixture(scope="session")
def airflow_service(batch_engine: Settings) -> AirflowService:
    """The test deployment's running Airflow, DAGs parsed, its Connection to the batch engine made;
    stopped, with nothing left, at the session's end."""
    settings = batch_engine
    services.start_airflow(settings)
    try:
        client = airflow.AirflowClient(settings)
        client.wait_for_dag("batch_recompute")
        dags = client.request("GET", "/dags", params={"limit": 100})["dags"]
        yield AirflowService(settings, client, {dag["dag_id"]: dag for dag in dags})
    finally:
        airflow.stop(settings)
