"""The batch engine: one long-lived Spark Connect server per deployment that Airflow's batch and
maintenance tasks send their work to (``infra.spark.engine``), so that no task starts a JVM of its own.

It is Spark's own server (``SparkConnectServer``, shipped in pyspark's jars), started with
``spark-submit`` and the same configuration as every lambdalake session (``infra.spark.conf``), bound
to 127.0.0.1, on the deployment's ``spark_master`` (``standalone``: its jobs run on the cluster).
Concurrent clients (a backfill's runs in flight, maintenance beside them) share its cores through
Spark's FAIR scheduler. ``lambdalake up`` starts it, ``down`` stops it, ``status`` and ``/health``
report it, and the watchdog DAG restarts it if it died.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import psutil

from infra import processes
from infra import spark as sparks
from infra.deployment import REPO, Deployment

NAME = "batch-engine"
SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Jobs of concurrent clients share the cores in turn (FAIR), not first come first served (FIFO).
#: Spark Connect 4.1 has no way for a client to pick a pool (SPARK-48040 was not merged), so the
#: default pool itself is fair.
POOLS = """<?xml version="1.0"?>
<allocations>
  <pool name="default"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


def command(settings: Deployment) -> list[str]:
    """The server's ``spark-submit`` command line."""
    from infra.spark_cluster import spark_home

    pools = settings.run / "fairscheduler.xml"
    pools.parent.mkdir(parents=True, exist_ok=True)
    pools.write_text(POOLS)
    master = settings.spark_master_url
    conf = {
        **sparks.conf(settings, master, engine=True),
        "spark.app.name": "lambdalake-batch-engine",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(settings.batch_engine_port),
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(pools),
    }
    public, submit = sparks.launch(settings, conf, NAME)
    return [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        master,
        "--class",
        SERVER,
        *submit,
        *(arg for key, value in public.items() for arg in ("--conf", f"{key}={value}")),
        "spark-internal",
    ]


def healthy(settings: Deployment) -> bool:
    """Whether the server accepts connections on its port."""
    return sparks.answers(settings.batch_engine_url)


def start(settings: Deployment, timeout: float = 120) -> None:
    """Start the engine (no-op if it runs), wait until it accepts connections and, if it was started
    here, warm it up (:func:`warm_up`, unless the setting ``batch_engine_warm_up`` is off)."""
    started = processes.running_pid(settings, NAME) is None
    if started:
        processes.require_free(settings.batch_engine_port, "batch engine")
        from infra.spark_cluster import spark_home

        processes.start(
            settings,
            NAME,
            command(settings),
            env={"SPARK_HOME": str(spark_home()), **processes.FEW_ARENAS},
            cwd=settings.home,
        )
    processes.wait_until(
        lambda: healthy(settings),
        timeout,
        "batch engine",
        log=processes.log_file(settings, NAME),
        alive=lambda: processes.running_pid(settings, NAME) is not None,
    )
    if started and _warms_up(settings):
        warm_up(settings)


def _warms_up(settings: Deployment) -> bool:
    """Whether a start warms the engine up: the setting ``batch_engine_warm_up``, for a domain whose
    generator can make the rehearsed day."""
    from views import has_generator

    return settings.batch_engine_warm_up and has_generator(settings.domain)


def warm_up(settings: Deployment) -> None:
    """Rehearse a nightly run on the engine (``lambdalake.rehearsal``), so that the first task after a
    start finds the planner's, the code generator's, Delta's, Arrow's and the quality checks' paths
    compiled (a demo day's first recompute on a new engine took 8.9 s without it, 6.7 s with it; 4.1 s
    warm). It reads and writes none of the deployment's data. The job runs in a process of its own (a
    Spark Connect session turns the whole process's pyspark to Connect), its output in the engine's log."""
    log = processes.log_file(settings, NAME)
    with log.open("a") as output:
        job = subprocess.run(
            [sys.executable, "-m", "lambdalake.rehearsal"],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LAMBDALAKE_HOME": str(settings.home), "PYTHONPATH": str(REPO)},
            check=False,
        )
    if job.returncode:
        raise RuntimeError(f"the batch engine failed its warm-up job (exit code {job.returncode}): see {log}")


def stop(settings: Deployment) -> bool:
    """Stop the engine; True if it was running."""
    return processes.stop(settings, NAME)


@dataclass(frozen=True)
class Engine(processes.Service):
    """The engine as ``status`` reports it: a service, the Spark master it runs on, and its resident
    memory (MB; None when it does not run)."""

    master: str = ""
    rss_mb: int | None = None


def status(settings: Deployment) -> Engine:
    """Its process, health, address, master and resident memory."""
    pid = processes.running_pid(settings, NAME)
    try:
        memory = round(psutil.Process(pid).memory_info().rss / 2**20) if pid else None
    except psutil.NoSuchProcess:
        memory = None
    return Engine(
        pid, pid is not None and healthy(settings), settings.batch_engine_url, settings.spark_master_url, memory
    )


def watch(settings: Deployment) -> str:
    """Restart the engine if it is not running or does not answer; say what was found."""
    if processes.running_pid(settings, NAME) is not None and healthy(settings):
        return "healthy"
    stop(settings)
    start(settings)
    warmed = "; warmed up with a rehearsed day" if _warms_up(settings) else ""
    return f"restarted: the batch engine was not running or did not answer{warmed}"
