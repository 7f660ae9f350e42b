"""The SparkSession every layer uses: local mode or a cluster (the ``spark_master`` setting), with Delta
Lake and the Kafka source from the jar cache."""

from __future__ import annotations

import os
import sys

from infra.settings import JAR_CACHE, Settings


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
#: On a cluster, the cores and memory one application (the speed layer, a batch task) takes, so that
#: the speed layer and batch runs share it.
CLUSTER_SHARE = {"spark.cores.max": "2", "spark.executor.cores": "2", "spark.executor.memory": "1g",
                 "spark.executor.extraJavaOptions": JVM_OPTIONS}


def session(settings: Settings, app_name: str, master: str | None = None):
    """Get or create the process's SparkSession for ``settings`` (on ``master``, default the
    ``spark_master`` setting's)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = settings.home / "tmp" / "spark"
    tmp.mkdir(parents=True, exist_ok=True)
    master = master or settings.spark_master_url
    builder = SparkSession.builder.master(master)
    for key, value in ({} if master.startswith("local") else CLUSTER_SHARE).items():
        builder = builder.config(key, value)
    builder = (
        builder.appName(app_name)
        .config("spark.jars", ",".join(jars()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # what the driver keeps of finished queries, jobs and stages for its UI's status store: a long
        # session (the speed layer, the test suite) would otherwise hold a thousand query plans
        .config("spark.sql.ui.retainedExecutions", "20")
        .config("spark.ui.retainedJobs", "50")
        .config("spark.ui.retainedStages", "50")
        .config("spark.local.dir", str(tmp))
        .config("spark.sql.warehouse.dir", str(settings.home / "tmp" / "warehouse"))
        # generated code that is the same from one micro-batch to the next is compiled once: room for
        # every class a micro-batch uses, and no stage number in a class's name (a view whose plan
        # grows by a stage would renumber, and so recompile, every stage after it)
        .config("spark.sql.codegen.cache.maxEntries", "1000")
        .config("spark.sql.codegen.useIdInClassName", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        # a first copy per event id (views.compile.first_copies) sorts its rows once, after the shuffle:
        # a resent copy is rare, so a partial group limit before the shuffle would only sort them twice
        .config("spark.sql.optimizer.windowGroupLimitThreshold", "-1")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.databricks.delta.optimizeWrite.enabled", "true")
        .config("spark.databricks.delta.autoCompact.enabled", "true")
        .config("spark.databricks.delta.autoCompact.minNumFiles", "25")
        # only small files are compacted as they are written: a large micro-batch's files (a 200k one
        # writes three of 9 MB to raw_events) are left to the maintenance DAG's OPTIMIZE
        .config("spark.databricks.delta.autoCompact.minFileSize", str(4 * 2**20))
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        # commit state as a changelog, not a whole RocksDB snapshot per micro-batch
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={tmp} {JVM_OPTIONS}")
    )
    for key, value in settings.spark_conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
