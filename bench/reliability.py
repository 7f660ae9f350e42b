"""Reliability: the platform's guarantees under faults at scale.

Each scenario runs on a live deployment whose producer runs through the fault. Every scenario counts
what it lost; the target is 0. The kill storm, broker kill and orchestrator kill run twice: on the
embedded topology (one broker, Airflow's metadata in SQLite) and on the production one (three brokers,
replication factor 3 and `min.insync.replicas` 2; Airflow's metadata in PostgreSQL), each by its
settings.

- **Kill storm:** the speed layer killed with `kill -9` at random moments (a uniform 1-10 s after it
  came back) while a backlog of the full event mix (late, resent and malformed ones among them) is
  produced, and restarted each time as `lambdalake up` starts it. Then every Kafka record must be
  landed in raw_events or dead-lettered exactly once (checked by partition and offset), and, once
  the batch layer has recomputed every day, every view must equal the independent oracle
  (`tests/oracle.py`) exactly.
- **Broker kill:** the (first) broker killed with `kill -9` while valid events are produced (each with an
  id of its own), then started again 5 s later; the speed layer's watchdog (`services.watch_speed`,
  what the watchdog DAG runs) polled every 10 s meanwhile. Every record the producer saw acknowledged
  must be in raw_events, and every record in the topic landed once. On three brokers, nothing may
  stop: every record is acknowledged and the speed layer goes on in the same process.
- **Batch kill:** a day's recompute sent to the batch engine as the nightly task sends it, the engine
  killed with `kill -9` at a random moment of it (uniform over an unkilled run's time: during the
  reads, the quality checks, the Delta commits or the ledger write), brought back by its watchdog
  (`batch_engine.watch`) and the task rerun, each time after more events of the day landed. Each
  rerun must converge to the oracle's rows, and a reader polling every merged view meanwhile must
  see each view's day as it was or as it became, never a mix.
- **Orchestrator kill:** a backfill of batch_recompute through `POST /api/v2/backfills` (what the UI's
  dialog calls) on a running batch engine; Airflow's scheduler and API server killed together with
  `kill -9` at random moments of it (a uniform 5-20 s after they came back) and started again as
  `lambdalake up` starts them (nothing else restarts them: the watchdog is an Airflow DAG). Then every
  run must end in success (none left queued or running), nothing the dead schedulers forked may be
  left running, the ledger must record each view's day once, and every view must equal the oracle.
- **Hostile input:** records broken in each of the ways listed in ``KINDS``, mixed with valid
  events: every record in the topic landed or dead-lettered exactly once, the valid ones landed, the
  speed layer never restarted. A record of 10 MB, over Kafka's 1 MB limit, is refused when sent and never reaches
  the topic; the refusals are counted.
- **Soak:** the whole platform (speed layer, batch engine, Airflow with every DAG on, the HTTP API)
  for `--soak-minutes` under the freshness load's full mix (`bench/live.py`) at a steady rate, with
  the nightly run and a maintenance run along the way and 8 clients (in a process of their own) each
  sending a point query of the last minute through `POST /query` every 100 ms, and a monitor calling
  `GET /health` (the speed layer's report, dead letters, each view's days) every 30 s; freshness markers
  are sent throughout. Per 5 minutes: the speed layer's and the API's resident memory (and what the
  speed views' state and the API's query engine hold of it), raw_events' and speed_partials' files (in
  their current version), the checkpoints' size on disk, freshness and point-query latency.
- **Hostile queries:** clients sending queries that would run for long, take much memory or reach
  outside the sandbox through `POST /query`, while 8 others (in a process of their own) send point
  queries back to back: each bad query must be stopped or refused with a one-line error, the server
  must stay up, and the point queries' p99 is reported against 50 ms and against the same clients'
  alone (the baseline, run just before the bad clients start).
"""

from __future__ import annotations

import collections
import json
import math
import multiprocessing
import multiprocessing.synchronize
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psutil
import urllib3

from batch_layer import day_task
from bench import live
from domains.clickstream import generator
from domains.sample import Mix
from infra import airflow, batch_engine, kafka, processes, producer, services
from infra import spark as sparks
from infra.deployment import Deployment
from infra.processes import Say
from infra.producer import Record
from serving_layer import engine
from views import timebase

