"""Run the speed layer until stopped: ``python -m speed_layer [--resume-from-tables]`` (started by
``lambdalake up`` and ``lambdalake speed start``)."""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil
import pyarrow

from infra import deployment as config
from infra import spark as sparks
from infra import speed_report
from speed_layer import health, queries, resume
from speed_layer.fold import timed


def main() -> int:
    settings = config.load()
    startup = {"imports": round(time.time() - psutil.Process().create_time(), 3)}
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())  # malloc's, which each micro-batch trims
    try:  # before Spark starts: a lost checkpoint is told at once
        with timed(startup, "resume plan"):
            start = resume.plan(settings, resume_from_tables="--resume-from-tables" in sys.argv[1:])
    except resume.CheckpointLost as lost:
        print(f"speed layer: {lost}", file=sys.stderr)
        speed_report.write(
            settings.speed_health_file,
            speed_report.Health(os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), str(lost)),
        )
        return 2
    with timed(startup, "Spark session"):
        spark = sparks.session(settings, "lambdalake-speed")
    with timed(startup, "tables"):
        queries.ensure_tables(spark, settings)
    with timed(startup, "events query"):
        landing, fold = queries.start_events(spark, settings, start)
    with timed(startup, "dimension queries"):
        others = [queries.start_dimension(spark, settings, d) for d in settings.dimensions]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    error, monitor = None, health.Monitor(settings, landing, fold, others, start[1], startup)
    while not stopping and error is None:
        failed = [q for q in [landing, *others] if not q.isActive]
        if failed:
            error = "; ".join(f"query {q.name} stopped: {_summary(q.exception())}" for q in failed)
            print(*(q.exception() for q in failed), f"speed layer: {error}", sep="\n", file=sys.stderr)
        speed_report.write(settings.speed_health_file, monitor.report(error))
        time.sleep(1)
    monitor.close()
    for query in [landing, *others]:
        query.stop()
    return 1 if error else 0


def _summary(exc: Exception | None) -> str:
    """The root cause of a query's failure in one line."""
    lines = str(exc or "no error").splitlines()
    causes = [line for line in lines if line.startswith("Caused by:")]
    summary = (causes[-1] if causes else lines[0])[:400]
    lost = "failOnDataLoss" in str(exc) or "OFFSET_OUT_OF_RANGE" in str(exc)
    return f"{summary} -- {resume.LOST_HINT}" if lost else summary


if __name__ == "__main__":
    sys.exit(main())
