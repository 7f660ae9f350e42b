"""The quality checks on Spark Connect DataFrames (the batch engine's), in a process of their own as an
Airflow task runs them (a Spark Connect session would switch pyspark to Connect for the whole test
process): raw_events' suite, the views' first copies and unique events, a view's suite in one pass, and a
failing expectation naming the failing rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from domains.clickstream.generator import generate
from domains.sample import Mix
from infra.deployment import REPO
from tests import oracle
from tests.integration.records import land
from views import get, timebase

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 20, tzinfo=timebase.UTC)
SCRIPT = f"""
import dataclasses, json
from datetime import datetime, timedelta
from pyspark.sql import functions as F
from batch_layer import quality
from infra import deployment, spark
from views import compile, get

day = datetime.fromisoformat("{DAY.isoformat()}")
end, view = day + timedelta(days=1), get("page_views_per_minute")
config = deployment.load()
out = {{}}
with spark.engine(config) as session, quality.docs_once(config):
    records = quality.with_first_copy(session.read.format("delta").load(config.table("raw_events"))).persist()
    out["raw_events"] = quality.check_raw_events(config, records, day, end).results
    events = records.where(quality.FIRST_COPY).drop(quality.FIRST_COPY)
    unique = quality.unique_events(events, day, end)
    rows = compile.batch(view, events, {{}}).where(
        (F.col("window_start") >= F.lit(day)) & (F.col("window_start") < F.lit(end))).persist()
    done = quality.check_view(config, view, rows, unique, day, end)
    out["view"], out["per_day"] = done.results, {{str(d): n for d, n in done.per_day.items()}}
    try:
        quality.check_view(config, dataclasses.replace(view, expectations=("views < 2",)), rows, unique, day, end)
    except quality.QualityFailed as failed:
        out["failed"], out["failing"] = str(failed), failed.check.failing
    rows.unpersist()
    records.unpersist()
from pyspark import SparkContext
out["local_jvm"] = SparkContext._active_spark_context is not None  # GX started no Spark of its own
print(json.dumps(out, default=str))
"""


def test_the_checks_run_on_the_batch_engines_dataframes(spark, batch_engine, tables):
    records = generate(
        DAY - timedelta(days=1),
        DAY + timedelta(days=1),
        3000,
        seed=31,
        mix=Mix(late=0.05, duplicate=0.05, malformed=0.03),
    )
    land(spark, tables, records)
    task = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "LAMBDALAKE_HOME": str(tables.home), "PYTHONPATH": str(REPO)},
    )
    assert task.returncode == 0, task.stderr[-3000:]
    out = json.loads(task.stdout.strip().splitlines()[-1])

    assert out["local_jvm"] is False
    assert all(ok for _, _, ok, _ in out["raw_events"])
    assert all(ok for _, _, ok, _ in out["view"]) and len(out["view"]) == 3
    expected = {k: v for k, v in oracle.views(records)["page_views_per_minute"].items() if k[0].date() == DAY.date()}
    assert out["per_day"] == {str(DAY.date()): len(expected)}
    assert dict((e, o) for e, _, _, o in out["view"])[
        "views sums to the days' valid unique page_view events in raw_events"
    ] == str(sum(v for v, _ in expected.values()))
    failing = {(timebase.utc(k[0]).isoformat(), k[1]) for k, (views, _) in expected.items() if views >= 2}
    assert "failed every row: views < 2; nothing was written" in out["failed"]
    assert {(k["window_start"], k["page"]) for k in out["failing"]["every row: views < 2"]} <= failing
    assert len(out["failing"]["every row: views < 2"]) == min(20, len(failing)) > 0
    assert (tables.data_docs.parent / "validations" / "view" / get("page_views_per_minute").name).exists()