#: Events per second a scenario's producer sends (in one chunk a second): 1,000,000 take 400 s.
SEND_RATE = 2_500
#: The DAG the orchestrator kill backfills, its days and how many times Airflow is killed during it.
BACKFILLED, BACKFILL_DAYS, ORCHESTRATOR_KILLS = "batch_recompute", 10, 3
#: Seconds between two polls of the speed layer's watchdog during the broker kill.
WATCH_EVERY = 10
#: Seconds the hostile-query clients run; before them, the point clients run alone (the baseline) for
#: a third of that.
QUERY_SECONDS = 90
BAD_CLIENTS, POINT_CLIENTS = 20, 8
#: The soak's figures are given per this many seconds; each of its clients sends a query this often.
SOAK_WINDOW, SOAK_QUERY_EVERY = 300, 0.1
#: Seconds between the soak monitor's calls of the HTTP API's ``/health``, from the start as a
#: deployment's monitoring polls it.
SOAK_HEALTH_EVERY = 30


@dataclass
class Landing:
    """The topic's records against what the speed layer wrote, counted by partition and offset."""

    produced: int
    landed: int
    dead: int
    #: Records written more than once (to raw_events or dead_letters), and records written nowhere.
    repeated: int
    lost: int


@dataclass
class Storm:
    events: int
    kills: int
    restart_seconds: list[float]
    landing: Landing
    #: Per view: rows that differ from the oracle's (missing, extra or with other measures), of its rows.
    differing: dict[str, tuple[int, int]]


@dataclass
class BrokerKill:
    sent: int
    acknowledged: int
    #: Acknowledged records not in raw_events.
    lost: int
    landing: Landing
    watchdog: list[str]
    #: Whether the speed layer ran in another process at the end (restarted by its watchdog).
    speed_restarted: bool


@dataclass
class BatchRound:
    #: Seconds into the task when the engine was killed, and the task's last error line ("" if it had
    #: finished first).
    killed_at: float
    error: str
    back_seconds: float
    #: The rerun's last error line ("" if it succeeded), and whether its rows then equalled the oracle's.
    rerun_error: str
    converged: bool
    snapshots: int
    #: Snapshots in which some view's day was neither as before the round nor as after it.
    mixed: int


@dataclass
class BatchKill:
    events_per_round: int
    task_seconds: float
    rounds: list[BatchRound]


@dataclass
class OrchestratorKill:
    days: int
    events_per_day: int
    #: Seconds into the backfill at each kill, and the seconds ``lambdalake up``'s start of Airflow took then.
    killed_at: list[float]
    back_seconds: list[float]
    #: Seconds from the backfill's call to every run's end; its runs' states then (run id -> state).
    seconds: float
    states: dict[str, str]
    #: Task tries beyond each run's first (the killed ones, rerun); processes of a dead scheduler left running.
    reruns: int
    leftovers: int
    #: (view, day) pairs the ledger records more than once, and not at all.
    recorded_twice: int
    unrecorded: int
    differing: dict[str, tuple[int, int]]

    @property
    def stuck(self) -> int:
        """Runs not ended in success."""
        return sum(state != "success" for state in self.states.values())


@dataclass
class Kills:
    """The kill scenarios' figures on one topology (its name and settings)."""

    topology: str
    #: The kill storm's deployment (its tables stay for the hostile queries).
    deployment: Deployment
    storm: Storm
    broker: BrokerKill
    orchestrator: OrchestratorKill


@dataclass
class Hostile:
    records: int
    kinds: int
    refused_by_broker: int
    landing: Landing
    valid_landed: int
    valid: int
    speed_restarts: int


@dataclass
class SoakWindow:
    """The soak's figures as a window of :data:`SOAK_WINDOW` ends."""

    minute: float
    speed_mb: int
    #: Of the speed layer's memory, what its views' state takes in its database (its health report), MB.
    state_mb: float
    serving_mb: int
    #: Of the HTTP API's memory, what its query engine holds (the tables' copies, the views' parts), MB.
    engine_mb: float
    raw_events_files: int
    speed_partials_files: int
    checkpoints_mb: float
    #: Per relation, each marker's seconds to show.
    freshness: dict[str, list[float]]
    points_ms: list[float]
    point_errors: int
    #: The monitor's calls of ``/health`` in the window, and how many of them failed.
    health_checks: int
    health_errors: int


@dataclass
class Soak:
    rate: float
    windows: list[SoakWindow]
    #: The DAG runs during the soak: (DAG, run id, state).
    runs: list[tuple[str, str, str]]


@dataclass
class Queries:
    #: Per bad query: its name -> (times sent, outcomes: one-line HTTP error detail -> count).
    bad: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    #: Seconds each point query took beside the bad clients, and alone (before they started).
    points: list[float] = field(default_factory=list)
    alone: list[float] = field(default_factory=list)
    #: Point queries that were not answered: outcome (HTTP status and its one-line error) -> count.
    point_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    server_up: bool = True


