"""A single-node Kafka 4 broker in KRaft combined mode, run from the Maven jars, bound to 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path

from infra import processes
from infra.settings import JAR_CACHE, Settings
from views import domain

NAME = "kafka"

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


def _dir(settings: Settings) -> Path:
    return settings.home / "kafka"


def _server_properties(settings: Settings) -> str:
    host = "127.0.0.1"
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.bootstrap.servers={host}:{settings.kafka_controller_port}",
        f"listeners=PLAINTEXT://{host}:{settings.kafka_port},CONTROLLER://{host}:{settings.kafka_controller_port}",
        f"advertised.listeners=PLAINTEXT://{host}:{settings.kafka_port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={_dir(settings) / 'data'}",
        f"num.partitions={settings.topic_partitions}",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        "log.retention.hours=168",
        "",
    ])


def _java(settings: Settings, main: str, *args: str, heap: str = "256m") -> list[str]:
    return ["java", f"-Xmx{heap}", "-cp", str(JAR_CACHE / "kafka" / "*"),
            f"-Dlog4j2.configurationFile={_dir(settings) / 'log4j2.properties'}", main, *args]


def version() -> str:
    """The broker's version, from its jar's name (``kafka_2.13-4.1.1.jar``)."""
    jar = next((JAR_CACHE / "kafka").glob("kafka_2.13-*.jar"), None)
    return jar.stem.split("-", 1)[1] if jar else "unknown"


def _format_storage(settings: Settings) -> None:
    """Write the config and format the KRaft storage once (a formatted log dir is kept)."""
    home = _dir(settings)
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.properties").write_text(_server_properties(settings))
    (home / "log4j2.properties").write_text(_LOG4J)
    if (home / "data" / "meta.properties").exists():
        return
    cluster_id = subprocess.run(_java(settings, "kafka.tools.StorageTool", "random-uuid"),
                                check=True, capture_output=True, text=True).stdout.split()[-1]
    subprocess.run(_java(settings, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                         "-c", str(home / "server.properties"), "--standalone"),
                   check=True, capture_output=True, text=True)


def healthy(settings: Settings) -> bool:
    """True if the broker answers a metadata request."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=3000)
    except (KafkaError, OSError, ValueError):
        return False
    try:
        admin.list_topics()
        return True
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


def start(settings: Settings, timeout: float = 90) -> None:
    """Start the broker (no-op if it runs) and create the topics."""
    if processes.running_pid(settings, NAME) is None:
        processes.require_free(settings.kafka_port, "Kafka broker")
        processes.require_free(settings.kafka_controller_port, "Kafka controller")
        _format_storage(settings)
        processes.start(settings, NAME, _java(settings, "kafka.Kafka", str(_dir(settings) / "server.properties"),
                                              heap="768m"))
    processes.wait_until(lambda: healthy(settings), timeout, "Kafka broker",
                         log=processes.log_file(settings, NAME),
                         alive=lambda: processes.running_pid(settings, NAME) is not None)
    ensure_topics(settings)


def stop(settings: Settings) -> bool:
    return processes.stop(settings, NAME)


def ensure_topics(settings: Settings) -> None:
    """Create the domain's events topic and its dimensions' compacted changelog topics if missing."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(settings.topic, settings.topic_partitions, 1),
            *(NewTopic(settings.topic_of(d.topic), 1, 1, topic_configs={"cleanup.policy": "compact"})
              for d in domain(settings.domain).dimensions),
        ]
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            try:
                admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """Kafka's end offset (the next to be written) of each partition of ``topic``."""
    return _offsets(settings, topic, end=True)


def beginning_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """The oldest offset Kafka still holds in each partition of ``topic`` (retention moves it on)."""
    return _offsets(settings, topic, end=False)


def _offsets(settings: Settings, topic: str, end: bool) -> dict[int, int]:
    offsets = Offsets(settings, topic)
    try:
        return {int(p): o for p, o in offsets.fetch(oldest=not end).items()}
    finally:
        offsets.close()


class Offsets:
    """A topic's offsets, read from the broker whenever asked through one consumer kept open (it joins
    no group and reads no record)."""

    def __init__(self, settings: Settings, topic: str, timeout_ms: int = 3000):
        self._settings, self._topic, self._timeout_ms = settings, topic, timeout_ms
        self._consumer = None

    def fetch(self, oldest: bool = False) -> dict[str, int]:
        """Each partition's end offset (the next to be written), or its oldest still held; raises
        kafka-python's error if the broker does not answer in time."""
        from kafka import KafkaConsumer, TopicPartition

        if self._consumer is None:
            self._consumer = KafkaConsumer(bootstrap_servers=self._settings.kafka_bootstrap,
                                           request_timeout_ms=self._timeout_ms + 1000)
        partitions = [TopicPartition(self._topic, p) for p in sorted(self._consumer.partitions_for_topic(self._topic) or ())]
        found = (self._consumer.beginning_offsets if oldest else self._consumer.end_offsets)(partitions, self._timeout_ms)
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
