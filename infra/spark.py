"""Spark for every layer, from one configuration (:func:`conf`): a process's own SparkSession
(:func:`session`: the speed layer, tests, benchmarks) in local mode or on a cluster (the
``spark_master`` setting), with Delta Lake and the Kafka source from the jar cache; and a client of the
deployment's long-lived batch engine (:func:`engine`: a Spark Connect server, infra.batch_engine, which
runs with the same configuration)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from infra import private_files
from infra.deployment import JAR_CACHE, Deployment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def jars() -> list[str]:
    found = sorted(str(p) for p in (JAR_CACHE / "spark").glob("*.jar"))
    if not found:
        raise RuntimeError(f"no Spark jars in {JAR_CACHE / 'spark'}; run `make setup` first")
    return found


#: The JIT compiles every method, the large generated ones too: the parse's validation stage is over
#: HotSpot's 8,000-byte limit, and ran interpreted (its reason column: 1.3 s -> 0.6 s per 200k records).
#: The throughput collector (ParallelGC): on two cores it costs the speed layer less CPU than G1's
#: concurrent marking and write barriers (warm 200k micro-batches in one process: 10.4 -> 8.9 s each).
JVM_OPTIONS = "-XX:-DontCompileHugeMethods -XX:+UseParallelGC"
#: The long-lived batch engine's collector instead: G1, which gives the heap that a backfill's runs in
#: flight grew back to the system once the engine idles (a full collection when 10 s pass without one,
#: leaving at most 30% of the heap free), where the throughput collector keeps it for the JVM's life;
#: and every 10 s the C heap's freed memory is given back too (malloc_trim: resident at rest after a
#: nightly run 668 -> 623 MB).
ENGINE_JVM_OPTIONS = (
    "-XX:-DontCompileHugeMethods -XX:+UseG1GC -XX:G1PeriodicGCInterval=10000 "
    "-XX:-G1PeriodicGCInvokesConcurrent -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30 "
    "-XX:TrimNativeHeapInterval=10000"
)
#: Spark's classes as a JVM of this environment loaded and linked them, kept at setup
#: (``python -m infra.class_archive``): a driver maps them at start instead of reading them from the jars
#: again (a speed layer's start to its queries: 12.1 -> 8.8 s). A JVM that cannot use the archive (another
#: Java, another install of the jars) reads the jars as before.
CLASS_ARCHIVE = JAR_CACHE.parent / "spark-classes.jsa"


def class_sharing() -> list[str]:
    """A driver JVM's options to map :data:`CLASS_ARCHIVE` if there is one (and say nothing if it cannot)."""
    if not CLASS_ARCHIVE.exists():
        return []
    return [f"-XX:SharedArchiveFile={CLASS_ARCHIVE}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


#: Generated classes kept compiled: room for every stage of the speed layer's micro-batches, and Spark's
#: default for the batch engine, whose plans are fewer and whose memory must stay flat over months (its
#: class metadata after 28 demo days' recomputes: +34 MB with room for 1,000, +12 MB with 100).
CODEGEN_CLASSES, ENGINE_CODEGEN_CLASSES = 1000, 100
#: On a cluster, the cores and memory one application (the speed layer, the batch engine) takes, so
#: that they share it.
#: The batch engine's pools of threads that wait on its queries' stages and broadcasts: a few per run
#: in flight, where Spark allows up to 1,024 each, idle ones kept 60 s (after a 30-day backfill, 180
#: more threads than after a nightly run, each with its stack, were still waiting at rest).
ENGINE_THREADS = {
    f"spark.sql.{pool}.maxThreadThreshold": "16"
    for pool in ("shuffleExchange", "broadcastExchange", "resultQueryStage")
}
CLUSTER_SHARE = {
    "spark.cores.max": "2",
    "spark.executor.cores": "2",
    "spark.executor.memory": "1g",
    "spark.executor.extraJavaOptions": JVM_OPTIONS,
}


def conf(settings: Deployment, master: str, engine: bool = False) -> dict[str, str]:
    """Every Spark setting of a lambdalake application on ``master``, or of the batch engine if
    ``engine`` (the deployment's ``spark_conf`` last)."""
    tmp = settings.home / "tmp" / "spark"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        **({} if master.startswith("local") else CLUSTER_SHARE),
        **(ENGINE_THREADS if engine else {}),
        "spark.jars": ",".join(jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # what the driver keeps of finished queries, jobs and stages for its UI's status store: a long
        # session (the speed layer, the batch engine, the test suite) would otherwise hold a thousand plans
        "spark.sql.ui.retainedExecutions": "20",
        "spark.ui.retainedJobs": "50",
        "spark.ui.retainedStages": "50",
        "spark.local.dir": str(tmp),
        "spark.sql.warehouse.dir": str(settings.home / "tmp" / "warehouse"),
        # generated code that is the same from one micro-batch to the next is compiled once: room for
        # every class a micro-batch uses, and no stage number in a class's name (a view whose plan
        # grows by a stage would renumber, and so recompile, every stage after it)
        "spark.sql.codegen.cache.maxEntries": str(ENGINE_CODEGEN_CLASSES if engine else CODEGEN_CLASSES),
        "spark.sql.codegen.useIdInClassName": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        # a full VACUUM lists the table's folders in as many tasks as this (Spark's default: 10,000, which
        # took a small table's full VACUUM 42-53 s on 2 cores, 2.6-3.1 s with 2)
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        # a first copy per event id (views.compile.first_copies) sorts its rows once, after the shuffle:
        # a resent copy is rare, so a partial group limit before the shuffle would only sort them twice
        "spark.sql.optimizer.windowGroupLimitThreshold": "-1",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.optimizeWrite.enabled": "true",
        "spark.databricks.delta.autoCompact.enabled": "true",
        "spark.databricks.delta.autoCompact.minNumFiles": "25",
        # only small files are compacted as they are written: a large micro-batch's files (a 200k one
        # writes three of 9 MB to raw_events) are left to the maintenance DAG's OPTIMIZE
        "spark.databricks.delta.autoCompact.minFileSize": str(4 * 2**20),
        "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",  # noqa: E501
        # commit state as a changelog, not a whole RocksDB snapshot per micro-batch
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # a query killed during its first micro-batch leaves that batch's offsets and state behind, which
        # it must resume from; Spark 4.1's check that a new query's checkpoint is empty refused that
        # restart (each checkpoint folder is one query's own: speed_layer.queries names them)
        "spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart": "false",
        # a stream's offsets and commits are written to a temporary file and renamed by Hadoop's
        # FileSystem API (atomic on a local or HDFS folder, as with the default FileContext API, which
        # took 65-70 ms a file here where this takes 13-15: 0.1 s of every micro-batch)
        "spark.sql.streaming.checkpointFileManagerClass": "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",  # noqa: E501
        "spark.driver.extraJavaOptions": " ".join(
            [f"-Dderby.system.home={tmp}", ENGINE_JVM_OPTIONS if engine else JVM_OPTIONS, *class_sharing()]
        ),
        **dict(settings.spark_conf),
    }


#: Deployment that hold a credential (an object store's keys, a password, a token): they reach Spark in a
#: file of the owner's alone (:func:`launch`), never on a command line, where ``ps`` shows them to everyone.
SECRET = re.compile(r"key$|secret|password|token", re.IGNORECASE)


def launch(settings: Deployment, conf: dict[str, str], name: str) -> tuple[dict[str, str], list[str]]:
    """Split ``conf`` for a JVM's launch: the settings to pass as ``--conf``, and ``spark-submit``'s
    arguments that load the secret ones (:data:`SECRET`) from ``<home>/run/<name>.properties``, mode 600."""
    secret = {key: value for key, value in conf.items() if SECRET.search(key)}
    if not secret:
        return conf, []
    path = settings.run / f"{name}.properties"
    private_files.write_private(path, "".join(f"{key}={_escaped(value)}\n" for key, value in secret.items()))
    return {key: value for key, value in conf.items() if key not in secret}, ["--properties-file", str(path)]


def _escaped(value: str) -> str:
    """``value`` as a Java properties file reads it back."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def session(settings: Deployment, app_name: str, master: str | None = None) -> SparkSession:
    """Get or create the process's SparkSession for ``settings`` (on ``master``, default the
    ``spark_master`` setting's)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master or settings.spark_master_url).appName(app_name)
    public, submit = launch(settings, conf(settings, master or settings.spark_master_url), "spark-session")
    if submit:  # pyspark starts its JVM with spark-submit, these arguments and the settings below
        os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join([*submit, "pyspark-shell"])
    for key, value in public.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


class EngineError(RuntimeError):
    """The batch engine is not running, or went away while it worked; the message says what to do."""


def answers(url: str) -> bool:
    """Whether something accepts connections at the ``sc://host:port`` of ``url``."""
    host, port = url.removeprefix("sc://").split("/")[0].split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


@contextmanager
def engine(settings: Deployment, url: str | None = None) -> Iterator:
    """A Spark Connect session of the batch engine at ``url`` (default: the settings' engine), closed
    when the block ends. Raises :class:`EngineError` in one line if the engine does not answer, or
    stops answering while the block runs (the work is then left undone, never half-committed: each
    Delta commit is atomic)."""
    from pyspark.sql import SparkSession

    url = url or settings.batch_engine_url
    if not answers(url):
        raise EngineError(f"the batch engine does not answer at {url}: start it with `lambdalake up`")
    spark = SparkSession.builder.remote(url).create()
    spark.client.set_retry_policies([_quick_retries()])  # a lost engine fails the task in seconds, not minutes
    try:
        yield spark
    except Exception as error:
        if answers(url):  # the engine is there: the error is the work's own
            raise
        raise EngineError(
            f"the batch engine at {url} went away during the work ({type(error).__name__}); "
            f"nothing half-done was committed: rerun once it is back (the watchdog restarts "
            f"it, `lambdalake up` too)"
        ) from None
    finally:
        with suppress(Exception):  # a lost engine cannot release the session; nothing is left to free
            spark.stop()


def _quick_retries():
    """Spark Connect's retry policy with a few short waits (its default waits up to ten minutes)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=4, backoff_multiplier=2.0, initial_backoff=200, max_backoff=2000)