def _landing(settings: Deployment) -> Landing:
    _, [(landed, distinct_landed, dead, distinct_dead)] = engine.query(
        settings,
        (
            "SELECT (SELECT count(*) FROM raw_events), "
            '(SELECT count(DISTINCT ("partition", "offset")) FROM raw_events), '
            '(SELECT count(*) FROM dead_letters), (SELECT count(DISTINCT ("partition", "offset")) FROM dead_letters)'
        ),
    )
    produced = sum(kafka.end_offsets(settings, settings.topic).values())
    return Landing(
        produced,
        landed,
        dead,
        landed - distinct_landed + dead - distinct_dead,
        produced - distinct_landed - distinct_dead,
    )


def _chunks(records: list[Record]):
    """``records`` in order, one chunk of :data:`SEND_RATE` a second."""
    for start in range(0, len(records), SEND_RATE):
        yield records[start : start + SEND_RATE]
        time.sleep(1)


def _send(settings: Deployment, records: list[Record]) -> None:
    for chunk in _chunks(records):
        producer.send(settings, chunk)


def _running_pid(settings: Deployment, name: str) -> int:
    """The pid of service ``name``, which must be running."""
    pid = processes.running_pid(settings, name)
    if pid is None:
        raise processes.ServiceError(f"{name} is not running")
    return pid


def _kill_speed(settings: Deployment) -> None:
    pid = _running_pid(settings, services.SPEED)
    group = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    os.killpg(pid, signal.SIGKILL)
    psutil.wait_procs(group, timeout=30)


def _differing(settings: Deployment, records: list[Record]) -> dict[str, tuple[int, int]]:
    """Per view, its merged rows that differ from the oracle's, and the oracle's row count."""
    from tests import oracle
    from tests.compare import assert_measures, merged_rows

    expected, found = oracle.views(records), {}
    for view in settings.views.values():
        want, got = expected[view.name], merged_rows(settings, view)
        wrong = len(want.keys() ^ got.keys())
        for key in want.keys() & got.keys():
            try:
                assert_measures(view, got[key], want[key], key)
            except AssertionError:
                wrong += 1
        found[view.name] = (wrong, len(want))
    return found


def _recompute_all(settings: Deployment, records: list[Record]) -> None:
    """The batch layer's recompute of every day the records' events fall on."""
    from batch_layer.recompute import recompute_day

    days = set()
    for record in records:
        try:
            days.add(datetime.fromisoformat(record.event()["event_time"]).date())
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    spark = sparks.session(settings, "lambdalake-bench-reliability")
    for day in sorted(days):
        recompute_day(spark, settings, timebase.day_start(day), timebase.day_start(day) + timebase.DAY)


def kill_storm(settings: Deployment, events: int, kills: int, say: Say) -> Storm:
    now = datetime.now(UTC)
    records = generator.generate(now - timedelta(hours=2), now, events, seed=31, shaped=False)
    services.start_speed(settings)
    sender = threading.Thread(target=_send, args=(settings, records), daemon=True)
    sender.start()
    rng, restarts = random.Random(7), []
    for kill in range(kills):
        time.sleep(rng.uniform(1, 10))
        _kill_speed(settings)
        began = time.monotonic()
        services.start_speed(settings)
        restarts.append(time.monotonic() - began)
        say(f"  kill {kill + 1}: back in {restarts[-1]:.1f} s")
    sender.join()
    services.wait_for_landing(settings, timeout=1800)
    landing = _landing(settings)
    services.stop_speed(settings)
    say("  the batch layer's recompute of every day, then each view against the oracle ...")
    _recompute_all(settings, records)
    storm = Storm(len(records), kills, restarts, landing, _differing(settings, records))
    say(f"  {landing}; rows differing from the oracle: {storm.differing}")
    return storm


def broker_kill(settings: Deployment, broker: Deployment, events: int, say: Say) -> BrokerKill:
    now = datetime.now(UTC)
    records = generator.generate(
        now - timedelta(minutes=8), now, events, seed=32, shaped=False, mix=Mix(late=0, duplicate=0, malformed=0)
    )
    services.start_speed(settings)
    speed, victim = processes.running_pid(settings, services.SPEED), kafka.nodes(broker)[0]
    acked: list[Record] = []

    def send() -> None:
        for chunk in _chunks(records):
            try:
                errors = producer.publish(settings, ((r.key, r.value, None) for r in chunk), settings.topic)
            except ValueError:  # no broker to send to: the chunk is not acknowledged
                continue
            acked.extend(r for r, error in zip(chunk, errors, strict=True) if error is None)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(len(records) / SEND_RATE / 3)
    say(f"  kill -9 of broker {victim.name} ...")
    os.kill(_running_pid(broker, victim.name), signal.SIGKILL)
    time.sleep(5)
    kafka.start(broker)
    watchdog = []
    while sender.is_alive():
        watchdog.append(services.watch_speed(settings))
        sender.join(WATCH_EVERY)
    watchdog.append(services.watch_speed(settings))
    services.wait_for_landing(settings, timeout=900)
    ids = {r.event()["event_id"] for r in acked}
    _, [(found,)] = engine.query(
        settings,
        "SELECT count(DISTINCT event_id) FROM raw_events WHERE event_id IN (SELECT unnest($ids))",
        {"ids": sorted(ids)},
    )
    landing, restarted = _landing(settings), processes.running_pid(settings, services.SPEED) != speed
    services.stop_speed(settings)
    say(f"  {len(acked):,} of {len(records):,} acknowledged, {len(ids) - found:,} of them missing; {landing}")
    return BrokerKill(
        len(records), len(acked), len(ids) - found, landing, [w for w in watchdog if w != "healthy"], restarted
    )


