"""Every view of every bundled domain, computed three ways from one messy event set, against the
domain's independent oracle (tests/oracle.py, tests/ads_oracle.py): out-of-order, late, resent and
malformed events, with the dimension changing mid-stream.

a. the batch path (``recompute_day``, what the batch DAGs run: every view, its checks passed) equals
   the oracle exactly;
b. the streaming path (the speed layer's own fold of each micro-batch, fed the Kafka records in
   micro-batches, and the serving layer's merge of its partials) equals the oracle of what it could
   see: events behind the watermark are left to batch, the dimension's value is the latest the speed
   layer knew, and distinct counts are within the sketch's error;
c. the merged view, with the boundary at a seeded random day, equals batch before it and speed from it
   (through DuckDB, and through Spark SQL with the same rows),
   and equals the oracle exactly once batch has run for every day.

One run keeps its tables in S3 (``s3a://``, a real S3 API on loopback), the others in a folder.

Each seed draws its own days, events, dimension changes, micro-batch cuts and boundary.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import ModuleType

import pytest

from batch_layer.recompute import recompute_day
from domains.ads import generator as ads_generator
from domains.clickstream import generator as clickstream_generator
from domains.sample import Mix
from infra.deployment import load
from infra.producer import Record
from serving_layer import spark_sql
from speed_layer import queries
from speed_layer.fold import Fold
from tests import ads_oracle, oracle
from tests.compare import assert_measures, keyed, merged_rows
from tests.conftest import EXTRA_VIEWS
from views import all_views, changelog, events, timebase
from views.events import kafka_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLUSH_AFTER = timedelta(hours=2)
#: The run whose tables every layer reads and writes in the object store (the ``object_store`` fixture).
ON_OBJECT_STORE = ("clickstream", 8)


def _event(at: datetime, **fields) -> Record:
    return Record(
        at, b"flusher", json.dumps({**fields, "event_time": at.isoformat().replace("+00:00", "Z")}).encode(), "valid"
    )


@dataclass(frozen=True)
class Case:
    """A bundled domain under test: its generator, its oracle and the views the test deployment adds."""

    domain: str
    seeds: tuple[int, ...]
    generator: ModuleType
    #: records -> {view: {key: measures}}, given each event's dimension value
    oracle: Callable
    as_of: Callable
    latest: Callable
    #: An event far ahead of the data, at a time: it moves the watermark past every window of interest.
    flush: Callable[[datetime], Record]
    view_modules: tuple[str, ...] = ()


CASES = (
    Case(
        "clickstream",
        (5, 8),
        clickstream_generator,
        oracle.views,
        oracle.category_as_of,
        oracle.latest_category,
        lambda at: _event(
            at, event_id=f"flush-{at:%H%M}", event_type="page_view", user_id="flusher", session_id="flush", page="/"
        ),
        EXTRA_VIEWS,
    ),
    Case(
        "ads",
        (3,),
        ads_generator,
        ads_oracle.views,
        ads_oracle.campaign_as_of,
        ads_oracle.latest_campaign,
        lambda at: _event(at, event_id=f"flush-{at:%H%M}", event_type="purchase", user_id="flusher", ad_id="ad0"),
    ),
)


@dataclass
class Run:
    views: dict
    expected: dict  # the oracle on everything, batch semantics
    seen_by_speed: dict  # the oracle on what the speed layer could see, speed semantics
    closed: datetime  # the watermark every compared speed window ended before
    boundary: datetime
    speed: dict  # view -> rows of the merged view before any batch: the speed layer's
    merged: dict  # view -> rows of the merged view, batch run before the boundary
    spark_merged: dict  # the same through Spark SQL
    final: dict  # view -> rows of the merged view, batch run for every day


def _time(record: Record) -> datetime | None:
    try:
        return datetime.fromisoformat(record.event()["event_time"]).astimezone(timebase.UTC)
    except (ValueError, KeyError, TypeError):
        return None


def _speed_run(spark, settings, views, records, changes, cuts, watermark, latest):
    """Fold the records into the speed layer in micro-batches (the dimension landed up to each one's
    first send time), as its streaming query does; return the speed rows the serving layer merges from
    its partials, the oracle input the speed layer could see and each event's dimension value."""
    [dimension] = settings.dimensions
    spark_rows = kafka_rows(records)
    changes_rows = kafka_rows(changes, topic=settings.topic_of(dimension.topic), partitions=1)
    queries.ensure_tables(spark, settings)
    fold = Fold(spark, settings, list(views.values()), "equivalence")
    seen, value_of, newest, landed_changes = [], {}, None, []
    for batch_id, (first, last) in enumerate(itertools.pairwise(cuts)):
        known = [c for c in changes if c.send_at < records[first].send_at]
        if len(known) != len(landed_changes):
            landed_changes = known
            parsed = changelog.parse(spark.createDataFrame(changes_rows[: len(known)], events.KAFKA_RECORD), dimension)
            changelog.dimension(changelog.changes(parsed, dimension), dimension).write.format("delta").mode(
                "overwrite"
            ).save(settings.table(dimension.name))
        value = latest(known)
        mark = newest - watermark if newest else None  # the watermark: from the micro-batches before
        for record in records[first:last]:
            when = _time(record) if record.kind != "malformed" else None
            if when is None:
                continue
            if mark is None or when >= mark:
                seen.append(record)
                value_of.setdefault(json.loads(record.value)["event_id"], value)
            newest = max(newest or when, when)
        fold(spark.createDataFrame(spark_rows[first:last], events.KAFKA_RECORD), batch_id)
    return _merged(settings, views), seen, lambda event: value_of[event["event_id"]](event)


