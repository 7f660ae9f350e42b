"""A Spark standalone cluster on this machine (setting ``spark_master = "standalone"``): a master and
two workers bound to 127.0.0.1, started from the pip package's own ``bin/spark-class`` and supervised
like every other service (a pid file, a log, a health check, a stop that leaves nothing behind)."""

from __future__ import annotations

import sys
from pathlib import Path

import requests

from infra import processes
from infra.deployment import Deployment

MASTER = "spark-master"
WORKERS = ("spark-worker-1", "spark-worker-2")
#: What each worker offers: two cores (the speed layer and a batch task take two each) and memory.
WORKER_CORES, WORKER_MEMORY = 2, "2g"


def spark_home() -> Path:
    """Spark's home inside the pyspark package (its bin/ and jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


def _launch(settings: Deployment, name: str, main: str, *args: str) -> None:
    env = {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(settings.home / "tmp" / "spark-workers"),
    }
    processes.start(settings, name, [str(spark_home() / "bin" / "spark-class"), main, *args], env=env)


def _state(settings: Deployment) -> dict | None:
    """The master's own report (its web UI's JSON); None if it does not answer."""
    try:
        return requests.get(f"http://127.0.0.1:{settings.spark_ui_port}/json/", timeout=2).json()
    except (requests.RequestException, ValueError):
        return None


def alive_workers(settings: Deployment) -> int | None:
    """How many workers the master counts alive; None if the master does not answer."""
    state = _state(settings)
    return None if state is None else sum(worker.get("state") == "ALIVE" for worker in state.get("workers", []))


def applications(settings: Deployment) -> list[str]:
    """The names of the applications that ran or run on the cluster."""
    state = _state(settings) or {}
    return [app["name"] for key in ("activeapps", "completedapps") for app in state.get(key, [])]


def start(settings: Deployment, timeout: float = 90) -> None:
    """Start the master and the workers (no-op for those that run) and wait until both workers are alive."""
    if processes.running_pid(settings, MASTER) is None:
        processes.require_free(settings.spark_master_port, "Spark master")
        processes.require_free(settings.spark_ui_port, "Spark master web UI")
        _launch(
            settings,
            MASTER,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(settings.spark_master_port),
            "--webui-port",
            str(settings.spark_ui_port),
        )
    processes.wait_until(
        lambda: alive_workers(settings) is not None,
        timeout,
        "Spark master",
        log=processes.log_file(settings, MASTER),
        alive=lambda: processes.running_pid(settings, MASTER) is not None,
    )
    for number, name in enumerate(WORKERS, start=1):
        if processes.running_pid(settings, name) is None:
            processes.require_free(settings.spark_ui_port + number, f"{name} web UI")
            _launch(
                settings,
                name,
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(settings.spark_ui_port + number),
                "--cores",
                str(WORKER_CORES),
                "--memory",
                WORKER_MEMORY,
                settings.spark_master_url,
            )
    processes.wait_until(
        lambda: alive_workers(settings) == len(WORKERS),
        timeout,
        "Spark workers",
        log=processes.log_file(settings, WORKERS[-1]),
    )


def stop(settings: Deployment) -> bool:
    """Stop the workers, then the master; True if something was running."""
    return any([processes.stop(settings, name) for name in (*WORKERS, MASTER)])