def _finished(task) -> str:
    """Wait for a task process: the last line of its errors ("" if it succeeded)."""
    _, errors = task.communicate(timeout=900)
    return (errors.strip().splitlines() or ["failed"])[-1] if task.returncode else ""


def batch_kill(settings: Deployment, kills: int, events: int, say: Say) -> BatchKill:
    from speed_layer.queries import ensure_tables
    from tests import oracle
    from tests.compare import day_measures, merged_rows, same_days
    from tests.integration.records import land

    day = timebase.day_start(datetime.now(UTC).date() - 2 * timebase.DAY)
    views = settings.views
    spark = sparks.session(settings, "lambdalake-bench-batch-kill")
    ensure_tables(spark, settings)
    batch_engine.start(settings)
    records, rng, rounds = [], random.Random(11), []

    def landed(seed: int) -> dict:
        """Land another ``events`` of the day (and around it); each view's day as the oracle has it then."""
        more = generator.generate(day - timebase.DAY, day + 2 * timebase.DAY, events, seed=seed)
        land(spark, settings, more)
        records.extend(more)
        expected = oracle.views(records)
        return {name: day_measures(view, expected[name], day) for name, view in views.items()}

    def merged() -> dict:
        return {name: day_measures(view, merged_rows(settings, view), day) for name, view in views.items()}

    def read(seen: list[dict], reading: threading.Event) -> None:
        while not reading.is_set():
            seen.append(merged())

    landed(40)
    began = time.monotonic()
    if error := _finished(day_task.start(settings, day)):
        raise RuntimeError(f"the batch kill's first recompute failed: {error}")
    duration, before = time.monotonic() - began, merged()
    try:
        for kill in range(kills):
            new, reading = landed(41 + kill), threading.Event()
            seen: list[dict] = []  # the merged views, as each read of them found them
            reader = threading.Thread(target=read, args=(seen, reading))
            reader.start()
            task, at = day_task.start(settings, day), rng.uniform(0, duration)
            time.sleep(at)
            os.kill(_running_pid(settings, batch_engine.NAME), signal.SIGKILL)
            error, began = _finished(task), time.monotonic()
            batch_engine.watch(settings)
            back = time.monotonic() - began
            rerun = _finished(day_task.start(settings, day))
            reading.set()
            reader.join()
            after = merged()
            wrong = [name for name in views if not same_days(after[name], new[name])]
            rounds.append(
                BatchRound(
                    at,
                    error,
                    back,
                    rerun,
                    not rerun and not wrong,
                    len(seen),
                    sum(any(not (same_days(s[n], before[n]) or same_days(s[n], new[n])) for n in views) for s in seen),
                )
            )
            say(
                f"  kill {kill + 1} at {at:.1f} s: {error or 'the task had finished'}; the rerun: "
                f"{rerun or 'succeeded'}; views unlike the oracle's: {', '.join(wrong) or 'none'}"
            )
            before = after
    finally:
        batch_engine.stop(settings)
    return BatchKill(events, duration, rounds)


