"""The Kafka broker's lifecycle: a second start is harmless, stop leaves nothing, a busy port is named."""

from __future__ import annotations

import json
import socket

import psutil
import pytest

from infra import kafka, processes
from infra.settings import load

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
    (tmp_path / "settings.json").write_text(json.dumps({"kafka_port": 19192, "kafka_controller_port": 19193}))
    settings = load(tmp_path)
    kafka.start(settings)
    try:
        pid = processes.running_pid(settings, kafka.NAME)
        kafka.start(settings)
        assert processes.running_pid(settings, kafka.NAME) == pid
        assert len(kafka.end_offsets(settings, settings.events_topic)) == settings.topic_partitions
        assert len(kafka.end_offsets(settings, settings.products_topic)) == 1
    finally:
        assert kafka.stop(settings)
    assert not psutil.pid_exists(pid) and processes.port_holder(19192) is None
    assert not kafka.stop(settings)
