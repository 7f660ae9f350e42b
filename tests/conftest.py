"""Session-wide real parts: one deployment home (its own ports, beside any running demo), one Kafka
broker, one SparkSession, one batch engine (a Spark Connect server), one Airflow
(tests/plugins/airflow_service.py)."""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from infra import batch_engine as engines
from infra import deployment as config
from infra import kafka, spark_cluster
from infra.deployment import Deployment
from infra.object_store import LocalS3
from views import timebase

pytest_plugins = ["tests.plugins.airflow_service"]
logging.getLogger("py4j").setLevel(logging.WARNING)  # its shutdown chatter outlives pytest's streams

#: The modules of views declared only in the test suite; every test deployment has them.
EXTRA_VIEWS = ("tests.extra_view",)
#: Ports of the test deployment (beside a demo's); LAMBDALAKE_TEST_PORT_SHIFT moves them all, so that
#: two test runs on one machine do not meet, and each xdist worker (gw0, gw1, ...) has its own 500 more.
SHIFT = int(os.environ.get("LAMBDALAKE_TEST_PORT_SHIFT", "0")) + 500 * int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
)
PORTS = {
    "kafka_port": 19092 + SHIFT,
    "kafka_controller_port": 19093 + SHIFT,
    "airflow_port": 18080 + SHIFT,
    "spark_master_port": 17077 + SHIFT,
    "spark_ui_port": 18090 + SHIFT,
    "batch_engine_port": 25002 + SHIFT,
    "airflow_database_port": 15433 + SHIFT,
}
#: The first port of a Kafka cluster of three beside the session's broker (its brokers listen on this
#: port, +2 and +4, their controllers on the odd ports between and after: infra.deployment.kafka_ports).
KAFKA_CLUSTER_PORT = 19292 + SHIFT
#: The session's S3 store (the ``object_store`` fixture), with keys of its own. The test deployment's
#: Spark sessions are configured for it (``spark_conf``), and its AWS variables are exported, as a user
#: would before ``lambdalake up``: delta-rs and s3fs find it from every process (Airflow's tasks too).
S3 = LocalS3(19000 + SHIFT, "lambdalake-tests", secrets.token_urlsafe(16))
os.environ.update(S3.environment())
#: The JVMs the tests start (brokers, speed layers, the batch engine, a Spark cluster, S3Proxy) live for
#: seconds to minutes: too short for HotSpot's optimizing compiler (C2) to pay back what it costs, so they
#: compile with C1 alone (measured alone: the fault tests 665 -> 428 CPU-s, the end-to-end test 505 -> 328,
#: the batch engine's 317 -> 188). The session's own SparkSession, which does most of the suite's Spark
#: work, keeps both (:func:`spark`; with C1 alone the equivalence and batch tests took 357 -> 412).
#: The deployment's own JVM options stay as they are: benchmarks measure them. With C1 alone the JVM
#: reserves 48 MB for compiled code, not 240: the engine's lane filled that, and a JVM that runs out of it
#: for method-handle adapters stops its SparkContext ("Out of space in CodeCache for adapters"), after
#: which Airflow's tasks waited 120 s on it and failed (the orchestrator-kill test took 303 s, not 72).
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
#: ``JAVA_TOOL_OPTIONS`` as the session found it (without :data:`C1_ONLY`, which xdist's workers inherit).
TOOL_OPTIONS = os.environ.get("JAVA_TOOL_OPTIONS", "").replace(C1_ONLY, "").strip()
os.environ["JAVA_TOOL_OPTIONS"] = f"{TOOL_OPTIONS} {C1_ONLY}".strip()
#: Days of history the end-to-end test produces before today: all but the last are backfilled from the
#: Airflow UI; the batch DAG starts yesterday, so its scheduler catches up the last one by itself.
HISTORY_DAYS = 2


#: The test files that need the session's batch engine (and the Airflow on it): ``make test``'s two xdist
#: workers run them on one worker, so that neither starts twice (:class:`Lanes`).
ON_THE_ENGINE = frozenset(
    {
        "tests/e2e/test_pipeline.py",
        "tests/integration/test_airflow.py",
        "tests/integration/test_airflow_kill.py",
        "tests/integration/test_airflow_postgres.py",
        "tests/integration/test_batch_engine.py",
        "tests/integration/test_quality_connect.py",
    }
)


def _lane(nodeid: str) -> str:
    """A test's lane: the engine's (:data:`ON_THE_ENGINE`), or its own file's."""
    path = nodeid.split("::")[0]
    return "engine" if path in ON_THE_ENGINE else path


