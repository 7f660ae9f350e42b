"""A real Airflow 3 for a deployment: scheduler, dag-processor, triggerer and API server as separate
services.

Like ``airflow standalone``: LocalExecutor (its task processes forked with the batch tasks' libraries
imported, ``infra.task_executor``) on SQLite (or, as the setting ``airflow_database`` chooses, a
PostgreSQL of the deployment's own, ``infra.postgres``) and SimpleAuthManager, here with one admin user
whose password comes from the settings, everything under ``<home>/airflow``, bound to 127.0.0.1. The DAGs
folder is ``dags/`` of this checkout; tasks import the layers (``PYTHONPATH``) and write to the same
deployment (``LAMBDALAKE_HOME``). :class:`AirflowClient` drives it through the REST API v2.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import requests
import tenacity

from infra import credentials, postgres, private_files, processes
from infra.deployment import REPO, Deployment

SCHEDULER = "airflow-scheduler"
DAG_PROCESSOR = "airflow-dag-processor"
TRIGGERER = "airflow-triggerer"
API_SERVER = "airflow-api-server"
#: In stop order: the scheduler first (no new tasks), the API server last (running tasks report to it).
#: Every component whose health the UI shows runs (no lambdalake task defers to the triggerer, but a
#: deployment's own deferrable sensors would).
SERVICES = (SCHEDULER, DAG_PROCESSOR, TRIGGERER, API_SERVER)
#: The Airflow Connection (of type ``spark_connect``, as Airflow's Spark provider names it) that holds
#: the batch engine's address (infra.batch_engine); ``lambdalake up`` writes it from the settings.
ENGINE_CONNECTION = "spark_connect_default"
#: How many runs of a batch DAG (a backfill's days) are in flight at once, sharing the batch engine.
BATCH_RUNS_IN_FLIGHT = 4

#: The entry of /api/v2/monitor/health that says each service is up.
_HEALTH_KEY = {
    SCHEDULER: "scheduler",
    DAG_PROCESSOR: "dag_processor",
    TRIGGERER: "triggerer",
    API_SERVER: "metadatabase",
}
_HEARTBEAT_KEY = {
    SCHEDULER: "latest_scheduler_heartbeat",
    DAG_PROCESSOR: "latest_dag_processor_heartbeat",
    TRIGGERER: "latest_triggerer_heartbeat",
}


class AirflowError(RuntimeError):
    """A DAG, run or API call went wrong; the message says which and where to look."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        #: The HTTP status of a failed API call.
        self.status = status


def airflow_home(settings: Deployment) -> Path:
    return settings.home / "airflow"


#: The DAGs in dags/: all on once the platform is up (``lambdalake up``; ``reprocess`` runs only when triggered).
DAG_IDS = ("batch_recompute", "late_data_recompute", "maintenance", "reprocess", "speed_layer_watchdog")


def task_logs(settings: Deployment) -> Path:
    """Where task attempts log: ``dag_id=<dag>/run_id=<run>/task_id=<task>/attempt=<n>.log``."""
    return settings.logs / "airflow-tasks"


def parsing_logs(settings: Deployment) -> Path:
    """Where the DAG processor logs the parsing of each DAG file."""
    return settings.logs / "airflow-dag-parsing"


def _secrets(settings: Deployment) -> dict[str, str]:
    """The Fernet key, JWT secret and API secret key, generated once into the home so all processes agree."""
    path = airflow_home(settings) / "secrets.json"
    if not path.exists():
        from cryptography.fernet import Fernet

        private_files.write_private(
            path,
            json.dumps(
                {
                    "fernet_key": Fernet.generate_key().decode(),
                    "jwt_secret": secrets.token_urlsafe(32),
                    "secret_key": secrets.token_urlsafe(32),
                }
            ),
        )
    return json.loads(path.read_text())


