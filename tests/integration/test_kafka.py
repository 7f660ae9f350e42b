"""The Kafka broker's lifecycle (a second start is harmless, stop leaves nothing, a busy port is named),
`lambdalake produce` on it (--changelog, and records it did not acknowledge), and the speed bench's
load sender."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import psutil
import pytest

from infra import kafka, processes
from infra.deployment import REPO, load
from tests.ports import free_port

pytestmark = pytest.mark.integration


def test_busy_port_names_the_port_and_its_holder(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        (tmp_path / "settings.json").write_text(json.dumps({"kafka_port": port}))
        with pytest.raises(processes.ServiceError, match=rf"port {port} \(Kafka broker\) is busy, held by pid"):
            kafka.start(load(tmp_path))


def test_start_twice_then_stop_leaves_nothing(tmp_path, broker):
    port = free_port()
    (tmp_path / "settings.json").write_text(json.dumps({"kafka_port": port, "kafka_controller_port": free_port()}))
    settings = load(tmp_path)
    kafka.start(settings)
    try:
        pid = processes.running_pid(settings, kafka.NAME)
        kafka.start(settings)
        assert processes.running_pid(settings, kafka.NAME) == pid
        assert len(kafka.end_offsets(settings, settings.topic)) == settings.topic_partitions
        assert len(kafka.end_offsets(settings, settings.topic_of("products"))) == 1
    finally:
        assert kafka.stop(settings)
    assert not psutil.pid_exists(pid) and processes.port_holder(port) is None
    assert not kafka.stop(settings)


def _deployment(tmp_path, broker):
    """A deployment of its own topics on the session's broker."""
    overrides = {**json.loads((broker.home / "settings.json").read_text()), "topic_prefix": f"{tmp_path.name}-"}
    (tmp_path / "settings.json").write_text(json.dumps(overrides))
    settings = load(tmp_path)
    kafka.ensure_topics(settings)
    return settings


def _produce(settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lambdalake.cli", "produce", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "LAMBDALAKE_HOME": str(settings.home), "PYTHONPATH": str(REPO)},
    )


def test_produce_products_publishes_the_changelog(tmp_path, broker):
    from kafka import KafkaConsumer

    from domains.clickstream.generator import PRODUCTS, UNLISTED

    settings = _deployment(tmp_path, broker)
    done = _produce(settings, "--days", "1", "--per-day", "50", "--changelog")
    assert done.returncode == 0, done.stderr
    topic = settings.topic_of("products")
    consumer = KafkaConsumer(
        topic, bootstrap_servers=settings.kafka_bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    records = list(consumer)
    consumer.close()
    deletions = [r for r in records if r.value is None]
    created = {json.loads(r.value)["product_id"] for r in records if r.value is not None}
    assert created == set(PRODUCTS[:-UNLISTED]) and all(r.key for r in records)
    assert f"changelog: sent {len(records)} to {topic}: {len(deletions)} deletions" in done.stdout
    assert deletions and len(records) - len(deletions) > len(created)  # creations, changes and deletions


def test_produce_says_how_many_records_kafka_did_not_acknowledge(tmp_path, broker):
    """A record beyond the producer's request size is not acknowledged: the others are, and produce fails
    with one line that says how many were not, and why."""
    settings = _deployment(tmp_path, broker)
    events = tmp_path / "events.jsonl"
    events.write_text(
        "\n".join(
            json.dumps({"user_id": user, "page": page})
            for user, page in (("u1", "/"), ("u2", "x" * 1_100_000), ("u3", "/"))
        )
    )
    done = _produce(settings, "--from-file", str(events))
    assert done.returncode == 1 and done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(
        f"lambdalake: error: Kafka at {settings.kafka_bootstrap} did not acknowledge 1 of 3 "
        f"records sent to {settings.topic} (the first: [Error 10] MessageSizeTooLargeError: "
    )
    assert sum(kafka.end_offsets(settings, settings.topic).values()) == 2


def test_the_bench_load_sends_every_record_when_the_producer_queue_is_full(tmp_path, broker):
    from confluent_kafka import Producer

    from bench import live

    settings = _deployment(tmp_path, broker)
    sender = Producer({"bootstrap.servers": settings.kafka_bootstrap, "queue.buffering.max.messages": 100})
    live._send(sender, settings.topic, [{"key": str(i).encode(), "value": b"{}"} for i in range(1_000)])
    sender.flush()
    assert sum(kafka.end_offsets(settings, settings.topic).values()) == 1_000