class Lanes(LoadScopeScheduling):
    """xdist's scheduler for ``make test`` (``-n 2 --no-loadscope-reorder``): each lane runs whole on one
    worker, in the order of the collection."""

    def _split_scope(self, nodeid: str) -> str:
        return _lane(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Lanes:
    return Lanes(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The lanes with a ``slow`` test first, so that the two workers end together, and in the engine's
    lane the tests on the session's Airflow last (:func:`pytest_runtest_teardown` stops it when the lane
    ends); a test on the engine outside :data:`ON_THE_ENGINE` is an error."""
    stray = [
        item.nodeid
        for item in items
        if "engine_home" in getattr(item, "fixturenames", ()) and _lane(item.nodeid) != "engine"
    ]
    if stray:
        raise pytest.UsageError(f"{stray[0]} needs the batch engine: add its file to ON_THE_ENGINE (tests/conftest.py)")
    slow = {_lane(item.nodeid) for item in items if item.get_closest_marker("slow")}
    order = {lane: i for i, lane in reversed(list(enumerate(_lane(item.nodeid) for item in items)))}
    items.sort(
        key=lambda item: (
            _lane(item.nodeid) not in slow,
            order[_lane(item.nodeid)],
            "airflow_service" in getattr(item, "fixturenames", ()),
        )
    )


#: What stops the engine lane's session services (the batch engine, Airflow), put there by their fixtures.
ENGINE_LANE_SERVICES: list[Callable[[], object]] = []


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Once the engine's lane has run its last test on this worker (it runs whole on one), its services stop
    rather than idle until the session ends, minutes later: an idle Airflow parses every DAG file again
    every 30 s. Their fixtures' own stops, at the end, then find nothing to stop."""
    if _lane(item.nodeid) == "engine" and (nextitem is None or _lane(nextitem.nodeid) != "engine"):
        while ENGINE_LANE_SERVICES:
            ENGINE_LANE_SERVICES.pop()()


@pytest.fixture(scope="session")
def engine_lane_services() -> list[Callable[[], object]]:
    """:data:`ENGINE_LANE_SERVICES`, for a session fixture of the engine's lane to put its stop in."""
    return ENGINE_LANE_SERVICES


@pytest.fixture(scope="session")
def deployment(tmp_path_factory) -> Deployment:
    """The test deployment: a session tmp home and ports offset from the defaults."""
    home = tmp_path_factory.mktemp("deployment")
    (home / "settings.json").write_text(
        json.dumps(
            {
                **PORTS,
                "trigger_seconds": 2,
                "batch_start_date": (datetime.now(timebase.UTC).date() - timedelta(days=1)).isoformat(),
                "spark_driver_memory": "1g",
                # an engine's warm-up (33-39 s a start, of which the session makes three) is tested where the
                # watchdog restarts one (tests/integration/test_batch_engine.py)
                "batch_engine_warm_up": False,
                "view_modules": list(EXTRA_VIEWS),
                "spark_conf": S3.spark_conf(),
            }
        )
    )
    return config.load(home)


@pytest.fixture(scope="session")
def broker(deployment) -> Iterator[Deployment]:
    """A real Kafka 4 broker for the session; stopped at the end with nothing left behind."""
    kafka.start(deployment)
    yield deployment
    kafka.stop(deployment)


@pytest.fixture(scope="session")
def spark(deployment):
    """The session's one SparkSession (local, UI off, few shuffle partitions), with Delta and Kafka."""
    from infra import spark as sparks

    with pytest.MonkeyPatch.context() as env:  # its JVM with both compilers (:data:`C1_ONLY`)
        env.setenv("JAVA_TOOL_OPTIONS", TOOL_OPTIONS) if TOOL_OPTIONS else env.delenv("JAVA_TOOL_OPTIONS")
        session = sparks.session(deployment, "lambdalake-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def engine_home(deployment, engine_lane_services) -> Iterator[Deployment]:
    """The deployment whose batch engine (a Spark Connect server, infra.batch_engine) the session's tests
    use, started by the first that needs it (:func:`batch_engine`) and stopped when the engine's lane ends."""
    engine_lane_services.append(lambda: engines.stop(deployment))
    yield deployment
    engines.stop(deployment)


@pytest.fixture
def batch_engine(engine_home) -> Deployment:
    """The deployment's batch engine, running: the tests' Airflow tasks and the processes they start
    send their Spark work to it. Never connect to it from the test process itself: a Spark Connect
    session switches pyspark's functions to Connect for the whole process, and the session's own
    SparkSession with them."""
    engines.start(engine_home)  # a no-op while it runs
    return engine_home


@pytest.fixture(scope="session")
def object_store(deployment) -> Iterator[str]:
    """A real S3 API (S3Proxy on loopback, infra.object_store), started on first use: the ``s3a://`` URI
    of a bucket."""
    S3.start(deployment)
    yield S3.create_bucket("lake")
    assert S3.stop(deployment)


@pytest.fixture
def on_cluster_and_object_store(engine_home, object_store) -> Iterator[Deployment]:
    """The deployment on a Spark standalone cluster (a master and two workers on loopback), its tables in
    the object store, for one test: the speed layer it starts and the batch engine, which Airflow's
    batch tasks use, run there; afterwards the cluster and the engine are stopped (the next test on the
    engine starts it locally again)."""
    path = engine_home.home / "settings.json"
    saved = path.read_text()
    settings = engine_home.save(spark_master="standalone", storage=f"{object_store}/e2e")
    spark_cluster.start(settings)
    engines.stop(settings)
    engines.start(settings)
    yield settings
    path.write_text(saved)
    engines.stop(settings)
    assert spark_cluster.stop(settings)


@pytest.fixture
def tables(tmp_path, deployment) -> Deployment:
    """The deployment, its Delta tables living in this test's own tmp folder, named by a ``file://`` URI as an
    object store would be (setting ``storage``): every layer reads and writes them as URIs here, and as
    plain folders in the end-to-end, fault and equivalence tests."""
    stored = json.loads((deployment.home / "settings.json").read_text())
    (tmp_path / "settings.json").write_text(json.dumps({**stored, "storage": (tmp_path / "lake").as_uri()}))
    return config.load(tmp_path)