def orchestrator_kill(settings: Deployment, days: int, kills: int, events: int, say: Say) -> OrchestratorKill:
    from speed_layer.queries import ensure_tables
    from tests.integration.records import land

    today = datetime.now(UTC).date()
    settings = settings.save(batch_start_date=today.isoformat())  # no scheduled run beside the backfill's
    first = timebase.day_start(today - days * timebase.DAY)
    records = generator.generate(first, timebase.day_start(today), events * days, seed=33)
    spark = sparks.session(settings, "lambdalake-bench-orchestrator-kill")
    ensure_tables(spark, settings)
    land(spark, settings, records)
    batch_engine.start(settings)
    services.start_airflow(settings)
    client, rng = airflow.AirflowClient(settings), random.Random(13)
    killed_at, back, leftovers = [], [], 0
    try:
        client.wait_for_dag(BACKFILLED)
        began = time.monotonic()
        client.create_backfill(BACKFILLED, first, timebase.day_start(today - timebase.DAY))
        client.unpause(BACKFILLED)
        for kill in range(kills):
            time.sleep(rng.uniform(5, 20))
            forked = psutil.Process(_running_pid(settings, airflow.SCHEDULER)).children(recursive=True)
            for name in (airflow.SCHEDULER, airflow.API_SERVER):
                os.kill(_running_pid(settings, name), signal.SIGKILL)
            killed_at.append(time.monotonic() - began)
            services.start_airflow(settings)
            back.append(time.monotonic() - began - killed_at[-1])
            leftovers += sum(proc.is_running() for proc in forked)
            say(f"  kill {kill + 1} at {killed_at[-1]:.0f} s: Airflow back in {back[-1]:.1f} s")
        try:
            client.wait_for_runs(BACKFILLED, days, timeout=1800)
        except airflow.AirflowError as exc:
            say(f"  {exc}")
        seconds = time.monotonic() - began
        states = {run.run_id: run.state for run in client.dag_runs(BACKFILLED)}
        reruns = sum(task.try_number - 1 for run_id in states for task in client.task_runs(BACKFILLED, run_id))
    finally:
        airflow.stop(settings)
        batch_engine.stop(settings)
    recorded = collections.Counter(engine.query(settings, "SELECT view, day FROM serving_state")[1])
    every = {(name, (first + d * timebase.DAY).date()) for name in settings.views for d in range(days)}
    found = OrchestratorKill(
        days,
        events,
        killed_at,
        back,
        seconds,
        states,
        reruns,
        leftovers,
        sum(n > 1 for n in recorded.values()),
        len(every - set(recorded)),
        _differing(settings, records),
    )
    say(
        f"  {found.stuck} of {len(states)} runs stuck, {reruns} tasks rerun, ledger: {found.recorded_twice} "
        f"recorded twice, {found.unrecorded} missing; differing from the oracle: {found.differing}"
    )
    return found


def _resident_mb(pid: int | None) -> int:
    """A process's and its children's resident memory, MB."""
    if pid is None:
        return 0
    process = psutil.Process(pid)
    return round(sum(p.memory_info().rss for p in (process, *process.children(recursive=True))) / 2**20)


