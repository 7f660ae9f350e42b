"""Fault tests of the speed layer on the real broker: kill -9 at random moments, a broker restart,
a broker of a three-broker cluster killed, and a flood of fuzzed bad records. Each is bounded in time
and stops by itself."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import psutil
import pytest

from domains.clickstream import generator
from domains.sample import Mix
from infra import kafka, processes, producer, services
from infra import object_store as object_stores
from infra.deployment import load
from infra.producer import Record
from serving_layer import engine
from tests import oracle
from tests.compare import within_sketch_error
from tests.conftest import KAFKA_CLUSTER_PORT
from views import timebase

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _deployment(tmp_path, base, **changes):
    """A deployment like ``base`` with its own events topic, whose speed layer keeps only
    page_views_per_minute (the faults are the same for every view)."""
    settings_json = json.loads((base.home / "settings.json").read_text())
    settings_json.update(
        topic_prefix=f"{tmp_path.name}-",
        max_offsets_per_trigger=20_000,
        speed_views=["page_views_per_minute"],
        **changes,
    )
    (tmp_path / "settings.json").write_text(json.dumps(settings_json))
    return load(tmp_path)


@pytest.fixture
def home(tmp_path, broker):
    """A deployment on the session's broker; its speed layer is stopped after."""
    settings = _deployment(tmp_path, broker)
    kafka.ensure_topics(settings)
    yield settings
    services.stop_speed(settings)


@pytest.fixture
def on_cluster(tmp_path, deployment):
    """A deployment on a Kafka cluster of its own, beside the session's broker: three brokers, topics
    replicated 3 times with min.insync.replicas 2; its speed layer and brokers are stopped after."""
    settings = _deployment(
        tmp_path,
        deployment,
        kafka_brokers=3,
        kafka_port=KAFKA_CLUSTER_PORT,
        kafka_controller_port=KAFKA_CLUSTER_PORT + 1,
    )
    try:
        kafka.start(settings)
        yield settings
    finally:
        services.stop_speed(settings)
        kafka.stop(settings)


@pytest.fixture
def in_object_store(home, deployment, object_store):
    """``home`` with its tables in the object store (S3Proxy), whose process the test may pause: the
    speed layer is stalled after 15 s without a finished micro-batch while input waits."""
    settings = home.save(storage=f"{object_store}/{home.home.name}", speed_stall_seconds=15)
    store = processes.running_pid(deployment, object_stores.NAME)
    yield settings, store
    os.kill(store, signal.SIGCONT)


def _recent(count: int, seed: int, mix: Mix) -> list[Record]:
    """Records whose event times all lie within the last 8 minutes: none is behind the watermark."""
    now = datetime.now(timebase.UTC)
    return generator.generate(now - timedelta(minutes=8), now, count, seed=seed, mix=mix, shaped=False)


def _landed(settings) -> tuple[int, int, int, int]:
    _, [row] = engine.query(
        settings,
        (
            "SELECT (SELECT count(*) FROM raw_events), "
            '(SELECT count(DISTINCT ("partition", "offset")) FROM raw_events), '
            "(SELECT count(*) FROM dead_letters), "
            '(SELECT count(DISTINCT ("partition", "offset")) FROM dead_letters)'
        ),
    )
    return row


def _assert_exactly_once(settings, records) -> None:
    services.wait_for_landing(settings, timeout=600)
    landed, distinct_landed, dead, distinct_dead = _landed(settings)
    bad = sum(r.kind == "malformed" for r in records)
    assert (landed, dead) == (len(records) - bad, bad)
    assert (distinct_landed, distinct_dead) == (landed, dead)  # each Kafka record exactly once
    assert sum(kafka.end_offsets(settings, settings.topic).values()) == landed + dead


def _assert_speed_view_equals_oracle(settings, records, timeout: float = 180) -> None:
    expected = oracle.views(records)["page_views_per_minute"]
    deadline = time.monotonic() + timeout
    while True:
        _, rows = engine.query(settings, "SELECT window_start, page, views, unique_users FROM page_views_per_minute")
        merged = {(timebase.utc(r[0]), r[1]): (r[2], r[3]) for r in rows}
        views = {k: v[0] for k, v in merged.items()}
        if views == {k: v[0] for k, v in expected.items()} or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert views == {k: v[0] for k, v in expected.items()}
    for key, (_, users) in merged.items():
        assert within_sketch_error(users, expected[key][1]), key


def _stream(settings, records, seconds: int = 40) -> None:
    """Send ``records`` in order, spread over about ``seconds``."""
    step = len(records) // seconds + 1
    for start in range(0, len(records), step):
        producer.send(settings, records[start : start + step])
        time.sleep(1)


def _kill_9(settings, name: str = services.SPEED) -> None:
    """Kill service ``name`` and its children at once, as a crash would."""
    pid = processes.running_pid(settings, name)
    assert pid is not None, f"{name} is not running"
    group = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    os.killpg(pid, signal.SIGKILL)
    psutil.wait_procs(group, timeout=30)