def env(settings: Deployment) -> dict[str, str]:
    """Environment for every Airflow process (and ``airflow`` CLI call) of this deployment."""
    home = airflow_home(settings)
    keys = _secrets(settings)
    return {
        "AIRFLOW_HOME": str(home),
        "LAMBDALAKE_HOME": str(settings.home),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "infra.task_executor.PreloadedLocalExecutor",
        **_database(settings),
        # a backfill's runs in flight, beside maintenance and the watchdog: tasks are thin clients of the
        # batch engine, not JVMs of their own
        "AIRFLOW__CORE__PARALLELISM": str(BATCH_RUNS_IN_FLIGHT + 2),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(BATCH_RUNS_IN_FLIGHT),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__FERNET_KEY": keys["fernet_key"],
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{settings.airflow_user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        # Tasks report to the Execution API of this deployment's API server (default: localhost:8080).
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{settings.airflow_url}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(settings.airflow_port),
        "AIRFLOW__API__BASE_URL": settings.airflow_url,
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": keys["secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
        # The tasks a dead scheduler ran (killed with what it left, infra.processes) are rerun by the next
        # one once it sees the dead one's heartbeat over 30 s old: it looks as it starts, then every
        # 15 s (Airflow's default: 5 minutes, which a restart within 30 s of the death would wait).
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
        # Assets no DAG refers to any more are retired, and the ones that replace them activated, every
        # 15 s (Airflow's default: 60 s, in which a task writing a replacing Asset fails; infra.dags.table)
        "AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL": "15",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # Airflow's default: each parse of a DAG file, in a new process, every 10 s kept a third of a core
        # busy on an idle deployment (the layers' imports, since made once: infra.dag_processor). The DAGs'
        # Assets name the tables where the settings put them: a change of ``storage`` shows in them (and
        # their tasks run) after a parse.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH": str(home / "dag_bundles"),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(task_logs(settings)),
        "AIRFLOW__LOGGING__DAG_PROCESSOR_CHILD_PROCESS_LOG_DIRECTORY": str(parsing_logs(settings)),
        "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
    }


def _database(settings: Deployment) -> dict[str, str]:
    """Where Airflow keeps its metadata: SQLite in its home, or the deployment's PostgreSQL."""
    if settings.airflow_database == "postgresql":
        # the same psycopg URL for Airflow's async engine, which would otherwise want asyncpg
        return {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url(settings),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": postgres.url(settings),
        }
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home(settings) / 'airflow.db'}"}


def _airflow(*args: str) -> list[str]:
    return [sys.executable, "-m", "airflow", *args]


_COMMANDS = {
    # The API server reads task logs from the shared folder: the scheduler serves none (no port 8793).
    SCHEDULER: _airflow("scheduler", "--skip-serve-logs"),
    # it imports what the DAG files import once, not at every parse: an idle Airflow took 0.08 core, not
    # 0.15 (infra.dag_processor)
    DAG_PROCESSOR: [sys.executable, "-m", "infra.dag_processor"],
    TRIGGERER: _airflow("triggerer", "--skip-serve-logs"),
    API_SERVER: _airflow("api-server"),
}


def _prepare(settings: Deployment) -> None:
    """Write the admin's login, start the metadata database if it is PostgreSQL, and migrate it (once per
    Airflow version and database)."""
    home = airflow_home(settings)
    private_files.write_private(
        home / "passwords.json", json.dumps({settings.airflow_user: credentials.airflow_password(settings)})
    )
    if settings.airflow_database == "postgresql":
        postgres.start(settings)
        database = postgres.data(settings)
    else:
        database = home / "airflow.db"
    marker = database.with_name(f"{database.name}.migrated")  # beside the database, trusted while it exists
    wanted = version("apache-airflow-core")
    if database.exists() and marker.exists() and marker.read_text().strip() == wanted:
        return
    settings.logs.mkdir(parents=True, exist_ok=True)
    log = processes.log_file(settings, "airflow-db-migrate")
    with open(log, "ab") as out:
        done = subprocess.run(
            _airflow("db", "migrate"),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env(settings)},
            cwd=home,
        )
    if done.returncode:
        raise processes.ServiceError(f"`airflow db migrate` failed (exit {done.returncode}){processes.log_tail(log)}")
    marker.write_text(wanted + "\n")


