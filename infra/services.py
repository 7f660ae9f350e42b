"""Bring the whole deployment up, down, and report its status: Kafka, the speed layer, the batch engine,
Airflow, and the serving layer's HTTP API."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from infra import airflow, batch_engine, kafka, processes, spark_cluster, speed_report
from infra.deployment import REPO, Deployment
from infra.speed_report import Health
from views import timebase

SPEED = "speed-layer"
SERVING = "serving-api"
HISTORY_DAYS = 3


def last_speed_health(settings: Deployment) -> Health | None:
    """The speed layer's last health report, whether or not it still runs."""
    return speed_report.read(settings.speed_health_file)


def speed_health(settings: Deployment) -> Health | None:
    """The speed layer's health report, if its process runs."""
    pid = processes.running_pid(settings, SPEED)
    report = last_speed_health(settings)
    return report if pid is not None and report and report.pid == pid else None


def start_speed(settings: Deployment, timeout: float = 180, resume_from_tables: bool = False) -> None:
    """Start the speed layer's process (no-op if it runs) and wait until its queries are active.

    ``resume_from_tables`` goes on after the offsets already landed when the landing checkpoint is lost.
    """
    _held(settings).unlink(missing_ok=True)
    if processes.running_pid(settings, SPEED) is None:
        flags = ["--resume-from-tables"] if resume_from_tables else []
        processes.start(
            settings,
            SPEED,
            [sys.executable, "-m", "speed_layer", *flags],
            env={"LAMBDALAKE_HOME": str(settings.home), "PYTHONPATH": str(REPO), **processes.FEW_ARENAS},
            cwd=REPO,
        )

    def active() -> bool:
        report = speed_health(settings)
        return report is not None and report.active

    processes.wait_until(
        active,
        timeout,
        "speed layer",
        log=processes.log_file(settings, SPEED),
        alive=lambda: processes.running_pid(settings, SPEED) is not None,
    )


def wait_for_landing(settings: Deployment, timeout: float = 300) -> int:
    """Wait until the speed layer has processed everything Kafka holds now; the record count."""
    target = kafka.end_offsets(settings, settings.topic)

    def landed() -> int | None:
        report = speed_health(settings)
        done = report.processed_offsets if report else {}
        return sum(target.values()) if all(int(done.get(str(p), 0)) >= end for p, end in target.items()) else None

    return processes.poll(
        landed,
        timeout,
        0.5,
        lambda: TimeoutError(
            f"the speed layer did not land Kafka's {sum(target.values())} records in {timeout:.0f}s; "
            f"see `lambdalake status`"
        ),
    )


def stop_speed(settings: Deployment, hold: bool = False) -> bool:
    """Stop the speed layer; ``hold`` also keeps the watchdog from restarting it until the next start."""
    if hold:
        _held(settings).touch()
    return processes.stop(settings, SPEED, timeout=60)


def _held(settings: Deployment):
    return settings.run / "speed-layer.held"


def speed_problem(settings: Deployment, now: float | None = None) -> str | None:
    """Why the speed layer needs a restart (dead, stalled or failed), or None if it is fine."""
    if processes.running_pid(settings, SPEED) is None:
        return "the speed layer is not running"
    report = speed_health(settings)
    now = time.time() if now is None else now
    stale_after = max(120, 10 * settings.trigger_seconds)
    if report is None or now - processes.parse_utc(report.updated_at) > stale_after:
        return f"the speed layer has not reported its health for over {stale_after}s"
    if report.error:
        return f"the speed layer failed: {report.error}"
    progressed, stall = report.progressed_at, report.stall_after_seconds
    if report.lag and progressed and stall is not None and now - processes.parse_utc(progressed) > stall:
        return (
            f"the speed layer is stalled: lag {report.lag} and no micro-batch finished since {progressed} "
            f"(over {stall:.0f}s)"
        )
    return None


def watch_speed(settings: Deployment) -> str:
    """Restart a dead, stalled or failed speed layer (unless held by `lambdalake speed stop`)."""
    if _held(settings).exists():
        return "held: stopped on purpose by `lambdalake speed stop`"
    problem = speed_problem(settings)
    if problem is None:
        return "healthy"
    stop_speed(settings)
    start_speed(settings)
    return f"restarted: {problem}"


def serving_healthy(settings: Deployment) -> bool:
    """Whether the HTTP API answers on its port."""
    import requests

    try:
        return requests.get(settings.serve_url + "openapi.json", timeout=2).ok
    except requests.RequestException:
        return False