def test_kill_9_five_times_during_100k_events_the_watchdog_restarts_it_and_nothing_is_lost_or_repeated(home):
    records = _recent(100_000, seed=21, mix=Mix(late=0, duplicate=0.02, malformed=0.005))
    sender = threading.Thread(target=_stream, args=(home, records), daemon=True)
    rng = random.Random(5)
    services.start_speed(home)
    assert services.watch_speed(home) == "healthy"
    sender.start()
    for _ in range(5):
        time.sleep(rng.uniform(1, 8))  # mostly within a micro-batch: a restart's first one takes longest
        _kill_9(home)
        assert services.speed_problem(home) == "the speed layer is not running"
        assert services.watch_speed(home) == "restarted: the speed layer is not running"  # the watchdog DAG's task
    sender.join(timeout=600)
    assert not sender.is_alive()
    _assert_exactly_once(home, records)
    _assert_speed_view_equals_oracle(home, records)
    assert services.speed_health(home).error is None and services.speed_problem(home) is None
    assert list(services.speed_health(home).startup) == [  # what its last start took, step by step
        "imports",
        "resume plan",
        "Spark session",
        "tables",
        "events query",
        "dimension queries",
    ]
    services.stop_speed(home, hold=True)  # `lambdalake speed stop`: the watchdog leaves it stopped
    assert services.watch_speed(home).startswith("held")
    assert processes.running_pid(home, services.SPEED) is None


def test_broker_restart_mid_stream(home, broker):
    records = _recent(20_000, seed=22, mix=Mix(late=0))
    half = len(records) // 2
    services.start_speed(home)
    producer.send(home, records[:half])
    services.wait_for_landing(home, timeout=300)
    kafka.stop(broker)
    time.sleep(3)
    kafka.start(broker)
    producer.send(home, records[half:])
    _assert_exactly_once(home, records)
    _assert_speed_view_equals_oracle(home, records)
    assert services.speed_problem(home) is None


