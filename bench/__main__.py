"""``python -m bench`` (``make bench``): measure the speed layer against a bare Structured Streaming
job, the serving layer against Spark SQL, the batch layer against a plain Spark SQL job, and the
batch layer's runs through Airflow against the same work in a warm session, and rewrite their parts
of BENCHMARKS.md."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import bare_stream, batch, live, orchestrated, parse, reliability, report, serving, throughput
from domains.clickstream import generator
from domains.sample import counts
from infra import kafka, processes, producer
from infra.deployment import REPO, Deployment
from infra.processes import Say
from lambdalake.cli import Parser

#: The benchmark's own ports, beside a demo (9092, 8080) and the tests (19092, 18080).
PORTS = {
    "kafka_port": 29092,
    "kafka_controller_port": 29093,
    "airflow_port": 28080,
    "batch_engine_port": 28002,
    "serve_port": 28000,
}
#: Timed runs of each parse in the parse micro-benchmark.
PARSE_RUNS = 5
#: The soak's rate when this run measured no steady rate (half the highest steady rate, otherwise).
SOAK_RATE = 2_500


def _count(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _parser() -> Parser:
    parser = Parser(prog="python -m bench", description=__doc__)
    parser.add_argument("--events", type=_count, default=1_000_000, help="events in the backlog (default 1000000)")
    parser.add_argument("--runs", type=_count, default=3, help="drains of the backlog per job (default 3)")
    parser.add_argument(
        "--steady-seconds", type=_count, default=300, help="seconds per steady rate tried (default 300)"
    )
    parser.add_argument("--markers", type=_count, default=100, help="freshness markers per run (default 100)")
    parser.add_argument(
        "--parse-records", type=_count, default=500_000, help="records of the parse micro-benchmark (default 500000)"
    )
    parser.add_argument(
        "--serving-events",
        type=_count,
        default=1_000_000,
        help="events over the serving part's month (default 1000000)",
    )
    parser.add_argument(
        "--batch-events",
        type=_count,
        default=1_000_000,
        help="events of the batch part's day, N; its growth days have 2N and 4N (default 1000000)",
    )
    parser.add_argument(
        "--batch-runs",
        type=_count,
        default=3,
        help="timed runs per job on the batch part's day of N events (default 3)",
    )
    parser.add_argument(
        "--day-events",
        type=_count,
        default=3000,
        help="events per day of the orchestrated part's nightly run and backfill (default 3000, the demo's)",
    )
    parser.add_argument(
        "--storm-events",
        type=_count,
        default=1_000_000,
        help="events produced during the reliability part's kill storm (default 1000000)",
    )
    parser.add_argument(
        "--kills",
        type=_count,
        default=20,
        help="kill -9 of the speed layer in the storm, and half as many of the batch engine (default 20)",
    )
    parser.add_argument(
        "--hostile-records",
        type=_count,
        default=100_000,
        help="malformed records of the reliability part's hostile input (default 100000)",
    )
    parser.add_argument(
        "--soak-minutes", type=_count, default=30, help="minutes of the reliability part's soak (default 30)"
    )
    parser.add_argument(
        "--soak-rate",
        type=_count,
        help="events/s of the soak (default: half the highest steady rate of this run's speed part, "
        f"or {SOAK_RATE:,} without one)",
    )
    parser.add_argument("--only", choices=tuple(report.PARTS), help="run only this part, keeping the others' figures")
    return parser


def _command(argv: list[str]) -> str:
    if os.environ.get("MAKELEVEL") and not argv:
        return "make bench"
    return shlex.join(["PYTHONPATH=.", os.path.relpath(sys.executable, REPO), "-m", "bench", *argv])


def _deployment(root: Path, name: str, **settings) -> Deployment:
    return Deployment(home=root / name).save(**PORTS, **settings)


def _backlog(settings: Deployment, events: int, say: Say) -> int:
    now = datetime.now(UTC)
    records = generator.generate(now - timedelta(hours=1), now, events)
    say(f"producing a backlog of {len(records):,} events: {counts(records)}")
    sent = producer.send(settings, records)
    total = sum(kafka.end_offsets(settings, settings.topic).values())
    if sent != len(records) or total != sent:
        raise RuntimeError(f"produced {len(records)} records, {sent} acknowledged, {total} in the topic")
    return total


def _drains(root: Path, total: int, runs: int, say: Say) -> dict[str, list[throughput.Drain]]:
    drains: dict[str, list[throughput.Drain]] = {job: [] for job in throughput.JOBS}
    for run in range(runs):
        for job in throughput.JOBS:
            settings = _deployment(
                root,
                f"run{run}-{throughput.JOBS.index(job)}",
                **({"speed_views": []} if job == throughput.JOBS[1] else {}),
            )
            drain = throughput.bare(settings, total) if job == throughput.JOBS[0] else throughput.speed(settings, total)
            say(f"run {run + 1}, {job}: {total / drain.seconds:,.0f} events/s ({drain.seconds:.1f} s)")
            drains[job].append(drain)
            shutil.rmtree(settings.data, ignore_errors=True)
    settings = _deployment(root, "profiled")
    say("one more drain, its live heap measured at each quarter, for the steps table ...")
    drains["profiled"] = [throughput.speed(settings, total, live_heap=True)]
    return drains


def _live(root: Path, rates: list[float], seconds: int, markers: int, say: Say) -> tuple[list[live.Fresh], list]:
    """Freshness of the bare stream and of the speed layer at 1,000 events/s, the steady rates, and
    freshness at half the highest steady rate kept up with (on a deployment of its own: in an hour the
    steady runs filled with users, one more user rarely moves a HyperLogLog estimate of them)."""
    bare = _deployment(root, "bare-live", topic_prefix="bare-live-")
    kafka.ensure_topics(bare)
    say(f"freshness of the bare stream: {markers} markers over a steady {live.FRESH_RATE:,} events/s ...")
    with bare_stream.running(bare):
        fresh = [live.freshness(bare, markers, live.FRESH_RATE, relations=("raw_events",))]
    with _speed_layer(root, "live") as settings:
        say(f"freshness of the speed layer: {markers} markers over a steady {live.FRESH_RATE:,} events/s ...")
        fresh.append(live.freshness(settings, markers, live.FRESH_RATE))
        steady = []
        for i, rate in enumerate(rates):
            say(f"steady: {rate:,.0f} events/s for {seconds} s ...")
            steady.append(live.steady(settings, rate, seconds, seed=10 + i))
            say(
                f"  kept up: {steady[-1].kept_up} (processed {steady[-1].processed_per_second:,.0f} of "
                f"{steady[-1].produced_per_second:,.0f} events/s, lag at the end {steady[-1].lag_at_end:,.0f})"
            )
            if not steady[-1].kept_up:
                break
    kept = [s.rate for s in steady if s.kept_up]
    if kept:
        with _speed_layer(root, "live-half") as settings:
            say(f"freshness of the speed layer: {markers} markers over a steady {max(kept) / 2:,.0f} events/s ...")
            fresh.append(live.freshness(settings, markers, max(kept) / 2, first=markers))
    return fresh, steady


@contextmanager
def _speed_layer(root: Path, name: str) -> Iterator[Deployment]:
    """A deployment ``name`` of its own topics, its speed layer running while the block runs."""
    from infra import services

    settings = _deployment(root, name, topic_prefix=f"{name}-")
    kafka.ensure_topics(settings)
    services.start_speed(settings)
    try:
        yield settings
    finally:
        services.stop_speed(settings)


#: The topologies the kill scenarios run on: a name and its settings.
TOPOLOGIES = {
    "one broker, Airflow on SQLite": {},
    "three brokers, Airflow on PostgreSQL": {"kafka_brokers": 3, "airflow_database": "postgresql"},
}


def _kills(args, root: Path, topology: str, say: Say) -> reliability.Kills:
    """The kill scenarios on ``topology`` (:data:`TOPOLOGIES`), in deployments under ``root`` (their
    broker's is ``root / "broker"``, stopped after them)."""
    chosen = TOPOLOGIES[topology]
    broker = _deployment(root, "broker", **chosen)
    say(f"{topology}: starting Kafka on {broker.kafka_bootstrap} ...")
    kafka.start(broker)
    try:
        storm, broker_kill = (
            _deployment(root, name, **chosen, topic_prefix=f"{name}-") for name in ("storm", "broker-kill")
        )
        for scenario in (storm, broker_kill):
            kafka.ensure_topics(scenario)
        say(
            f"{topology}: kill storm, {args.kills} x kill -9 of the speed layer during {args.storm_events:,} events ..."
        )
        stormed = reliability.kill_storm(storm, args.storm_events, args.kills, say)
        say(f"{topology}: broker kill ...")
        killed = reliability.broker_kill(broker_kill, broker, args.storm_events // 10, say)
    finally:
        kafka.stop(broker)
    say(f"{topology}: orchestrator kill ...")
    orchestrator = reliability.orchestrator_kill(
        _deployment(root, "orchestrator-kill", **chosen),
        reliability.BACKFILL_DAYS,
        reliability.ORCHESTRATOR_KILLS,
        args.day_events,
        say,
    )
    return reliability.Kills(topology, storm, stormed, killed, orchestrator)


def _reliability(args, root: Path, soak_rate: float, say: Say):
    """The reliability part's scenarios: the kill scenarios on each topology, the others on the first's
    broker (started again)."""
    root.chmod(0o711)  # PostgreSQL runs as its own user when the bench runs as root (infra.postgres)
    kills = [_kills(args, root / f"topology-{n}", topology, say) for n, topology in enumerate(TOPOLOGIES)]
    say(f"batch kill: {args.kills // 2} x kill -9 of the batch engine mid-recompute ...")
    batch_killed = reliability.batch_kill(_deployment(root, "batch-kill"), args.kills // 2, args.day_events, say)
    say("hostile queries ...")
    queries = reliability.hostile_queries(kills[0].deployment, say)
    broker = _deployment(root / "topology-0", "broker")
    kafka.start(broker)
    try:
        say("hostile input ...")
        malformed = _deployment(root, "hostile", topic_prefix="hostile-")
        kafka.ensure_topics(malformed)
        hostile = reliability.hostile_input(malformed, args.hostile_records // len(reliability.KINDS), say)
        say(f"soak: {args.soak_minutes} minutes at {soak_rate:,.0f} events/s ...")
        soaked = _deployment(root, "soak", topic_prefix="soak-")
        kafka.ensure_topics(soaked)
        soak = reliability.soak(soaked, soak_rate, args.soak_minutes, say)
        return kills, batch_killed, hostile, queries, soak
    finally:
        kafka.stop(broker)


def _speed(args, root: Path, say: Say):
    """The speed part's figures: drains of a backlog, freshness, steady rates and the parse alone."""
    broker = _deployment(root, "broker")
    try:
        say(f"starting Kafka on {broker.kafka_bootstrap} (under {root}) ...")
        kafka.start(broker)
        total = _backlog(broker, args.events, say)
        drains = _drains(root, total, args.runs, say)
        full = throughput.median_rate(total, drains[throughput.JOBS[2]])
        rates = [round(full * share, -2) for share in live.STEADY_SHARES]
        fresh, steady = _live(root, rates, args.steady_seconds, args.markers, say)
    finally:
        kafka.stop(broker)
    say(f"the parse alone, {args.parse_records:,} records ...")
    parsed = parse.measure(_deployment(root, "parse"), args.parse_records, PARSE_RUNS)
    return total, drains, fresh, steady, parsed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    parts = report.read()
    root = Path(tempfile.mkdtemp(prefix="lambdalake-bench-"))
    soak_rate = args.soak_rate or SOAK_RATE
    figures: tuple  # a part's measurements, what its render function takes first
    try:
        for part in [args.only] if args.only else report.PARTS:
            date, began = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), time.monotonic()
            if part == "speed":
                figures = _speed(args, root, say)
                kept = [s.rate for s in figures[3] if s.kept_up]
                soak_rate = args.soak_rate or (max(kept) / 2 if kept else SOAK_RATE)
            elif part == "serving":
                figures = serving.run(_deployment(root, "serving"), args.serving_events, say)
            elif part == "reliability":
                figures = _reliability(args, root, soak_rate, say)
            elif part == "orchestrated":
                figures = orchestrated.run(_deployment(root, "orchestrated"), args.day_events, say)
            else:
                figures = batch.run(
                    _deployment(root, "batch"), _deployment(root, "batch-late"), args.batch_events, args.batch_runs, say
                )
            parts[part] = report.RENDERS[part](*figures, _command(argv), date, (time.monotonic() - began) / 60)
            report.write(parts)
            say(f"wrote the {part} part of {report.REPORT.relative_to(REPO)}")
    except (processes.ServiceError, RuntimeError, TimeoutError) as exc:
        print(f"bench: error: {exc}\nbench: the deployments, with their logs, are kept in {root}", file=sys.stderr)
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