def start_serving(settings: Deployment, timeout: float = 60) -> None:
    """Start the HTTP API and dashboard (`lambdalake serve`; no-op if it runs) and wait until it answers."""
    if processes.running_pid(settings, SERVING) is None:
        processes.require_free(settings.serve_port, "serving API")
        processes.start(
            settings,
            SERVING,
            [sys.executable, "-m", "lambdalake.cli", "serve"],
            env={"LAMBDALAKE_HOME": str(settings.home), "PYTHONPATH": str(REPO), **processes.FEW_ARENAS},
            cwd=REPO,
        )
    processes.wait_until(
        lambda: serving_healthy(settings),
        timeout,
        "serving API",
        log=processes.log_file(settings, SERVING),
        alive=lambda: processes.running_pid(settings, SERVING) is not None,
    )


def start_airflow(settings: Deployment) -> None:
    """Start Airflow and point its ``spark_connect`` Connection at the batch engine."""
    airflow.start(settings)
    airflow.AirflowClient(settings).set_connection(
        airflow.ENGINE_CONNECTION, "spark_connect", "127.0.0.1", settings.batch_engine_port
    )


def up(settings: Deployment, say: processes.Say = print, schedule: bool = True) -> Deployment:
    """Start everything and (``schedule``) turn every DAG on; starting twice is harmless. Returns the
    settings (with the batch start date)."""
    if settings.batch_start_date is None:
        first = datetime.now(timebase.UTC).date() - timedelta(days=HISTORY_DAYS)
        settings = settings.save(batch_start_date=first.isoformat())
    cluster = [("Spark cluster", spark_cluster.start)] if settings.spark_master == "standalone" else []
    for name, start in (
        ("Kafka", kafka.start),
        *cluster,
        ("speed layer", start_speed),
        ("batch engine", batch_engine.start),
        ("Airflow", start_airflow),
        ("serving API", start_serving),
    ):
        began = time.monotonic()
        say(f"starting {name} ...")
        start(settings)
        say(f"  {name} healthy ({time.monotonic() - began:.0f}s)")
    if schedule:
        airflow.AirflowClient(settings).unpause_all()
        say(f"  DAGs on: {', '.join(airflow.DAG_IDS)}")
    return settings


def down(settings: Deployment, purge: bool = False) -> list[str]:
    """Stop everything (the speed layer first, Kafka last); ``purge`` deletes the whole home."""
    stopped = [
        name
        for name, stop in (
            ("serving API", lambda s: processes.stop(s, SERVING)),
            ("speed layer", stop_speed),
            ("Airflow", airflow.stop),
            ("batch engine", batch_engine.stop),
            ("Spark cluster", spark_cluster.stop),
            ("Kafka", kafka.stop),
        )
        if stop(settings)
    ]
    if purge and settings.home.exists():
        shutil.rmtree(settings.home)
    return stopped


@dataclass(frozen=True)
class Speed(processes.Service):
    """The speed layer as ``status`` reports it: a service, what is wrong with it (None: nothing), its log
    and its last health report (infra.speed_report)."""

    problem: str | None = None
    log: str = ""
    health: Health | None = None


@dataclass(frozen=True)
class Spark:
    """Where Spark runs, and on a standalone cluster how many workers its master counts alive."""

    master: str
    alive_workers: int | None = None


@dataclass(frozen=True)
class Status:
    """What runs where, and whether it is healthy (``lambdalake status``)."""

    home: str
    kafka: kafka.Cluster
    speed_layer: Speed
    batch_engine: batch_engine.Engine
    airflow: dict[str, processes.Service]
    serving_api: processes.Service
    spark: Spark


def status(settings: Deployment) -> Status:
    """What runs where, and whether it is healthy."""
    problem = speed_problem(settings)
    standalone = settings.spark_master == "standalone"
    return Status(
        str(settings.home),
        kafka.status(settings),
        Speed(
            processes.running_pid(settings, SPEED),
            problem is None,
            None,
            problem,
            str(processes.log_file(settings, SPEED)),
            speed_health(settings),
        ),
        batch_engine.status(settings),
        airflow.status(settings),
        processes.Service(processes.running_pid(settings, SERVING), serving_healthy(settings), settings.serve_url),
        Spark(settings.spark_master_url, spark_cluster.alive_workers(settings) if standalone else None),
    )
