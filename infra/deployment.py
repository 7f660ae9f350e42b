"""A deployment: its settings, chosen by one environment variable, and what they resolve to.

``LAMBDALAKE_HOME`` names the folder that holds a deployment's data, checkpoints, logs and process
files (default: ``.lambdalake`` inside the checkout). An optional ``settings.json`` in that folder
overrides any field of :class:`Deployment`, so a test deployment can use other ports beside a running demo.

A :class:`Deployment` is the composition root: its settings, its domain's source, dimensions and views
(:attr:`Deployment.views`, resolved once) and where each table of the catalogue is stored
(:meth:`Deployment.table`). It is built once where a process starts (:func:`load`) and passed down; no
layer looks its views or domain up itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from infra.private_files import write_private
from views import DEFAULT_DOMAIN, all_views, domain
from views.model import View
from views.source import Changelog, Source

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Deployment:
    """One deployment: its settings (the fields; ``settings.json`` in its home sets any of them) and what
    they resolve to (its domain's views, source and dimensions; its tables' locations)."""

    home: Path
    #: Kafka: one broker, or a cluster of this many on 127.0.0.1 (each also a KRaft controller; topics,
    #: internal ones too, replicated min(brokers, 3) times with min.insync.replicas one fewer, at least 1).
    #: Broker i (from 0) listens on kafka_port + 2i and its controller on kafka_controller_port + 2i.
    kafka_brokers: int = 1
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    airflow_port: int = 8080
    airflow_user: str = "admin"
    #: None: generated on first use and kept in ``<home>/secrets`` (infra.secrets).
    airflow_password: str | None = None
    #: Where Airflow keeps its metadata: ``sqlite`` (a file in the home, the embedded default) or
    #: ``postgresql`` (a PostgreSQL cluster of the deployment's own, on 127.0.0.1 at
    #: ``airflow_database_port``, beside a system PostgreSQL's 5432; infra.postgres), which lets several
    #: of Airflow's processes write at once.
    airflow_database: str = "sqlite"
    airflow_database_port: int = 5433
    #: The domain the deployment computes over (its source, dimensions, views): a bundled one
    #: (``domains.<domain>``), an importable package, or the absolute path of a folder of its own
    #: (views.package).
    domain: str = DEFAULT_DOMAIN
    #: Prefixed to the Kafka topics the domain declares (its events', its changelogs'), to tell the
    #: deployments that share a broker apart.
    topic_prefix: str = ""
    topic_partitions: int = 3
    #: Speed layer: the shortest time between micro-batch starts (while a backlog lasts, batches run
    #: back to back and size themselves), and the most Kafka records one may take (a memory guard).
    trigger_seconds: float = 0.5
    max_offsets_per_trigger: int = 200_000
    #: The speed layer is stalled (and the watchdog restarts it) when input waits and no micro-batch
    #: has finished for 10 times its usual micro-batch, or this many seconds if longer.
    speed_stall_seconds: float = 120
    #: How often the speed layer looks for dimension changes (the products changelog).
    dimension_trigger_seconds: float = 5
    #: How late an event may come and still be counted by the speed views.
    watermark: str = "10 minutes"
    #: The watchdog announces a batched day that late events made stale once none has arrived for it
    #: this long (late_data_recompute then corrects it); while they keep coming, that DAG's hourly run
    #: corrects it. 0: at the watchdog's next check.
    late_data_quiet_minutes: float = 10
    #: Events stamped further than this in the future are dead-lettered.
    future_horizon_seconds: int = 3600
    max_payload_bytes: int = 16_384
    #: First day the nightly batch DAG covers (ISO date); written by ``lambdalake up`` if unset.
    batch_start_date: str | None = None
    spark_driver_memory: str = "2g"
    #: Where the Delta tables live: a folder, or any filesystem URI Spark's Hadoop and delta-rs both
    #: read (``file:///...``, ``s3a://bucket/prefix``, ``abfss://container@account.dfs.core.windows.net/x``;
    #: infra.storage). None: the home's ``data`` folder.
    storage: str | None = None
    #: Where Spark runs: ``local[2]`` (in each layer's own process), ``standalone`` (a master and two
    #: workers that ``lambdalake up`` starts on 127.0.0.1, infra.spark_cluster), or the ``spark://``
    #: URL of a cluster that runs elsewhere.
    spark_master: str = "local[2]"
    spark_master_port: int = 7077
    #: The batch engine (a Spark Connect server, infra.batch_engine) that Airflow's batch and
    #: maintenance tasks send their work to, on 127.0.0.1.
    batch_engine_port: int = 15002
    #: Whether a batch engine that starts first rehearses a generated day (infra.batch_engine.warm_up)
    #: before it takes tasks: 33-39 s more per start, after which the first runs find its paths compiled
    #: (a demo day's first recompute: 8.9 s without, 6.7 s with; a cold engine's first runs of the
    #: end-to-end test took about a minute more in all).
    batch_engine_warm_up: bool = True
    #: The standalone master's web UI; its workers' are the next two ports.
    spark_ui_port: int = 8090
    #: Spark settings every layer's session takes, after lambdalake's own: an object store's connector
    #: (``{"spark.hadoop.fs.s3a.endpoint": "https://...", ...}``), a cluster's. Kept as sorted pairs.
    spark_conf: tuple[tuple[str, str], ...] = ()
    #: Modules that declare a deployment's own views (one ``VIEW`` each), beside the views package.
    view_modules: tuple[str, ...] = ()
    #: The views the speed layer keeps up to date (None: all of them); the others are batch only.
    speed_views: tuple[str, ...] | None = None
    #: ``lambdalake query``: a query is stopped after this many seconds, and refused beyond this many rows.
    query_timeout_seconds: float = 30
    query_max_rows: int = 100_000
    #: A query still running after this many seconds (longer while others keep it off the cores:
    #: serving_layer.engine.FAST_LANE_CPU_SHARE) goes on in the slow lane, one at a time, leaving the
    #: cores to the short ones. With 20 clients sending runaway queries beside 8 sending point queries
    #: (bench.reliability's hostile queries, 45 s, 2 cores), the point queries' p99 was 699 ms at 1 s and
    #: 204 ms at 0.2 s (109 ms with no runaway client).
    query_fast_lane_seconds: float = 0.2
    #: The query engine (DuckDB; the CLI's, the HTTP API's) uses at most this much memory, for its copies of
    #: the views' tables and every query running at once, and this many threads; a query that would need
    #: more memory is refused (nothing spills to disk).
    query_memory_limit: str = "2GB"
    query_threads: int = 1
    #: The HTTP API and dashboard (`lambdalake serve`): where it listens, and the token it requires
    #: (off loopback a token is generated if none is set; serving_layer.api).
    serve_host: str = "127.0.0.1"
    serve_port: int = 8000
    serve_token: str | None = None
    #: Maintenance: VACUUM keeps the files of the versions this recent (Delta's default: a week), and
    #: Airflow's task logs are kept this many days.
    vacuum_retention_hours: float = 168
    log_retention_days: float = 14
    #: Each Delta table's history (its log entries: time travel's versions, DESCRIBE HISTORY) is kept
    #: this many days (Delta's default); maintenance sets it on every table.
    delta_log_retention_days: float = 30
    #: A view's batch version replaced by a reprocess can be switched back to for this many days; then
    #: maintenance deletes it (lake.versions.retire).
    version_retention_days: float = 7

    def __post_init__(self) -> None:
        for name in ("view_modules", "speed_views"):  # lists from settings.json: kept as tuples (hashable)
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if isinstance(self.spark_conf, dict):
            object.__setattr__(self, "spark_conf", tuple(sorted(self.spark_conf.items())))
        ports = [port for pair in self.kafka_ports for port in pair]
        if self.kafka_brokers < 1 or len(set(ports)) < len(ports):
            raise ValueError(
                f"kafka_brokers {self.kafka_brokers} with kafka_port {self.kafka_port} and "
                f"kafka_controller_port {self.kafka_controller_port}: expected at least 1 broker and "
                f"ports that do not meet (broker i listens on both + 2i)"
            )
        if self.airflow_database not in ("sqlite", "postgresql"):
            raise ValueError(f'airflow_database {self.airflow_database!r}: expected "sqlite" or "postgresql"')

    def topic_of(self, declared: str) -> str:
        """The deployment's name of the topic a domain declares as ``declared``."""
        return self.topic_prefix + declared

    @cached_property
    def views(self) -> dict[str, View]:
        """The deployment's views by name: its domain's and those of ``view_modules``."""
        return all_views(self.view_modules, self.domain)

    @property
    def source(self) -> Source:
        """The events the deployment's domain computes over."""
        return domain(self.domain).source

    @property
    def dimensions(self) -> tuple[Changelog, ...]:
        """The deployment's domain's dimensions."""
        return domain(self.domain).dimensions

    @property
    def topic(self) -> str:
        """The topic the domain's events come from."""
        return self.topic_of(self.source.topic)

    @property
    def kafka_ports(self) -> list[tuple[int, int]]:
        """Each broker's (client, controller) port."""
        return [(self.kafka_port + 2 * i, self.kafka_controller_port + 2 * i) for i in range(self.kafka_brokers)]

    @property
    def kafka_bootstrap(self) -> str:
        """Every broker's address, for clients (any one of them answers)."""
        return ",".join(f"127.0.0.1:{port}" for port, _ in self.kafka_ports)

    @property
    def airflow_url(self) -> str:
        return f"http://127.0.0.1:{self.airflow_port}"

    @property
    def serve_url(self) -> str:
        return f"http://{self.serve_host}:{self.serve_port}/"

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def gx(self) -> Path:
        """The Great Expectations file data context: suites, checkpoints and Data Docs."""
        return self.home / "gx"

    @property
    def data_docs(self) -> Path:
        """The index page of the Data Docs (written by the first checkpoint run)."""
        return self.gx / "uncommitted" / "data_docs" / "local_site" / "index.html"

    @property
    def checkpoints(self) -> Path:
        return self.home / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        """Pid files and other state of running processes."""
        return self.home / "run"

    @property
    def speed_health_file(self) -> Path:
        """The speed layer's health report, rewritten every few seconds while it runs."""
        return self.run / "speed-health.json"

    @property
    def storage_root(self) -> str:
        """Where the Delta tables live: the ``storage`` setting, or the home's data folder."""
        return (self.storage or str(self.data)).rstrip("/")

    def table(self, name: str) -> str:
        """Where a Delta table of the catalogue (views.tables) is stored, e.g. ``raw_events``: a path or a URI."""
        return f"{self.storage_root}/{name}"

    @property
    def spark_master_url(self) -> str:
        """The master the layers' Spark sessions connect to."""
        return f"spark://127.0.0.1:{self.spark_master_port}" if self.spark_master == "standalone" else self.spark_master

    @property
    def batch_engine_url(self) -> str:
        return f"sc://127.0.0.1:{self.batch_engine_port}"

    def with_overrides(self, **changes: Any) -> Deployment:
        return dataclasses.replace(self, **changes)

    def save(self, **changes: Any) -> Deployment:
        """Persist ``changes`` into the home's settings.json (which may hold secrets: readable by its
        owner only) and return the updated settings."""
        path = self.home / "settings.json"
        stored = json.loads(path.read_text()) if path.exists() else {}
        stored.update(changes)
        write_private(path, json.dumps(stored, indent=2) + "\n")
        return self.with_overrides(**changes)


JAR_CACHE = REPO / ".cache" / "jars"


def load(home: str | os.PathLike | None = None) -> Deployment:
    """The deployment at ``home`` (default: ``$LAMBDALAKE_HOME`` or ``<checkout>/.lambdalake``)."""
    home = Path(home or os.environ.get("LAMBDALAKE_HOME") or REPO / ".lambdalake").resolve()
    path = home / "settings.json"
    overrides = json.loads(path.read_text()) if path.exists() else {}
    known = {f.name for f in dataclasses.fields(Deployment)} - {"home"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return Deployment(home=home, **overrides)