def health(settings: Deployment) -> dict | None:
    """The API server's /api/v2/monitor/health (no login needed), or None if it does not answer."""
    try:
        response = requests.get(f"{settings.airflow_url}/api/v2/monitor/health", timeout=3)
        return response.json() if response.ok else None
    except (requests.RequestException, ValueError):
        return None


def _healthy(settings: Deployment, name: str, since: datetime | None = None) -> bool:
    """True if ``name`` reports healthy (and, given ``since``, has heartbeaten since then)."""
    report = (health(settings) or {}).get(_HEALTH_KEY[name]) or {}
    if report.get("status") != "healthy":
        return False
    beat = report.get(_HEARTBEAT_KEY.get(name, ""))
    return since is None or name == API_SERVER or (beat is not None and datetime.fromisoformat(beat) >= since)


def _running(settings: Deployment, name: str) -> bool:
    return processes.running_pid(settings, name) is not None


def start(settings: Deployment, timeout: float = 120) -> None:
    """Start the services that do not run (no-op if all run and are healthy) and wait until all are healthy."""
    if all(_running(settings, n) and _healthy(settings, n) for n in SERVICES):
        return
    if settings.airflow_database == "postgresql" and not _running(settings, postgres.NAME):
        stop(settings)  # services that lost their database (dying now, or stuck) start again with it
    if not _running(settings, API_SERVER):
        processes.require_free(settings.airflow_port, "Airflow API server")
    _prepare(settings)
    since = datetime.now(UTC)
    deadline = time.monotonic() + timeout
    try:
        # The scheduler starts once the dag-processor has parsed the DAGs: each activates the DAGs' Assets
        # when it first sees them, and on a new deployment their two inserts could race, which the
        # scheduler did not survive (sqlite3.IntegrityError on asset_active, a scheduler a minute old).
        _launch(settings, [n for n in SERVICES if n != SCHEDULER], since, deadline)
        client = AirflowClient(settings)
        processes.wait_until(
            lambda: _parsed(client),
            max(deadline - time.monotonic(), 1),
            "Airflow's DAG parsing",
            log=processes.log_file(settings, DAG_PROCESSOR),
            alive=lambda: _running(settings, DAG_PROCESSOR),
        )
        _launch(settings, [SCHEDULER], since, deadline)
        # the API server builds its Execution API, which each task calls first, on its first request
        # (2 s here): made now, not by the first task after a start
        requests.get(f"{settings.airflow_url}/execution/health", timeout=60).raise_for_status()
    except (processes.ServiceError, requests.RequestException):
        stop(settings)
        raise


def _launch(settings: Deployment, names: list[str], since: datetime, deadline: float) -> None:
    """Start the services ``names`` that do not run and wait until each is healthy."""
    for name in names:
        if not _running(settings, name):
            processes.start(settings, name, _COMMANDS[name], env=env(settings), cwd=airflow_home(settings))
    for name in reversed(names):
        processes.wait_until(
            partial(_healthy, settings, name, since),
            max(deadline - time.monotonic(), 1),
            f"Airflow {name.removeprefix('airflow-')}",
            log=processes.log_file(settings, name),
            alive=partial(_running, settings, name),
        )


def _parsed(client: AirflowClient) -> bool:
    """Whether the dag-processor has parsed every lambdalake DAG (listed, or an import error of its file);
    False while the API cannot say (SQLite busy)."""
    try:
        listed = {dag["dag_id"] for dag in client.request("GET", "/dags", params={"limit": 100})["dags"]}
        broken = {Path(error.filename).stem for error in client.import_errors()}
    except (AirflowError, requests.RequestException):
        return False
    return all(dag in listed or dag in broken for dag in DAG_IDS)


def stop(settings: Deployment) -> bool:
    """Stop every Airflow service of the deployment, then its PostgreSQL if it has one; True if any was
    running."""
    return any([*(processes.stop(settings, name) for name in SERVICES), postgres.stop(settings)])


