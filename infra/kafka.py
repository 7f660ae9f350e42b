"""Kafka 4 in KRaft combined mode (each node a broker and a controller), run from the Maven jars, bound to
127.0.0.1: one broker, or a cluster of ``kafka_brokers`` whose controllers form the quorum."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from infra import processes
from infra.deployment import JAR_CACHE, Deployment

if TYPE_CHECKING:
    from kafka import KafkaConsumer

NAME = "kafka"
HOST = "127.0.0.1"

_LOG4J = """\
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=WARN
logger.apache.name=org.apache.kafka
logger.apache.level=WARN
"""


@dataclass(frozen=True)
class Node:
    """One broker (and controller) of the deployment: its node.id, process name, ports and folder."""

    id: int
    name: str
    port: int
    controller_port: int
    dir: Path

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


def _dir(settings: Deployment) -> Path:
    return settings.home / "kafka"


def nodes(settings: Deployment) -> list[Node]:
    """The deployment's brokers: ``kafka`` alone (in the home's ``kafka`` folder), or ``kafka-1`` ..
    ``kafka-N`` (each in a folder of that name inside it)."""
    if settings.kafka_brokers == 1:
        return [Node(1, NAME, settings.kafka_port, settings.kafka_controller_port, _dir(settings))]
    return [
        Node(i, f"{NAME}-{i}", port, controller, _dir(settings) / f"{NAME}-{i}")
        for i, (port, controller) in enumerate(settings.kafka_ports, 1)
    ]


def replication(settings: Deployment) -> tuple[int, int]:
    """Every topic's replication factor and min.insync.replicas: (1, 1) on one broker, (3, 2) on three."""
    factor = min(settings.kafka_brokers, 3)
    return factor, max(1, factor - 1)


def _server_properties(settings: Deployment, node: Node) -> str:
    factor, min_isr = replication(settings)
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node.id}",
            "controller.quorum.bootstrap.servers=" + ",".join(f"{HOST}:{n.controller_port}" for n in nodes(settings)),
            f"listeners=PLAINTEXT://{node.address},CONTROLLER://{HOST}:{node.controller_port}",
            f"advertised.listeners=PLAINTEXT://{node.address}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={node.dir / 'data'}",
            f"num.partitions={settings.topic_partitions}",
            f"default.replication.factor={factor}",
            f"min.insync.replicas={min_isr}",
            f"offsets.topic.replication.factor={factor}",
            f"transaction.state.log.replication.factor={factor}",
            f"transaction.state.log.min.isr={min_isr}",
            f"share.coordinator.state.topic.replication.factor={factor}",
            f"share.coordinator.state.topic.min.isr={min_isr}",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "log.retention.hours=168",
            "",
        ]
    )


def _java(settings: Deployment, main: str, *args: str, heap: str = "256m") -> list[str]:
    return [
        "java",
        f"-Xmx{heap}",
        "-cp",
        str(JAR_CACHE / "kafka" / "*"),
        f"-Dlog4j2.configurationFile={_dir(settings) / 'log4j2.properties'}",
        main,
        *args,
    ]


def version() -> str:
    """The broker's version, from its jar's name (``kafka_2.13-4.1.1.jar``)."""
    jar = next((JAR_CACHE / "kafka").glob("kafka_2.13-*.jar"), None)
    return jar.stem.split("-", 1)[1] if jar else "unknown"


def _uuid() -> str:
    """A random Kafka Uuid (16 bytes in unpadded base64url, never starting with ``-``), as
    ``StorageTool random-uuid`` prints."""
    while (uuid := base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()).startswith("-"):
        pass
    return uuid


def _format_storage(settings: Deployment) -> None:
    """Write the configs and format every node's KRaft storage once, with one cluster id and every
    controller in the initial quorum (formatted log dirs are kept)."""
    all_nodes = nodes(settings)
    for node in all_nodes:
        node.dir.mkdir(parents=True, exist_ok=True)
        (node.dir / "server.properties").write_text(_server_properties(settings, node))
    (_dir(settings) / "log4j2.properties").write_text(_LOG4J)
    formatted = [node.name for node in all_nodes if (node.dir / "data" / "meta.properties").exists()]
    if len(formatted) == len(all_nodes):
        return
    if formatted:
        raise processes.ServiceError(
            f"Kafka's storage is formatted for {', '.join(formatted)} but not for the "
            f"other brokers of kafka_brokers={settings.kafka_brokers}; move "
            f"{_dir(settings)} away to start an empty cluster"
        )
    cluster_id = _uuid()
    controllers = ",".join(f"{n.id}@{HOST}:{n.controller_port}:{_uuid()}" for n in all_nodes)
    for node in all_nodes:
        subprocess.run(
            _java(
                settings,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(node.dir / "server.properties"),
                "--initial-controllers",
                controllers,
            ),
            check=True,
            capture_output=True,
            text=True,
        )


