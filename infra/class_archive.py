"""Keep Spark's classes for the driver JVMs to map at start (``python -m infra.class_archive``, run by
``make setup``): one Spark session with Delta does a little of what every session does (a Delta table
written and read back, a join, an aggregate), and its JVM writes the classes it loaded to
:data:`infra.spark.CLASS_ARCHIVE` as it exits."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from infra import deployment as config
from infra import spark as sparks


def main() -> int:
    target = sparks.CLASS_ARCHIVE
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="lambdalake-classes-") as home:
        settings = config.load(home).with_overrides(
            spark_conf={
                "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off "
                f"-Xlog:cds+dynamic=off {sparks.JVM_OPTIONS}"
            }
        )
        spark = sparks.session(settings, "lambdalake-class-archive")
        table = str(Path(home) / "table")
        spark.range(1000).selectExpr("id", "id % 7 AS key").write.format("delta").save(table)
        rows = spark.read.format("delta").load(table)
        rows.join(rows.groupBy("key").count(), "key").agg({"count": "sum"}).collect()
        assert spark.sparkContext._gateway is not None  # a classic session's
        jvm = spark.sparkContext._gateway.proc  # the JVM exits (and writes the archive) once its stdin closes
        spark.stop()
        jvm.stdin.close()
        jvm.wait(timeout=300)
    if not partial.exists():
        print(f"class archive: the JVM wrote no {partial}", file=sys.stderr)
        return 1
    partial.replace(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
