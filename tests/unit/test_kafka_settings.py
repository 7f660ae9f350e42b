"""The Kafka setting ``kafka_brokers``: one broker as before, or a cluster of three whose ports, folders,
quorum and replication follow from the settings; ports that would meet are refused."""

from pathlib import Path

import pytest

from infra import kafka
from infra.deployment import Deployment

HOME = Path("/tmp/lambdalake-home")


def test_one_broker_keeps_its_name_folder_and_ports():
    settings = Deployment(HOME)
    [node] = kafka.nodes(settings)
    assert (node.id, node.name, node.port, node.controller_port, node.dir) == (1, "kafka", 9092, 9093, HOME / "kafka")
    assert settings.kafka_bootstrap == "127.0.0.1:9092" and kafka.replication(settings) == (1, 1)


def test_a_cluster_of_three():
    settings = Deployment(HOME, kafka_brokers=3)
    nodes = kafka.nodes(settings)
    assert [(n.id, n.name, n.port, n.controller_port) for n in nodes] == [
        (1, "kafka-1", 9092, 9093),
        (2, "kafka-2", 9094, 9095),
        (3, "kafka-3", 9096, 9097),
    ]
    assert nodes[1].dir == HOME / "kafka" / "kafka-2"
    assert settings.kafka_bootstrap == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
    assert kafka.replication(settings) == (3, 2)
    config = kafka._server_properties(settings, nodes[1]).splitlines()
    for line in (
        "node.id=2",
        "controller.quorum.bootstrap.servers=127.0.0.1:9093,127.0.0.1:9095,127.0.0.1:9097",
        "listeners=PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095",
        "min.insync.replicas=2",
        "offsets.topic.replication.factor=3",
        "transaction.state.log.min.isr=2",
    ):
        assert line in config


@pytest.mark.parametrize("changes", [{"kafka_brokers": 0}, {"kafka_brokers": 3, "kafka_controller_port": 9094}])
def test_no_broker_or_ports_that_meet_are_refused(changes):
    with pytest.raises(ValueError, match="kafka_brokers"):
        Deployment(HOME, **changes)
