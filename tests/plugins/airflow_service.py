"""pytest plugin: one real Airflow 3 (scheduler, dag-processor, API server) for the whole test session.

It serves the session's ``deployment`` (tests/conftest.py), whose ports differ from a demo's;
:func:`running` brings up another deployment's Airflow the same way (tests/integration/test_airflow_postgres.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from infra import airflow, services
from infra.deployment import Deployment


@dataclass
class AirflowService:
    settings: Deployment
    client: airflow.AirflowClient
    #: GET /api/v2/dags/<id> of every DAG as first parsed, before any test changed it.
    initial_dags: dict[str, dict]


@contextmanager
def running(settings: Deployment) -> Iterator[AirflowService]:
    """``settings``' Airflow running, DAGs parsed, its Connection to the batch engine made; stopped, with
    nothing left, on exit."""
    services.start_airflow(settings)
    try:
        client = airflow.AirflowClient(settings)
        client.wait_for_dag("batch_recompute")
        dags = client.request("GET", "/dags", params={"limit": 100})["dags"]
        yield AirflowService(settings, client, {dag["dag_id"]: dag for dag in dags})
    finally:
        airflow.stop(settings)


@pytest.fixture(scope="session")
def airflow_service(engine_home: Deployment, engine_lane_services) -> Iterator[AirflowService]:
    """The test deployment's running Airflow (:func:`running`) from the first test that asks for it until the
    engine's lane ends (tests/conftest.py); a test whose DAG runs use the batch engine asks for
    ``batch_engine`` too."""
    with running(engine_home) as service:
        engine_lane_services.append(lambda: airflow.stop(engine_home))
        yield service