def healthy(settings: Deployment, node: Node) -> bool:
    """True if ``node`` answers on its port and the cluster counts it among its live (unfenced) brokers."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    if processes.port_holder(node.port) is None:  # nothing listens: the client would try for 30 s
        return False
    try:
        admin = KafkaAdminClient(bootstrap_servers=node.address, request_timeout_ms=3000)
    except (KafkaError, OSError, ValueError):
        return False
    try:
        return any(
            broker["broker_id"] == node.id and not broker.get("is_fenced")
            for broker in admin.describe_cluster()["brokers"]
        )
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


@dataclass(frozen=True)
class Broker:
    """A broker as ``status`` reports it."""

    node: int
    pid: int | None
    address: str
    healthy: bool


@dataclass(frozen=True)
class Cluster:
    """The brokers, where clients bootstrap from, and whether every broker is healthy."""

    address: str
    brokers: list[Broker]
    healthy: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "healthy", all(broker.healthy for broker in self.brokers))


def status(settings: Deployment) -> Cluster:
    """Each broker's process, address and health."""
    return Cluster(
        settings.kafka_bootstrap,
        [
            Broker(node.id, processes.running_pid(settings, node.name), node.address, healthy(settings, node))
            for node in nodes(settings)
        ],
    )


def start(settings: Deployment, timeout: float = 90) -> None:
    """Start the brokers not running (a no-op if all run), wait until each is healthy, and create the topics."""
    stopped = [node for node in nodes(settings) if processes.running_pid(settings, node.name) is None]
    for node in stopped:
        processes.require_free(node.port, "Kafka broker")
        processes.require_free(node.controller_port, "Kafka controller")
    if stopped:
        _format_storage(settings)
    for node in stopped:
        processes.start(
            settings, node.name, _java(settings, "kafka.Kafka", str(node.dir / "server.properties"), heap="768m")
        )
    for node in nodes(settings):
        processes.wait_until(
            partial(healthy, settings, node),
            timeout,
            f"Kafka broker {node.name}",
            log=processes.log_file(settings, node.name),
            alive=partial(_running, settings, node.name),
        )
    ensure_topics(settings)


def _running(settings: Deployment, name: str) -> bool:
    return processes.running_pid(settings, name) is not None


def stop(settings: Deployment) -> bool:
    """Stop every broker, all at once (one by one, the last would wait for a quorum gone); True if one ran."""
    all_nodes = nodes(settings)
    with ThreadPoolExecutor(len(all_nodes)) as pool:
        return any(list(pool.map(lambda node: processes.stop(settings, node.name), all_nodes)))


def ensure_topics(settings: Deployment) -> None:
    """Create the domain's events topic and its dimensions' compacted changelog topics if missing, each
    replicated on as many brokers as :func:`replication` says."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    factor, _ = replication(settings)
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(settings.topic, settings.topic_partitions, factor),
            *(
                NewTopic(settings.topic_of(d.topic), 1, factor, topic_configs={"cleanup.policy": "compact"})
                for d in settings.dimensions
            ),
        ]
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(missing)
    finally:
        admin.close()


def end_offsets(settings: Deployment, topic: str) -> dict[int, int]:
    """Kafka's end offset (the next to be written) of each partition of ``topic``."""
    return _offsets(settings, topic, end=True)


def beginning_offsets(settings: Deployment, topic: str) -> dict[int, int]:
    """The oldest offset Kafka still holds in each partition of ``topic`` (retention moves it on)."""
    return _offsets(settings, topic, end=False)


def _offsets(settings: Deployment, topic: str, end: bool) -> dict[int, int]:
    offsets = Offsets(settings, topic)
    try:
        return {int(p): o for p, o in offsets.fetch(oldest=not end).items()}
    finally:
        offsets.close()


class Offsets:
    """A topic's offsets, read from the broker whenever asked through one consumer kept open (it joins
    no group and reads no record)."""

    def __init__(self, settings: Deployment, topic: str, timeout_ms: int = 3000):
        self._settings, self._topic, self._timeout_ms = settings, topic, timeout_ms
        self._consumer: KafkaConsumer | None = None

    def fetch(self, oldest: bool = False) -> dict[str, int]:
        """Each partition's end offset (the next to be written), or its oldest still held; raises
        kafka-python's error if the broker does not answer in time."""
        from kafka import KafkaConsumer, TopicPartition

        if self._consumer is None:
            self._consumer = KafkaConsumer(
                bootstrap_servers=self._settings.kafka_bootstrap, request_timeout_ms=self._timeout_ms + 1000
            )
        partitions = [
            TopicPartition(self._topic, p) for p in sorted(self._consumer.partitions_for_topic(self._topic) or ())
        ]
        offsets = self._consumer.beginning_offsets if oldest else self._consumer.end_offsets
        found = offsets(partitions, self._timeout_ms)
        return {str(tp.partition): offset for tp, offset in found.items()}

    def read(self, oldest: bool = False) -> dict[str, int] | None:
        """:meth:`fetch`, or None if the broker does not answer (the consumer is opened anew next time)."""
        from kafka.errors import KafkaError

        try:
            return self.fetch(oldest)
        except KafkaError:
            self.close()
            return None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