def _replicas(settings) -> dict[int, tuple[int, int, int]]:
    """Per partition of the events topic: its leader, and how many replicas it has and how many are in sync."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    try:
        [topic] = admin.describe_topics([settings.topic])
    finally:
        admin.close()
    return {
        p["partition_index"]: (p["leader_id"], len(p["replica_nodes"]), len(p["isr_nodes"]))
        for p in topic["partitions"]
    }


def test_a_cluster_broker_killed_mid_stream_loses_and_stops_nothing(on_cluster):
    """kill -9 of the broker that leads partition 0 while records stream in: every acknowledged record
    is landed exactly once, the speed layer goes on in the same process, and the broker rejoins."""
    records = _recent(20_000, seed=26, mix=Mix(late=0))
    assert {replicas for _, replicas, _ in _replicas(on_cluster).values()} == {3}
    services.start_speed(on_cluster)
    speed_pid = processes.running_pid(on_cluster, services.SPEED)
    with ThreadPoolExecutor(1) as pool:
        sending = pool.submit(_stream, on_cluster, records, 30)
        processes.poll(
            lambda: services.speed_health(on_cluster).processed or None,
            120,
            1,
            lambda: AssertionError("the speed layer landed nothing"),
        )
        victim = next(n for n in kafka.nodes(on_cluster) if n.id == _replicas(on_cluster)[0][0])
        _kill_9(on_cluster, victim.name)
        assert not sending.done() and not kafka.status(on_cluster).healthy
        sending.result(timeout=600)  # raises if Kafka did not acknowledge every record
    _assert_exactly_once(on_cluster, records)
    _, ids = engine.query(on_cluster, "SELECT DISTINCT event_id FROM raw_events")
    assert {json.loads(r.value)["event_id"] for r in records if r.kind != "malformed"} <= {i for (i,) in ids}
    assert processes.running_pid(on_cluster, services.SPEED) == speed_pid
    assert services.speed_health(on_cluster).error is None and services.speed_problem(on_cluster) is None
    kafka.start(on_cluster)  # the killed broker again: healthy, and back in every partition's in-sync replicas
    assert kafka.status(on_cluster).healthy
    processes.poll(
        lambda: {isr for _, _, isr in _replicas(on_cluster).values()} == {3} or None,
        120,
        1,
        lambda: AssertionError(f"broker {victim.id} did not rejoin: {_replicas(on_cluster)}"),
    )


def _fuzzed(rng: random.Random, good: bytes) -> bytes:
    """A record that cannot be a valid event: random bytes, or a good event broken in a random way."""
    event = json.loads(good)
    choice = rng.randrange(8)
    if choice == 0:
        return rng.randbytes(rng.randint(0, 300))
    if choice == 1:
        return good[: rng.randint(0, len(good) - 2)]
    if choice == 2:
        return json.dumps([event]).encode()
    if choice == 3:
        del event[rng.choice(["event_id", "event_time", "event_type", "user_id", "session_id"])]
    elif choice == 4:
        event[rng.choice(["event_id", "user_id", "session_id", "event_type"])] = rng.choice([None, "", 7, [1], {}])
    elif choice == 5:
        event["event_time"] = rng.choice(["", "now", "2026-13-45T99:00:00Z", "1700000000", "2026-11-20"])
    elif choice == 6:
        event.update(event_type="purchase", product_id="p1", quantity=rng.choice(["x", 1.5, -1, 0]), amount=1)
    else:  # over max_payload_bytes (16,384) as UTF-8
        event["page"] = "é" * rng.randint(9000, 20000)
    return json.dumps(event, ensure_ascii=False).encode()


def test_ten_thousand_fuzzed_bad_records_are_dead_lettered_and_stop_nothing(home):
    rng = random.Random(9)
    good = _recent(10_000, seed=23, mix=Mix(late=0, duplicate=0, malformed=0))
    mixed = []
    for record in good:
        mixed.append(record)
        mixed.append(Record(record.send_at, record.key, _fuzzed(rng, record.value), "malformed"))
    services.start_speed(home)
    assert producer.send(home, mixed) == len(mixed)
    _assert_exactly_once(home, mixed)
    _, [(reasonless,)] = engine.query(home, "SELECT count(*) FROM dead_letters WHERE reason IS NULL OR raw IS NULL")
    assert reasonless == 0
    assert services.speed_problem(home) is None


def test_lost_checkpoint_stops_with_the_ways_out_and_resumes_from_tables(home):
    records = _recent(3000, seed=24, mix=Mix(late=0))
    services.start_speed(home)
    producer.send(home, records[:1500])
    services.wait_for_landing(home)
    services.stop_speed(home)
    for path in home.checkpoints.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    with pytest.raises(processes.ServiceError, match=r"landing checkpoint .* is missing.*--resume-from-tables"):
        services.start_speed(home)
    services.start_speed(home, resume_from_tables=True)
    producer.send(home, records[1500:])
    _assert_exactly_once(home, records)


def test_offsets_deleted_by_kafka_before_landing_stop_the_speed_layer_with_the_ways_out(home):
    from kafka import KafkaAdminClient, TopicPartition

    records = _recent(600, seed=25, mix=Mix(late=0, duplicate=0, malformed=0))
    services.start_speed(home)
    producer.send(home, records[:300])
    services.wait_for_landing(home)
    services.stop_speed(home)
    producer.send(home, records[300:])
    admin = KafkaAdminClient(bootstrap_servers=home.kafka_bootstrap)
    try:  # retention catches up with the stopped speed layer: records it never landed are gone
        ends = kafka.end_offsets(home, home.topic)
        admin.delete_records({TopicPartition(home.topic, p): end for p, end in ends.items()})
    finally:
        admin.close()
    with contextlib.suppress(processes.ServiceError):  # it may already fail here, or in its first micro-batch
        services.start_speed(home)
    processes.wait_until(lambda: processes.running_pid(home, services.SPEED) is None, 120, "the speed layer to stop")
    assert "Kafka no longer holds offsets the speed layer still needs" in services.last_speed_health(home).error
    landed, _, dead, _ = _landed(home)
    assert (landed, dead) == (300, 0)


def test_a_hung_micro_batch_shows_its_true_lag_and_the_watchdog_restarts_it(in_object_store):
    settings, store = in_object_store
    records = _recent(1_000, seed=24, mix=Mix(late=0, duplicate=0, malformed=0))
    services.start_speed(settings)
    for start in range(0, 600, 100):  # a few micro-batches: the speed layer learns its usual duration
        producer.send(settings, records[start : start + 100])
        services.wait_for_landing(settings)
    assert services.speed_health(settings).lag == 0
    os.kill(store, signal.SIGSTOP)  # every write to the tables now blocks: the next micro-batch hangs
    producer.send(settings, records[600:])
    backlog = len(records) - 600  # far below max_offsets_per_trigger: one micro-batch takes it all
    processes.poll(
        lambda: services.speed_health(settings).lag == backlog or None,
        10,
        0.5,
        lambda: AssertionError(f"lag {services.speed_health(settings).lag}, not {backlog}"),
    )
    deadline = time.monotonic() + 120
    while (problem := services.speed_problem(settings)) is None and time.monotonic() < deadline:
        assert services.speed_health(settings).lag == backlog  # the hung micro-batch's are not processed
        time.sleep(1)
    assert problem is not None and problem.startswith(f"the speed layer is stalled: lag {backlog} ")
    threading.Timer(5, os.kill, (store, signal.SIGCONT)).start()  # the store answers again as it restarts
    assert services.watch_speed(settings).startswith(f"restarted: the speed layer is stalled: lag {backlog} ")
    _assert_exactly_once(settings, records)
    assert services.speed_problem(settings) is None