def _merged(settings, views) -> dict:
    return {name: merged_rows(settings, view) for name, view in views.items()}


@pytest.fixture(scope="module")
def runs(request, spark, deployment, tmp_path_factory) -> Callable[[Case, int], Run]:
    """Each (case, seed)'s run, built once for all the tests that compare it."""
    built: dict[tuple[str, int], Run] = {}

    def get(case: Case, seed: int) -> Run:
        if (case.domain, seed) not in built:
            home = tmp_path_factory.mktemp(f"equivalence-{case.domain}-{seed}")
            storage = (
                f"{request.getfixturevalue('object_store')}/{home.name}"
                if (case.domain, seed) == ON_OBJECT_STORE
                else None
            )
            built[case.domain, seed] = _build(spark, deployment, home, storage, case, seed)
        return built[case.domain, seed]

    return get


@pytest.fixture
def run(request, runs) -> Run:
    """The run of the test's (case, seed) (``request.param``)."""
    return runs(*request.param)


def _build(spark, deployment, home, storage: str | None, case: Case, seed: int) -> Run:
    """One seed's run of one domain's case, its deployment in ``home`` and its tables at ``storage``."""
    rng = random.Random(seed)
    settings_json = {
        **json.loads((deployment.home / "settings.json").read_text()),
        "domain": case.domain,
        "view_modules": list(case.view_modules),
        "storage": storage,
    }
    (home / "settings.json").write_text(json.dumps(settings_json))
    settings = load(home)
    views = settings.views
    start = timebase.day_start(datetime(2026, 3, 1).date() + timedelta(days=rng.randrange(200)))
    end = start + timedelta(days=2)
    records = case.generator.generate(start, end, 1600, seed=seed, mix=Mix(late=0.04, duplicate=0.05, malformed=0.03))
    records += [case.flush(end + FLUSH_AFTER), case.flush(end + FLUSH_AFTER + timedelta(minutes=1))]
    [changes] = case.generator.changelogs(start, end, seed=seed).values()
    # two micro-batches of data cut at a random point, the first flush riding on the second; the last
    # flush is a micro-batch of its own, in which the first flush's watermark closes every window
    cuts = [0, rng.randrange(len(records) // 4, len(records) * 3 // 4), len(records) - 1, len(records)]
    watermark = timedelta(minutes=10)
    assert settings.watermark == "10 minutes"

    speed, seen, speed_value = _speed_run(spark, settings, views, records, changes, cuts, watermark, case.latest)

    first_day = start - timedelta(days=1)  # late events may belong to the day before
    boundary = start + timedelta(days=rng.choice((1, 2)))
    recompute_day(spark, settings, first_day, boundary)
    merged = _merged(settings, views)
    in_spark = spark_sql.session(spark, settings)
    spark_merged = {
        name: keyed(view, [r.asDict() for r in in_spark.sql(f'SELECT * FROM "{name}"').collect()])
        for name, view in views.items()
    }
    last_day = timebase.day_start((end + FLUSH_AFTER).date()) + timedelta(days=1)
    recompute_day(spark, settings, boundary, last_day)
    return Run(
        views=views,
        expected=case.oracle(records, case.as_of(changes)),
        seen_by_speed=case.oracle(seen, speed_value),
        closed=end + FLUSH_AFTER - watermark,
        boundary=boundary,
        speed=speed,
        merged=merged,
        spark_merged=spark_merged,
        final=_merged(settings, views),
    )


#: (case, seed) of each run, and the view names each test takes from it.
RUNS = [
    pytest.param((case, seed), name, id=f"{case.domain}-seed{seed}-{name}")
    for case in CASES
    for seed in case.seeds
    for name in all_views(case.view_modules, case.domain)
]
each_view_of_each_run = pytest.mark.parametrize("run,name", RUNS, indirect=["run"])


@each_view_of_each_run
def test_batch_equals_oracle(run, name):
    view = run.views[name]
    rows = run.final[name]
    assert set(rows) == set(run.expected[name])
    for key, row in rows.items():
        assert (row["source"], row["is_final"]) == ("batch", True)
        assert row["window_end"] - row["window_start"] == view.windows.size, key
        assert_measures(view, row, run.expected[name][key], key, approximate=False)


@each_view_of_each_run
def test_speed_equals_oracle_for_closed_windows(run, name):
    view = run.views[name]
    closed = {k: v for k, v in run.speed[name].items() if v["window_end"] <= run.closed}
    expected = {k: v for k, v in run.seen_by_speed[name].items() if k[0] + view.windows.size <= run.closed}
    assert set(closed) == set(expected)
    for key, row in closed.items():
        assert_measures(view, row, expected[key], key, approximate=True)


@each_view_of_each_run
def test_merged_view_takes_batch_before_the_boundary_and_speed_from_it(run, name):
    view = run.views[name]
    rows = run.merged[name]
    batch = {k: v for k, v in rows.items() if k[0] < run.boundary}
    assert set(batch) == {k for k in run.expected[name] if k[0] < run.boundary}
    for key, row in batch.items():
        assert (row["source"], row["is_final"]) == ("batch", True)
        assert_measures(view, row, run.expected[name][key], key, approximate=False)
    speed = {k: v for k, v in rows.items() if k[0] >= run.boundary and k[0] + view.windows.size <= run.closed}
    assert set(speed) == {
        k for k in run.seen_by_speed[name] if k[0] >= run.boundary and k[0] + view.windows.size <= run.closed
    }
    for key, row in speed.items():
        assert (row["source"], row["is_final"]) == ("speed", False)
        assert_measures(view, row, run.seen_by_speed[name][key], key, approximate=True)


@each_view_of_each_run
def test_spark_sql_returns_the_rows_the_serving_engine_returns(run, name):
    duck, spark = run.merged[name], run.spark_merged[name]
    assert set(spark) == set(duck) and duck
    for key, row in duck.items():
        for column, value in row.items():
            want = pytest.approx(value, rel=1e-12) if isinstance(value, float) else value
            assert spark[key][column] == want, (name, key, column)