def _point_clients(
    url: str,
    stop: multiprocessing.synchronize.Event,
    found: multiprocessing.Queue,
    every: float,
    keys: list[tuple[str, datetime]] | None,
) -> None:
    """:data:`POINT_CLIENTS` threads each sending point queries of page_views_per_minute to ``url`` until
    ``stop``, one every ``every`` seconds (0: back to back): of a (page, minute) drawn from ``keys``, or of
    a page's last minute if None. Each query's (its end, seconds since the epoch; milliseconds; outcome,
    :func:`_outcome`) is put on ``found``. Run in a process of their own (:func:`_clients_apart`)."""

    def client(seed: int) -> None:
        rng, connection = random.Random(seed), _client(url)
        while not stop.wait(every):
            if keys is None:
                page = rng.choice(generator.PAGES)
                minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
            else:
                page, minute = rng.choice(keys)
            sql = (
                f"SELECT views FROM page_views_per_minute WHERE page = '{page}' "
                f"AND window_start = TIMESTAMPTZ '{minute.isoformat()}'"
            )
            began = time.perf_counter()
            outcome = _outcome(connection, url, sql)
            found.put((time.time(), (time.perf_counter() - began) * 1000, outcome))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(POINT_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@contextmanager
def _clients_apart(
    url: str, every: float, keys: list[tuple[str, datetime]] | None = None
) -> Iterator[Callable[[], list[tuple[float, float, str]]]]:
    """:func:`_point_clients` of ``url`` in a process of their own until the block ends; a function giving
    what they found so far. In the harness's process they would wait for its Python lock behind what
    else it runs (the freshness pollers' query engine, the bad clients): a probe's p99 31-36 ms apart,
    40 ms beside a fold. A thread takes what they put as it comes, so that none waits in the pipe."""
    context = multiprocessing.get_context("spawn")
    stop, queue = context.Event(), context.Queue()
    found: list[tuple[float, float, str]] = []

    def take() -> None:
        for item in iter(queue.get, None):
            found.append(item)

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    process = context.Process(target=_point_clients, args=(url, stop, queue, every, keys), daemon=True)
    process.start()
    try:
        yield lambda: found[:]
    finally:
        stop.set()
        process.join()  # what it put is in the pipe by now, before the end put next
        queue.put(None)
        taker.join()
    if process.exitcode:
        raise RuntimeError(f"the point clients' process failed (exit code {process.exitcode})")


def _monitor(settings: Deployment, stop: threading.Event, found: list) -> threading.Thread:
    """A thread calling ``/health`` every :data:`SOAK_HEALTH_EVERY` seconds until ``stop``, appending (its
    end, seconds since the epoch; the query engine's memory in MB, or None if the call failed) to ``found``."""

    def monitor() -> None:
        url = settings.serve_url + "health"
        connection = _client(url)
        while True:
            try:
                response = connection.request("GET", url, timeout=60)
                held = response.json()["query_engine"]["memory_mb"] if response.status == 200 else None
            except (urllib3.exceptions.HTTPError, ValueError, KeyError):
                held = None
            found.append((time.time(), held))
            if stop.wait(SOAK_HEALTH_EVERY):
                return

    thread = threading.Thread(target=monitor, daemon=True)
    thread.start()
    return thread


def _files(settings: Deployment, table: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(settings.table(table)).file_uris())


def _disk_mb(path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def soak(settings: Deployment, rate: float, minutes: int, say: Say) -> Soak:
    """The platform under load for ``minutes`` at ``rate`` events/s (:class:`Soak`)."""
    today = datetime.now(UTC).date()
    settings = settings.save(batch_start_date=(today - timebase.DAY).isoformat())
    try:
        return _soaked(settings, rate, minutes, say)
    finally:
        services.down(settings)


def _soaked(settings: Deployment, rate: float, minutes: int, say: Say) -> Soak:
    """:func:`soak`, the platform started (and left running). The whole load is generated before it
    starts: generated during the soak, 5 minutes ahead, the load took up to half a core from the platform
    it measures (its records take 480 bytes each: 6 GB at 6,750 events/s for 30 minutes)."""
    for start in (services.start_speed, batch_engine.start, services.start_airflow, services.start_serving):
        start(settings)
    client = airflow.AirflowClient(settings)
    windows, per_window = minutes * 60 // SOAK_WINDOW, (SOAK_WINDOW - live.MARKER_TIMEOUT) // live.PER_MARKER
    live.marker_products(settings, range(windows * per_window))
    run = live.load(settings, rate, live.WARM_UP + windows * SOAK_WINDOW, seed=50, users=live.USERS)
    stop, found = threading.Event(), []
    checks: list[tuple[float, float | None]] = []  # (end, seconds since the epoch; engine MB or None)
    with _clients_apart(settings.serve_url + "query", SOAK_QUERY_EVERY) as points:
        try:
            run.begin()
            client.unpause_all()  # the nightly run of yesterday starts now (the deployment's start date)
            monitor = _monitor(settings, stop, checks)
            time.sleep(live.WARM_UP)
            began = time.time()
            for k in range(windows):
                if k == 1:
                    client.trigger("maintenance", datetime.now(UTC))
                end = began + (k + 1) * SOAK_WINDOW
                seen, _ = live.markers_seen(
                    settings, range(k * per_window, (k + 1) * per_window), live.RELATIONS, end - live.MARKER_TIMEOUT
                )
                time.sleep(max(0.0, end - time.time()))
                window = [(ms, outcome == ANSWERED) for at, ms, outcome in points() if end - SOAK_WINDOW <= at < end]
                health = [held for at, held in checks if end - SOAK_WINDOW <= at < end]
                speed = services.speed_health(settings)
                found.append(
                    SoakWindow(
                        (end - began) / 60,
                        _resident_mb(processes.running_pid(settings, services.SPEED)),
                        speed.state["bytes"] / 2**20 if speed and speed.state else math.nan,
                        _resident_mb(processes.running_pid(settings, services.SERVING)),
                        next((held for held in reversed(health) if held is not None), math.nan),
                        _files(settings, "raw_events"),
                        _files(settings, "speed_partials"),
                        _disk_mb(settings.checkpoints),
                        seen,
                        [ms for ms, _ in window],
                        sum(not ok for _, ok in window),
                        len(health),
                        health.count(None),
                    )
                )
                last = found[-1]
                say(
                    f"  minute {last.minute:.0f}: speed {last.speed_mb:,} MB, API {last.serving_mb:,} MB, "
                    f"freshness p99 {live.percentile([t for v in seen.values() for t in v], 0.99):.1f} s, "
                    f"point p99 {live.percentile(last.points_ms, 0.99):.0f} ms"
                )
        finally:
            stop.set()
            run.stop()
    monitor.join()
    runs = [(dag, r.run_id, r.state) for dag in ("batch_recompute", "maintenance") for r in client.dag_runs(dag)]
    return Soak(rate, found, runs)


#: The one kind whose records keep the id of the valid event they were made from.
SAME_ID = "same id, other body"


def _kinds() -> dict[str, Callable[[dict], bytes]]:
    """Ways to break a valid event (a dict) into a record's bytes; each is a malformation the speed
    layer must dead-letter, or (schema drift, duplicates) land as its rules say."""

    def dumps(event) -> bytes:
        return json.dumps(event).encode()

    def with_(**changes):
        return lambda e: dumps({**e, **changes})

    def without(name):
        return lambda e: dumps({k: v for k, v in e.items() if k != name})

    def nested(e):
        return ('{"a":' * 5000 + "1" + "}" * 5000).encode()

    return {
        "random bytes": lambda e: random.Random(e["event_id"]).randbytes(200),
        "invalid UTF-8": lambda e: dumps(e).replace(b'"page_view"', b'"page_\xff\xfeview"'),
        "truncated JSON": lambda e: dumps(e)[:-7],
        "JSON array": lambda e: dumps([e]),
        "JSON scalar": lambda e: b"42",
        "JSON null": lambda e: b"null",
        "empty value": lambda e: b"",
        "deep nesting": nested,
        "oversized (64 KB)": with_(page="x" * 2**16),
        "NaN number": lambda e: dumps(e)[:-1] + b', "amount": NaN}',
        "infinite number": lambda e: dumps(e)[:-1] + b', "amount": Infinity}',
        "far-future time": with_(event_time="9999-12-31T23:59:59Z"),
        "pre-1970 time": with_(event_time="1969-07-20T20:17:00Z"),
        "time as a number": with_(event_time=1_700_000_000),
        "bad time string": with_(event_time="2026-13-45T99:00:00Z"),
        "missing event_id": without("event_id"),
        "missing event_type": without("event_type"),
        "null user_id": with_(user_id=None),
        "retyped user_id": with_(user_id=[1, 2]),
        "unknown event_type": with_(event_type="teleport"),
        "bad quantity": with_(event_type="purchase", product_id="p1", quantity="many", amount=1),
        "NUL bytes": lambda e: dumps(e).replace(b'"page_view"', b'"page\\u0000view"'),
        "byte-order mark": lambda e: b"\xef\xbb\xbf" + dumps(e),
        "duplicate keys": lambda e: dumps(e)[:-1] + b', "event_type": 7}',
        "new field (schema drift)": with_(referrer={"host": "example.com"}),
        SAME_ID: with_(page="/elsewhere"),
    }


KINDS = tuple(_kinds())


def _renamed(record: Record, kind: str, event_id: str) -> dict:
    """The record's event, with an id of its own unless ``kind`` is :data:`SAME_ID`."""
    event = record.event()
    return event if kind == SAME_ID else {**event, "event_id": event_id}


def hostile_input(settings: Deployment, per_kind: int, say: Say) -> Hostile:
    """``per_kind`` records broken in each of :data:`KINDS` ways, each from a valid page view of its own
    that is sent too, among as many other valid events."""
    now = datetime.now(UTC)
    valid = generator.generate(
        now - timedelta(minutes=8),
        now,
        2 * per_kind * len(KINDS),
        seed=33,
        shaped=False,
        mix=Mix(late=0, duplicate=0, malformed=0),
    )
    page_views = [r for r in valid if r.event()["event_type"] == "page_view"]
    broken = [
        Record(good.send_at, good.key, brk(_renamed(good, name, f"broken-{i}-{j}")), "malformed")
        for i, (name, brk) in enumerate(_kinds().items())
        for j, good in enumerate(page_views[(i * per_kind + j) % len(page_views)] for j in range(per_kind))
    ]
    mixed = sorted(valid + broken, key=lambda r: r.send_at)
    services.start_speed(settings)
    pid = processes.running_pid(settings, services.SPEED)
    _send(settings, mixed)
    big = producer.publish(settings, [(b"big", b"x" * 10 * 2**20, None)], settings.topic)
    services.wait_for_landing(settings, timeout=900)
    _, [(landed_valid,)] = engine.query(
        settings,
        "SELECT count(DISTINCT event_id) FROM raw_events WHERE event_id IN (SELECT unnest($ids))",
        {"ids": [r.event()["event_id"] for r in valid]},
    )
    restarts = int(processes.running_pid(settings, services.SPEED) != pid)
    landing = _landing(settings)
    services.stop_speed(settings)
    say(
        f"  {len(mixed):,} records, {len(KINDS)} kinds of malformation; valid landed {landed_valid:,} of "
        f"{len(valid):,}; {landing}"
    )
    return Hostile(
        len(mixed), len(KINDS), sum(error is not None for error in big), landing, landed_valid, len(valid), restarts
    )


#: Queries a hostile client sends: each must be stopped or refused in one line.
BAD_QUERIES = {
    "a cross join of three views": "SELECT count(*) FROM page_views_per_minute a, page_views_per_minute b, "
    "page_views_per_minute c",
    "a trillion-row range": "SELECT sum(range) FROM range(1000000000000)",
    "an endless recursive CTE": "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
    "SELECT count(*) FROM t",
    "a memory-hungry aggregate": "SELECT list(repeat('x', 1000)) FROM range(100000000)",
    "deeply nested parentheses": "SELECT " + "(" * 100_000 + "1" + ")" * 100_000,
    "deeply nested calls": "SELECT " + "abs(" * 900 + "-1" + ")" * 900,
    "a file read": "SELECT * FROM read_csv('/etc/passwd')",
    "a setting read": "SELECT current_setting('memory_limit')",
    "two statements": "SELECT 1; SELECT 2",
}


#: The outcome of a query that was answered.
ANSWERED = "200: answered"


def _client(url: str) -> urllib3.HTTPConnectionPool:
    """A client's connection to the HTTP API's ``url``, kept open from one request to the next, with no
    retry (as ``requests`` keeps it). urllib3, which ``requests`` is built on: a query costs the client
    0.9 ms of CPU, against 1.7 ms through ``requests`` (a probe against a local server); 8 clients
    querying back to back, some 350 queries a second, took 0.6 of the 2 cores the API answers them on."""
    return urllib3.connection_from_url(
        url, maxsize=1, retries=urllib3.Retry(0, read=False), timeout=2 * Deployment.query_timeout_seconds
    )


def _outcome(client: urllib3.HTTPConnectionPool, url: str, sql: str) -> str:
    """``sql`` sent to the HTTP API at ``url`` by ``client`` (:func:`_client`): :data:`ANSWERED`, or the
    HTTP status and its one-line error, or what kept the answer from coming (within twice the API's
    time limit)."""
    try:
        response = client.request("POST", url, json={"sql": sql})
    except urllib3.exceptions.MaxRetryError as exc:  # what it gave up on: a refused connection, a timeout
        return f"no answer: {type(exc.reason or exc).__name__}"
    except urllib3.exceptions.HTTPError as exc:
        return f"no answer: {type(exc).__name__}"
    if response.status == 200:
        return ANSWERED
    try:
        return f"{response.status}: {response.json().get('detail', '')}"
    except ValueError:  # not the API's one-line error: what the server said instead, counted as such
        return f"{response.status}, not JSON: {' '.join(response.data.decode(errors='replace').split())[:80]}"


def hostile_queries(settings: Deployment, say: Say) -> Queries:
    """:data:`POINT_CLIENTS` clients sending point queries of one page's minute back to back, alone for a
    third of :data:`QUERY_SECONDS`, then beside :data:`BAD_CLIENTS` clients cycling through
    :data:`BAD_QUERIES` for :data:`QUERY_SECONDS`."""
    services.start_serving(settings)
    url = settings.serve_url + "query"
    _, keys = engine.query(settings, "SELECT page, window_start FROM page_views_per_minute LIMIT 1000")
    result, lock = Queries(), threading.Lock()

    def answered(found: list[tuple[float, float, str]]) -> list[float]:
        """The seconds each point query took; those not answered counted in ``result``."""
        result.point_errors.update(outcome for _, _, outcome in found if outcome != ANSWERED)
        return [ms / 1000 for _, ms, _ in found]

    with _clients_apart(url, 0, keys) as points:
        time.sleep(QUERY_SECONDS / 3)
    result.alone = answered(points())
    stop = time.monotonic() + QUERY_SECONDS

    def bad(client: int) -> None:
        names, connection = list(BAD_QUERIES), _client(url)
        for n in range(client, 10**9):
            if time.monotonic() > stop:
                return
            name = names[n % len(names)]
            outcome = _outcome(connection, url, BAD_QUERIES[name])
            with lock:
                sent, outcomes = result.bad.get(name, (0, {}))
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                result.bad[name] = (sent + 1, outcomes)

    threads = [threading.Thread(target=bad, args=(i,)) for i in range(BAD_CLIENTS)]
    with _clients_apart(url, 0, keys) as points:
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            result.server_up &= services.serving_healthy(settings)
            time.sleep(2)
    result.points = answered(points())
    say(
        f"  {sum(s for s, _ in result.bad.values()):,} bad queries, {len(result.points):,} point queries beside "
        f"them, {len(result.alone):,} alone before"
    )
    processes.stop(settings, services.SERVING)
    return result
