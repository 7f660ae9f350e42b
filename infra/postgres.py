"""Airflow's metadata database in PostgreSQL (the setting ``airflow_database = "postgresql"``).

A cluster of the deployment's own, from Debian's PostgreSQL (``make setup`` installs it): ``initdb``
into ``<home>/postgres/data`` on first start, then ``postgres`` as a supervised process (pid in
``<home>/run``, log in ``logs/airflow-postgres.log``) listening on 127.0.0.1:``airflow_database_port``
only, no Unix socket. It serves Airflow alone: its one role, ``airflow`` (initdb's superuser), logs in
over TCP with a password (SCRAM) generated into ``<home>/secrets/airflow-db-password`` (mode 600) and
owns the database ``airflow``. ``infra.airflow`` starts it before Airflow's services and stops it after
them, so ``lambdalake up`` (which also starts it again if it went away, and Airflow's services with it),
``down`` and ``status`` cover it; the watchdog DAG cannot, since its own scheduler needs the database.

PostgreSQL refuses to run as root. Run by root, the cluster belongs to the ``postgres`` system user that
Debian's package creates: ``<home>/postgres`` is handed to it, and initdb, postgres and pg_ctl run as it
(the home must then be reachable by that user: not inside a folder only root may enter). Run by anyone
else, the cluster is that user's.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from infra import credentials, private_files, processes
from infra.deployment import Deployment

if TYPE_CHECKING:
    import psycopg

NAME = "airflow-postgres"
#: Airflow's role and database in the cluster.
ROLE = DATABASE = "airflow"
#: Where Debian's packages install each major version's programs (``<major>/bin/initdb``, ...).
DEBIAN_PROGRAMS = Path("/usr/lib/postgresql")


def _folder(settings: Deployment) -> Path:
    return settings.home / "postgres"


def data(settings: Deployment) -> Path:
    """The cluster's data directory."""
    return _folder(settings) / "data"


def _password(settings: Deployment) -> str:
    return credentials.kept(settings, "airflow-db-password")


def url(settings: Deployment) -> str:
    """Airflow's SQLAlchemy URL of the database (psycopg 3, which serves its sync and async engines alike)."""
    return f"postgresql+psycopg://{ROLE}:{_password(settings)}@127.0.0.1:{settings.airflow_database_port}/{DATABASE}"


def _program(settings: Deployment, name: str) -> str:
    """``name`` of the PostgreSQL that made the cluster (a newer major version cannot read its files), or
    of the newest that Debian's packages installed for a cluster still to make."""
    made = data(settings) / "PG_VERSION"
    major = made.read_text().strip() if made.exists() else None
    found = sorted(
        (p for p in DEBIAN_PROGRAMS.glob(f"*/bin/{name}") if p.parts[-3].isdigit() and major in (None, p.parts[-3])),
        key=lambda p: int(p.parts[-3]),
    )
    if not found:
        wanted = f"postgresql-{major}, which made {data(settings)}" if major else "postgresql (`make setup` does)"
        raise processes.ServiceError(
            f"PostgreSQL's {name} is not in {DEBIAN_PROGRAMS}/{major or '<version>'}/bin: "
            f'install Debian\'s {wanted}, or set airflow_database to "sqlite"'
        )
    return str(found[-1])


def _owner() -> dict:
    """Arguments of :class:`subprocess.Popen` that run a program as the cluster's owner: the ``postgres``
    system user when run by root, else the current user (none)."""
    if os.geteuid() != 0:
        return {}
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise processes.ServiceError(
            "PostgreSQL refuses to run as root, and there is no `postgres` user to run "
            "it as: install Debian's postgresql (`make setup` does)"
        ) from None
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _run(settings: Deployment, owner: dict, program: str, *args: str) -> None:
    """Run a PostgreSQL program as the cluster's owner, its output in the cluster's log."""
    log = processes.log_file(settings, NAME)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        done = subprocess.run(
            [_program(settings, program), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=_folder(settings),
            **owner,
        )
    if done.returncode:
        raise processes.ServiceError(f"PostgreSQL's {program} failed (exit {done.returncode}){processes.log_tail(log)}")


def _initdb(settings: Deployment, owner: dict) -> None:
    """Make the cluster, its superuser ``airflow`` logging in with the deployment's password."""
    folder = _folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    if owner:
        os.chown(folder, owner["user"], owner["group"])
        if subprocess.run(["test", "-x", str(folder)], **owner).returncode:
            raise processes.ServiceError(
                f"PostgreSQL refuses to run as root, and the postgres user it runs as "
                f"cannot reach {folder}: let it through the folders above (chmod o+x), "
                f"or choose a home it can reach"
            )
    secret = folder / "initdb-password"
    private_files.write_private(secret, _password(settings))
    if owner:
        os.chown(secret, owner["user"], owner["group"])
    try:
        _run(
            settings,
            owner,
            "initdb",
            "-D",
            str(data(settings)),
            f"--username={ROLE}",
            f"--pwfile={secret}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
        )
    finally:
        secret.unlink(missing_ok=True)


def _connect(settings: Deployment, database: str) -> psycopg.Connection:
    import psycopg  # (140 ms: not for every command that imports the services, e.g. `lambdalake query`)

    return psycopg.connect(
        host="127.0.0.1",
        port=settings.airflow_database_port,
        user=ROLE,
        password=_password(settings),
        dbname=database,
        connect_timeout=3,
        autocommit=True,
    )


def healthy(settings: Deployment, database: str = DATABASE) -> bool:
    """Whether ``database`` takes Airflow's login."""
    from psycopg import OperationalError

    try:
        with _connect(settings, database):
            return True
    except OperationalError:
        return False


def start(settings: Deployment, timeout: float = 60) -> None:
    """Start the cluster (made on first start; no-op if it runs) and wait until Airflow's database takes
    logins (made if missing)."""
    if processes.running_pid(settings, NAME) is None:
        processes.require_free(settings.airflow_database_port, "Airflow's PostgreSQL")
        owner = _owner()
        if not (data(settings) / "PG_VERSION").exists():
            _initdb(settings, owner)
        processes.start(
            settings,
            NAME,
            [
                _program(settings, "postgres"),
                "-D",
                str(data(settings)),
                "-p",
                str(settings.airflow_database_port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ],
            cwd=_folder(settings),
            **owner,
        )
    processes.wait_until(
        lambda: healthy(settings, "postgres"),
        timeout,
        "Airflow's PostgreSQL",
        log=processes.log_file(settings, NAME),
        alive=lambda: processes.running_pid(settings, NAME) is not None,
    )
    with _connect(settings, "postgres") as cluster:
        if cluster.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            cluster.execute(f"CREATE DATABASE {DATABASE}")


def stop(settings: Deployment) -> bool:
    """Stop the cluster with a fast shutdown (sessions ended, a checkpoint written); True if it was running."""
    if processes.running_pid(settings, NAME) is None:
        return False
    try:
        _run(settings, _owner(), "pg_ctl", "stop", "-D", str(data(settings)), "--mode=fast", "--wait", "--timeout=30")
    finally:
        processes.stop(settings, NAME)  # whatever a failed shutdown left, and the pid file
    return True


def status(settings: Deployment) -> processes.Service:
    """Its process, health and address (without the password)."""
    pid = processes.running_pid(settings, NAME)
    return processes.Service(
        pid,
        pid is not None and healthy(settings),
        f"postgresql://{ROLE}@127.0.0.1:{settings.airflow_database_port}/{DATABASE}",
    )
