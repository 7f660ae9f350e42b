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

import multiprocessing
import shutil

import psutil

from infra import processes
from infra import spark as sparks
from infra.settings import Settings

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


def command(settings: Settings) -> list[str]:
    """The server's ``spark-submit`` command line."""
    from infra.spark_cluster import spark_home

    pools = settings.run / "fairscheduler.xml"
    pools.parent.mkdir(parents=True, exist_ok=True)
    pools.write_text(POOLS)
    master = settings.spark_master_url
    conf = {**sparks.conf(settings, master), "spark.app.name": "lambdalake-batch-engine",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(settings.batch_engine_port),
            "spark.scheduler.mode": "FAIR", "spark.scheduler.allocation.file": str(pools)}
    return [str(spark_home() / "bin" / "spark-submit"), "--master", master, "--class", SERVER,
            *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")), "spark-internal"]


def healthy(settings: Settings) -> bool:
    """Whether the server accepts connections on its port."""
    return sparks.answers(settings.batch_engine_url)


def start(settings: Settings, timeout: float = 120) -> None:
    """Start the engine (no-op if it runs), wait until it accepts connections and, if it was started
    here, warm it up (:func:`warm_up`)."""
    started = processes.running_pid(settings, NAME) is None
    if started:
        processes.require_free(settings.batch_engine_port, "batch engine")
        from infra.spark_cluster import spark_home

        processes.start(settings, NAME, command(settings), env={"SPARK_HOME": str(spark_home())},
                        cwd=settings.home)
    processes.wait_until(lambda: healthy(settings), timeout, "batch engine", log=processes.log_file(settings, NAME),
                         alive=lambda: processes.running_pid(settings, NAME) is not None)
    if started:
        warm_up(settings)


def warm_up(settings: Settings) -> None:
    """Run a small job of the kinds a recompute runs on a scratch table of the engine's own, so that
    the first task after a start does not pay for loading the planner's, Delta's and Arrow's classes
    (tens of seconds on a new JVM). It reads and computes none of the deployment's data. The job runs
    in a process of its own: a Spark Connect session turns the whole process's pyspark to Connect."""
    job = multiprocessing.get_context("spawn").Process(target=_warm_up_job, args=(settings,), name="engine-warm-up")
    job.start()
    job.join()
    if job.exitcode:
        raise RuntimeError(f"the batch engine failed its warm-up job (exit code {job.exitcode}): see "
                           f"{processes.log_file(settings, NAME)}")


def _warm_up_job(settings: Settings) -> None:
    """A Delta write, a cached read, a window, sketches, an outer join, Arrow to the client and the
    table's history, on the engine."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scratch = settings.run / "engine-warm-up"
    with sparks.engine(settings) as spark:
        spark.range(5000).select("id", (F.col("id") % 7).alias("k"), (F.col("id") / 3).alias("v")).write.format(
            "delta").mode("overwrite").save(str(scratch))
        rows = spark.read.format("delta").load(str(scratch)).where(F.col("k") < 6).persist()
        first = rows.withColumn("n", F.row_number().over(Window.partitionBy("k").orderBy("id"))).where("n = 1")
        rows.groupBy("k").agg(F.count("*").alias("rows"), F.sum("v").alias("v"), F.hll_sketch_agg("id").alias("ids")) \
            .join(first, "k", "full_outer").toArrow()
        rows.unpersist()
        spark.sql(f"DESCRIBE HISTORY delta.`{scratch}`").collect()
    shutil.rmtree(scratch, ignore_errors=True)


def stop(settings: Settings) -> bool:
    """Stop the engine; True if it was running."""
    return processes.stop(settings, NAME)


def status(settings: Settings) -> dict:
    """Pid, running, healthy, its address and resident memory (MB)."""
    pid = processes.running_pid(settings, NAME)
    try:
        memory = round(psutil.Process(pid).memory_info().rss / 2**20) if pid else None
    except psutil.NoSuchProcess:
        memory = None
    return {"pid": pid, "running": pid is not None, "healthy": pid is not None and healthy(settings),
            "url": settings.batch_engine_url, "master": settings.spark_master_url, "rss_mb": memory}


def watch(settings: Settings) -> str:
    """Restart the engine if it is not running or does not answer; say what was found."""
    if processes.running_pid(settings, NAME) is not None and healthy(settings):
        return "healthy"
    stop(settings)
    start(settings)
    return "restarted: the batch engine was not running or did not answer"
