"""The real Airflow of a deployment: starts healthy, requires a login, lists the DAGs, stops cleanly."""

from __future__ import annotations

import time

import psutil
import pytest
import requests

from infra import airflow, processes, services
from infra.deployment import load

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("batch_engine")]  # the DAGs run on it


def test_status_reports_every_service_healthy(airflow_service):
    status = airflow.status(airflow_service.settings)
    assert set(status) == {"airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-api-server"}
    for service in status.values():
        assert service.running and service.healthy and psutil.pid_exists(service.pid)
    assert status["airflow-api-server"].url == f"http://127.0.0.1:{airflow_service.settings.airflow_port}"


def test_api_requires_login_and_a_token_works(airflow_service):
    url = airflow_service.settings.airflow_url
    assert requests.get(f"{url}/api/v2/dags", timeout=10).status_code == 401
    wrong = airflow.AirflowClient(airflow_service.settings.with_overrides(airflow_password="wrong"))
    with pytest.raises(airflow.AirflowError, match="login as 'admin'"):
        wrong.login()
    token = airflow_service.client.login()
    response = requests.get(f"{url}/api/v2/dags", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 200


def test_batch_recompute_is_listed_paused_without_import_errors(airflow_service):
    dag = airflow_service.initial_dags["batch_recompute"]
    assert dag["is_paused"] and not dag["has_import_errors"]
    assert dag["timetable_summary"] == "0 0 * * *"
    assert airflow_service.client.import_errors() == []


def test_second_deployment_on_the_same_port_is_refused(airflow_service, tmp_path):
    other = load(tmp_path).with_overrides(airflow_port=airflow_service.settings.airflow_port)
    api_pid = processes.running_pid(airflow_service.settings, airflow.API_SERVER)
    with pytest.raises(
        processes.ServiceError, match=f"port {airflow_service.settings.airflow_port} .*busy, held by pid {api_pid}"
    ):
        airflow.start(other)


def test_start_twice_is_harmless(airflow_service):
    """Starting a running Airflow again leaves every part as it was: the same processes, as healthy."""
    before = airflow.status(airflow_service.settings)
    airflow.start(airflow_service.settings)
    assert airflow.status(airflow_service.settings) == before


def test_up_turns_every_dag_on_and_the_scheduler_runs_them_unasked(airflow_service):
    """What ``lambdalake up`` does once Airflow is healthy: every DAG on, and the scheduler starts the
    periodic ones by itself. Paused again afterwards (the next test stops Airflow, ending their runs)."""
    settings, client = airflow_service.settings, airflow_service.client
    services.stop_speed(settings, hold=True)  # the watchdog's run must not start a speed layer here
    periodic = ("late_data_recompute", "maintenance", "speed_layer_watchdog")
    try:
        client.unpause_all()
        assert [client.dag(dag_id).is_paused for dag_id in airflow.DAG_IDS] == [False] * len(airflow.DAG_IDS)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # catchup is off: each runs its latest interval at once
            scheduled = {dag_id: any(r.run_type == "scheduled" for r in client.dag_runs(dag_id)) for dag_id in periodic}
            if all(scheduled.values()):
                break
            time.sleep(2)
        assert scheduled == dict.fromkeys(periodic, True)
    finally:
        for dag_id in airflow.DAG_IDS:
            client.pause(dag_id)


def test_stop_leaves_nothing_and_start_comes_back(airflow_service):
    settings = airflow_service.settings
    pids = set()
    for service in airflow.status(settings).values():
        pids |= {service.pid, *(p.pid for p in psutil.Process(service.pid).children(recursive=True))}
    try:
        assert airflow.stop(settings)
        assert [pid for pid in pids if psutil.pid_exists(pid)] == []
        assert processes.port_holder(settings.airflow_port) is None
        assert not any(service.running for service in airflow.status(settings).values())
        assert not airflow.stop(settings)
    finally:
        airflow.start(settings)
    assert all(service.healthy for service in airflow.status(settings).values())