def status(settings: Deployment) -> dict[str, processes.Service]:
    """Per service: its process, health and the URL it serves (the UI and API, for the API server; the
    database, for its PostgreSQL if it has one)."""
    report = health(settings) or {}
    result = {}
    for name in SERVICES:
        pid = processes.running_pid(settings, name)
        healthy = pid is not None and (report.get(_HEALTH_KEY[name]) or {}).get("status") == "healthy"
        result[name] = processes.Service(pid, healthy, settings.airflow_url if name == API_SERVER else None)
    if settings.airflow_database == "postgresql":
        result[postgres.NAME] = postgres.status(settings)
    return result


def _moment(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None


@dataclass(frozen=True)
class Dag:
    """A DAG as the dag-processor parsed it."""

    dag_id: str
    is_paused: bool
    fileloc: str
    has_import_errors: bool

    @classmethod
    def of(cls, dag: dict) -> Dag:
        return cls(dag["dag_id"], dag["is_paused"], dag["fileloc"], dag["has_import_errors"])


@dataclass(frozen=True)
class DagRun:
    """A run of a DAG: ``run_type`` is scheduled, manual, backfill or asset_triggered; ``state`` queued,
    running, success or failed."""

    run_id: str
    run_type: str
    state: str
    logical_date: datetime | None
    end_date: datetime | None

    @classmethod
    def of(cls, run: dict) -> DagRun:
        return cls(
            run["dag_run_id"], run["run_type"], run["state"], _moment(run["logical_date"]), _moment(run["end_date"])
        )


@dataclass(frozen=True)
class TaskRun:
    """A task instance of a run, at its latest attempt (``map_index`` -1 if the task is not mapped)."""

    task_id: str
    state: str | None
    map_index: int
    try_number: int
    start_date: datetime | None
    end_date: datetime | None

    @classmethod
    def of(cls, task: dict) -> TaskRun:
        return cls(
            task["task_id"],
            task["state"],
            task["map_index"],
            task["try_number"],
            _moment(task["start_date"]),
            _moment(task["end_date"]),
        )


@dataclass(frozen=True)
class ParseError:
    """A DAG file the dag-processor could not import, and why."""

    filename: str
    stack_trace: str


#: The HTTP methods whose call is the same made twice.
IDEMPOTENT = frozenset({"GET", "PUT", "PATCH", "DELETE"})


def _lost_the_lock(method: str, error: BaseException) -> bool:
    """Whether ``error`` is Airflow on SQLite telling that a call lost the database's lock to another
    writer, so that making it again is safe: refused before it wrote anything (HTTP 503, "Database is
    locked", as a backfill's creation is), or an idempotent call that failed with it (HTTP 500, "Database
    error": two writers in the API server, a pause and a task's start, can hold each other up until
    SQLite's 5 s timeout fails one)."""
    return isinstance(error, AirflowError) and (
        error.status == 503 or (error.status == 500 and method in IDEMPOTENT and "Database error" in str(error))
    )


class AirflowClient:
    """The REST API v2 of a deployment's Airflow, logged in as the settings' admin user (JWT bearer)."""

    def __init__(self, settings: Deployment):
        self.settings = settings
        self.url = settings.airflow_url
        self._http = requests.Session()
        self._token: str | None = None

    def login(self) -> str:
        """A fresh JWT from POST /auth/token."""
        response = self._http.post(
            f"{self.url}/auth/token",
            timeout=30,
            json={"username": self.settings.airflow_user, "password": credentials.airflow_password(self.settings)},
        )
        if response.status_code != 201:
            raise AirflowError(
                f"login as {self.settings.airflow_user!r} at {self.url} failed "
                f"(HTTP {response.status_code}: {response.text[:200]}); is Airflow up, and does its "
                f"password match {credentials.airflow_password_location(self.settings)}?"
            )
        self._token = response.json()["access_token"]
        return self._token

    def request(self, method: str, path: str, **kwargs: Any) -> dict:
        """Call ``/api/v2<path>`` and return its JSON; log in again once if the token expired. A call that
        lost SQLite's lock to another writer (:func:`_lost_the_lock`) is made again, a few times, a
        second or two apart."""
        again = tenacity.Retrying(
            retry=tenacity.retry_if_exception(partial(_lost_the_lock, method)),
            stop=tenacity.stop_after_attempt(5),
            wait=tenacity.wait_random(1, 3),
            reraise=True,
        )
        return again(self._request, method, path, **kwargs)

    def _request(self, method: str, path: str, **kwargs) -> dict:
        for attempt in (1, 2):
            token = self._token or self.login()
            response = self._http.request(
                method, f"{self.url}/api/v2{path}", timeout=30, headers={"Authorization": f"Bearer {token}"}, **kwargs
            )
            if response.status_code != 401 or attempt == 2:
                break
            self._token = None
        if not response.ok:
            raise AirflowError(
                f"{method} /api/v2{path} failed: HTTP {response.status_code}: {response.text[:500]}",
                status=response.status_code,
            )
        return response.json() if response.content else {}

    def set_connection(self, conn_id: str, conn_type: str, host: str, port: int) -> None:
        """Create or replace the Connection ``conn_id``."""
        connection = {"connection_id": conn_id, "conn_type": conn_type, "host": host, "port": port}
        try:
            self.request("POST", "/connections", json=connection)
        except AirflowError as error:
            if error.status != 409:
                raise
            self.request("PATCH", f"/connections/{conn_id}", json=connection)

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def unpause_all(self) -> None:
        """Turn every lambdalake DAG on, once the dag-processor has parsed it."""
        for dag_id in DAG_IDS:
            self.wait_for_dag(dag_id)
            self.unpause(dag_id)

    def trigger(self, dag_id: str, logical_date: datetime, conf: dict | None = None) -> str:
        """Trigger a manual run; return its run id.

        Airflow infers a manual run's data interval as the last complete period before ``logical_date``:
        for the daily batch_recompute, ``logical_date`` = midnight D recomputes day D-1.
        """
        run = self.request(
            "POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": _iso(logical_date), "conf": conf or {}}
        )
        return DagRun.of(run).run_id

    def create_backfill(
        self,
        dag_id: str,
        from_date: datetime,
        to_date: datetime,
        max_active_runs: int = BATCH_RUNS_IN_FLIGHT,
        reprocess_behavior: str = "none",
    ) -> int:
        """Backfill the runs whose logical date is in [from_date, to_date] (for a daily data-interval
        timetable: the days starting then) and whose interval has ended; the DAG must be unpaused to run.
        Several runs are in flight at once, sharing the batch engine (the DAG's own max_active_runs caps them).
        ``reprocess_behavior`` "completed" reruns days that already ran ("none": only missing days).
        Returns the backfill's id."""
        return self.request(
            "POST",
            "/backfills",
            json={
                "dag_id": dag_id,
                "from_date": _iso(from_date),
                "to_date": _iso(to_date),
                "max_active_runs": max_active_runs,
                "reprocess_behavior": reprocess_behavior,
            },
        )["id"]

    def dag(self, dag_id: str) -> Dag | None:
        """``dag_id`` as the dag-processor last parsed it (None if it has not)."""
        try:
            return Dag.of(self.request("GET", f"/dags/{dag_id}"))
        except AirflowError as error:
            if error.status != 404:
                raise
            return None

    def dag_runs(self, dag_id: str) -> list[DagRun]:
        """All runs of ``dag_id``, oldest first."""
        runs: list[DagRun] = []
        while True:
            page = self.request(
                "GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after", "limit": 100, "offset": len(runs)}
            )
            runs += map(DagRun.of, page["dag_runs"])
            if not page["dag_runs"] or len(runs) >= page["total_entries"]:
                return runs

    def task_runs(self, dag_id: str, run_id: str) -> list[TaskRun]:
        """The task instances of run ``run_id`` of ``dag_id``."""
        return [
            TaskRun.of(task)
            for task in self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        ]

    def wait_for_runs(self, dag_id: str, runs: int | Iterable[str], timeout: float = 600) -> dict[str, str]:
        """Wait until the given run ids (or, given a count, at least that many runs) have all finished.

        Returns ``{run_id: state}``; raises :class:`AirflowError` naming the failed task and its log.
        """
        wanted = None if isinstance(runs, int) else set(runs)

        def states() -> dict[str, str]:
            return {r.run_id: r.state for r in self.dag_runs(dag_id) if wanted is None or r.run_id in wanted}

        def finished() -> dict[str, str] | None:
            now = states()
            failed = [run_id for run_id, state in now.items() if state == "failed"]
            if failed:
                raise AirflowError(self._failure(dag_id, failed[0]))
            enough = len(now) >= runs if isinstance(runs, int) else set(now) == wanted
            return now if enough and all(state == "success" for state in now.values()) else None

        return processes.poll(
            finished,
            timeout,
            2,
            lambda: AirflowError(
                f"{dag_id}: runs not finished after {timeout:.0f}s: {states() or 'no runs'} "
                f"(is the DAG unpaused and the scheduler healthy? see {self.url})"
            ),
        )

    def _failure(self, dag_id: str, run_id: str) -> str:
        """Which task of a failed run failed, with its exception (or its log's last lines) and log file."""
        tasks = self.task_runs(dag_id, run_id)
        failed = [t for t in tasks if t.state == "failed"]
        if not failed:
            return f"{dag_id} run {run_id} failed (no task failed: {[(t.task_id, t.state) for t in tasks]})"
        task = failed[0]
        mapped = f"map_index={task.map_index}/" if task.map_index >= 0 else ""
        log = (
            task_logs(self.settings)
            / f"dag_id={dag_id}"
            / f"run_id={run_id}"
            / f"task_id={task.task_id}"
            / f"{mapped}attempt={task.try_number}.log"
        )
        where = f"{dag_id} run {run_id} failed in task {task.task_id} (attempt {task.try_number})"
        errors = _errors(log)
        return f"{where}: {errors}; log: {log}" if errors else f"{where}; log: {log}{processes.log_tail(log)}"

    def import_errors(self) -> list[ParseError]:
        return [
            ParseError(e["filename"], e["stack_trace"])
            for e in self.request("GET", "/importErrors", params={"limit": 100})["import_errors"]
        ]

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> Dag:
        """Wait until the dag-processor has parsed ``dag_id`` without import errors; return the DAG."""

        def parsed() -> Dag | None:
            dag = self.dag(dag_id)
            errors = [
                e
                for e in self.import_errors()
                if Path(e.filename).name == Path(dag.fileloc if dag else f"{dag_id}.py").name
            ]
            if errors:
                raise AirflowError(f"DAG {dag_id} has import errors in {errors[0].filename}:\n{errors[0].stack_trace}")
            return dag if dag is not None and not dag.has_import_errors else None

        def not_parsed() -> AirflowError:
            others = "; ".join(f"{e.filename}: {e.stack_trace.strip().splitlines()[-1]}" for e in self.import_errors())
            return AirflowError(
                f"DAG {dag_id} not parsed after {timeout:.0f}s from {REPO / 'dags'}"
                f" (import errors: {others or 'none'}; see "
                f"{processes.log_file(self.settings, DAG_PROCESSOR)})"
            )

        return processes.poll(parsed, timeout, 1, not_parsed)


def _errors(log: Path) -> str | None:
    """The exceptions a task's JSON-lines log reports, as ``Type: message`` (None if it reports none)."""
    found = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else ():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        found += [f"{e['exc_type']}: {e['exc_value']}" for e in record.get("error_detail") or ()]
    return "; ".join(found) or None


def _iso(moment: datetime) -> str:
    """ISO 8601 with an offset, as the API wants (naive datetimes are taken as UTC)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()
