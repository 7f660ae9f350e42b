"""BENCHMARKS.md: each part of ``python -m bench`` (speed, serving, batch, orchestrated, reliability)
rendered from its figures, with the command, the date and the machine that produced them."""

from __future__ import annotations

import collections
import os
import platform
import statistics
from collections.abc import Callable
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path

from bench import batch, live, orchestrated, parse, reliability, serving, throughput
from bench.batch import BATCH_RATIO
from bench.live import FRESH_RATE, STEADY_SHARES
from bench.throughput import JOBS
from infra import kafka
from infra.deployment import REPO, Deployment
from serving_layer import engine

REPORT = REPO / "BENCHMARKS.md"
#: The report's parts, each from its first heading to the next part's; ``--only`` rewrites one, keeping the other.
PARTS = {
    "speed": "## Throughput: draining a backlog",
    "serving": "## Serving",
    "batch": "## Batch",
    "orchestrated": "## Airflow: a nightly run and a backfill",
    "reliability": "## Reliability",
}
HEADER = (
    "# Benchmarks\n\nWritten by `make bench` (`bench/`): every figure of a part (speed, serving, batch, "
    "orchestrated, reliability) comes "
    "from one run, stated at its end, each against a baseline measured in the same run.\n"
)


def render(
    total: int,
    drains: dict[str, list[throughput.Drain]],
    fresh: list[live.Fresh],
    steady: list[live.Steady],
    parsed: dict[str, list[float]],
    command: str,
    date: str,
    minutes: float,
) -> str:
    baseline = throughput.median_rate(total, drains[JOBS[0]])
    ratios = {job: throughput.median_rate(total, drains[job]) / baseline for job in JOBS}
    rows = [
        f"| {job} | {throughput.median_rate(total, drains[job]):,.0f} | "
        f"{', '.join(f'{total / d.seconds:,.0f}' for d in drains[job])} | {ratios[job]:.2f} |"
        for job in JOBS
    ]
    full, [profiled] = drains[JOBS[2]], drains["profiled"]
    memory = " · ".join(
        f"run {i + 1}: {' → '.join(f'{m:,.0f}' for m in d.memory_mb.values())} MB" for i, d in enumerate(full)
    )
    steps = profiled.steps
    spent = sum(steps.values())
    step_rows = [
        f"| {step} | {seconds:,.1f} | {seconds / spent:.0%} |"
        for step, seconds in sorted(steps.items(), key=lambda kv: -kv[1])
    ]
    drain_rate = throughput.median_rate(total, full)
    return "\n".join(
        [
            PARTS["speed"],
            "",
            _doc(throughput),
            "",
            f"Backlog: {total:,} records. Events/s: median of {len(full)} drains (each drain listed).",
            "",
            "| job | events/s | drains | ratio to baseline |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Memory of the speed layer (driver and JVM, resident; the JVM's heap capped at `spark_driver_memory`, "
            f"{Deployment.spark_driver_memory}) at each quarter of the drain with all views: {memory}. "
            f"Its live heap (in use right after a full collection, forced at each quarter of the profiled drain "
            f"below): {' → '.join(f'{m:,.0f}' for m in profiled.live_heap_mb)} MB.",
            "",
            "### Where a micro-batch's time goes",
            "",
            f"One more drain with all views (four full collections, for its live heap; "
            f"{total / profiled.seconds:,.0f} events/s, not counted above): seconds per step over the whole drain, "
            f"from the health report's steps of each micro-batch seen ({profiled.batches} micro-batches). The "
            f"dead_letters, late_events and speed_partials commits overlap in time, and so do the views (two at "
            f"a time).",
            "",
            "| step | seconds | share |",
            "|---|---|---|",
            *step_rows,
            "",
            *_render_parse(parsed),
            "",
            "## Steady rate",
            "",
            _doc(live).split("- **Steady rate:**")[0].strip(),
            "",
            "- **Steady rate:**" + _doc(live).split("- **Steady rate:**")[1].split("- **Freshness:**")[0].rstrip(),
            "",
            f"Rates tried: {', '.join(f'{share:g}' for share in STEADY_SHARES)} times the median drain rate with every "
            f"view ({drain_rate:,.0f} events/s), in this order, up to the first not kept up with.",
            "",
            "| input events/s | produced events/s | processed events/s | processed / produced | lag at the end | "
            "kept up |",
            "|---|---|---|---|---|---|",
            *(
                f"| {s.rate:,.0f} | {s.produced_per_second:,.0f} | {s.processed_per_second:,.0f} | "
                f"{s.processed_per_second / s.produced_per_second:.1%} | {s.lag_at_end:,.0f} "
                f"({s.lag_at_end / s.rate:,.1f} s of input) | {'yes' if s.kept_up else 'no'} |"
                for s in steady
            ),
            "",
            _highest(steady),
            "",
            *_render_freshness(fresh),
            "",
            *_render_targets(ratios, full, fresh, steady, drain_rate),
            "",
            "## Run",
            "",
            *_run(command, date, minutes),
            "",
        ]
    )


def _render_parse(parsed: dict[str, list[float]]) -> list[str]:
    median = {name: statistics.median(runs) for name, runs in parsed.items()}
    base = median[parse.BASELINE]
    return [
        "### The parse alone",
        "",
        _doc(parse),
        "",
        "| parse | seconds, median | runs | ratio to baseline |",
        "|---|---|---|---|",
        *(
            f"| {name} | {median[name]:,.2f} | {', '.join(f'{r:,.2f}' for r in runs)} | {median[name] / base:.2f} |"
            for name, runs in parsed.items()
        ),
    ]


def _views_worst(run: live.Fresh, share: float) -> float:
    """The slowest view's percentile ``share`` of a freshness run (raw_events left out)."""
    return max(live.percentile(times, share) for name, times in run.seconds.items() if name != "raw_events")


def _render_freshness(fresh: list[live.Fresh]) -> list[str]:
    floor, *speed = fresh
    titles = [f"bare stream, {floor.rate:,.0f} events/s", *(f"speed layer, {run.rate:,.0f} events/s" for run in speed)]
    rows = [
        f"| {title} | {name} | {len(times)} | {_p(times, 0.5)} | {_p(times, 0.95)} | {_p(times, 0.99)} | "
        f"{sum(t == float('inf') for t in times)} |"
        for title, run in zip(titles, fresh, strict=True)
        for name, times in run.seconds.items()
    ]
    batches = speed[0].batches
    records, seconds = [r for r, _ in batches], [s for _, s in batches]
    return [
        "## Freshness",
        "",
        "- **Freshness:**" + _doc(live).split("- **Freshness:**")[1].rstrip(),
        "",
        "| run | polled | markers | p50 s | p95 s | p99 s | not seen in 30 s |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"The speed layer's micro-batches with input during its markers at {speed[0].rate:,.0f} events/s: "
        f"{len(batches)}, of {statistics.median(records):,.0f} records (median; most {max(records):,}), "
        f"each taking {statistics.median(seconds):.2f} s (median; p95 {live.percentile(seconds, 0.95):.2f} s, "
        f"from its start to its end in Spark's progress reports)."
        if batches
        else "The speed layer reported no micro-batch with input during its markers.",
    ]


def _render_targets(
    ratios: dict[str, float],
    full: list[throughput.Drain],
    fresh: list[live.Fresh],
    steady: list[live.Steady],
    drain_rate: float,
) -> list[str]:
    floor, at_rate, *at_half = fresh
    p50, p99 = _views_worst(at_rate, 0.5), _views_worst(at_rate, 0.99)
    base50, base99 = (live.percentile(floor.seconds["raw_events"], share) for share in (0.5, 0.99))
    small = [s for r, s in at_rate.batches if r <= 1000]
    small_median = statistics.median(small) if small else float("inf")
    kept = max((s.rate for s in steady if s.kept_up), default=0)
    growth = max(d.memory_mb[4] / d.memory_mb[min(q for q in d.memory_mb if q >= 2)] - 1 for d in full)
    half = _views_worst(at_half[0], 0.99) if at_half else float("inf")
    targets = [
        (f"freshness p50 at {FRESH_RATE:,} events/s, slowest view", f"{p50:.2f} s", "≤ 1.0 s", p50 <= 1.0),
        (f"freshness p99 at {FRESH_RATE:,} events/s, slowest view", f"{p99:.2f} s", "≤ 2.0 s", p99 <= 2.0),
        (
            "freshness against the bare stream's (its raw_events), p50 and p99",
            f"{p50 / base50:.2f}x and {p99 / base99:.2f}x ({base50:.2f} s, {base99:.2f} s)",
            "≤ 1.3x",
            max(p50 / base50, p99 / base99) <= 1.3,
        ),
        (
            "freshness p99 at half the highest steady rate, slowest view",
            f"{half:.2f} s" if at_half else "not measured: no rate kept up with",
            "≤ 5 s",
            half <= 5,
        ),
        (
            f"a micro-batch of ≤ 1,000 events with all six views (median, at {FRESH_RATE:,} events/s)",
            f"{small_median:.2f} s ({len(small)} micro-batches)",
            "≤ 0.6 s",
            small_median <= 0.6,
        ),
        ("landing + six views against the bare stream", f"{ratios[JOBS[2]]:.2f}x", "≥ 0.7x", ratios[JOBS[2]] >= 0.7),
        ("landing alone against the bare stream", f"{ratios[JOBS[1]]:.2f}x", "≥ 0.9x", ratios[JOBS[1]] >= 0.9),
        (
            "highest steady rate against the drain rate with all views",
            f"{kept / drain_rate:.2f}x ({kept:,.0f} events/s)",
            "≥ 0.8x",
            kept / drain_rate >= 0.8,
        ),
        (
            "memory over the second half of a drain with all views (the most it grew)",
            f"{growth:+.0%}",
            "within 10%",
            abs(growth) <= 0.1,
        ),
    ]
    return [
        "## Targets",
        "",
        "The speed layer's targets, each from the figures above.",
        "",
        "| measure | figure | target | |",
        "|---|---|---|---|",
        *(f"| {measure} | {figure} | {target} | {_met(ok)} |" for measure, figure, target, ok in targets),
    ]


def _highest(steady: list[live.Steady]) -> str:
    """The highest steady rate kept up with, and the first rate tried above it that was not."""
    kept, missed = [s.rate for s in steady if s.kept_up], [s.rate for s in steady if not s.kept_up]
    if not kept:
        return f"No rate tried was kept up with, not even the first, {min(missed):,.0f} events/s."
    found = f"Highest steady rate kept up with: {max(kept):,.0f} events/s"
    if missed:
        return f"{found}; the next rate tried, {min(missed):,.0f} events/s, was not."
    return f"{found}, the highest rate tried: the true maximum may be higher."


def render_serving(
    data: serving.Data,
    results: dict[str, serving.Result],
    queries: serving.Queries,
    checks: dict[str, list[float]],
    writes: serving.Writes,
    command: str,
    date: str,
    minutes: float,
) -> str:
    ours, base = (results[name] for name in serving.RUNNERS)
    rows = []
    for kind, target in (("point", 10), ("range", 100)):
        for share in (0.5, 0.95):
            fast, slow = (live.percentile(r.latency_ms[kind], share) for r in (ours, base))
            aim = f"≤ {target}: {'met' if fast <= target else 'not met'}" if kind == "range" or share == 0.5 else ""
            rows.append(
                f"| {kind} query, p{share * 100:.0f} ms | {fast:,.1f} | {slow:,.1f} | {slow / fast:,.1f} | {aim} |"
            )
    rows += [
        f"| the sandbox check of a {kind} query alone (part of the above), p50 ms | "
        f"{statistics.median(times):,.2f} | | | |"
        for kind, times in checks.items()
    ]
    fast, slow = ours.queries_per_second, base.queries_per_second
    rows.append(
        f"| {serving.CLIENTS} clients, point queries/s | {fast:,.0f} | {slow:,.1f} | {fast / slow:,.1f} | "
        f"≥ 200: {'met' if fast >= 200 else 'not met'} |"
    )
    quiet = ours.latency_ms["point"]
    written = [
        f"{name} {writes.committed[name]:,} "
        + ("(read in place)" if name in engine.SCANNED else f"({writes.copied[name]:,} copied by the engine)")
        for name in serving.WRITTEN
    ]
    return "\n".join(
        [
            PARTS["serving"],
            "",
            _doc(serving),
            "",
            f"Data: {data.events:,} events over {data.start:%Y-%m-%d} .. {data.end - timedelta(days=1):%Y-%m-%d}; "
            f"page_views_per_minute holds {data.batch_rows:,} final (batch) rows of those days and {data.speed_rows:,} "
            f"speed rows. Building it took {data.build_seconds / 60:.1f} min, not counted below. Per runner: "
            f"{len(queries.warm):,} queries to warm it, then {len(queries.points)} point queries, "
            f"{len(queries.ranges)} range queries (one per page) and {serving.CLIENTS} clients for "
            f"{serving.SECONDS} s. The first of each timed:",
            "",
            "```sql",
            queries.points[0],
            queries.ranges[0],
            "```",
            "",
            f"| measure | {' | '.join(serving.RUNNERS)} | times faster | target |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "### Under writes",
            "",
            f"{len(writes.latency_ms):,} point queries over {writes.seconds:,.0f} s, one every "
            f"{serving.WRITES_EVERY * 1000:.0f} ms, while the speed layer committed micro-batches of "
            f"{serving.BATCH_EVENTS:,} events; the serving layer's figures without writes from the table above.",
            "",
            "| point query | serving layer | serving layer, under writes |",
            "|---|---|---|",
            *(
                f"| p{share * 100:.0f} ms | {live.percentile(quiet, share):,.1f} | "
                f"{live.percentile(writes.latency_ms, share):,.1f} |"
                for share in (0.5, 0.99)
            ),
            "",
            f"New table versions committed while the queries ran: {', '.join(written)}.",
            "",
            "### Run",
            "",
            *_run(command, date, minutes),
            "",
        ]
    )


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def render_batch(days: list[batch.Day], late: batch.Late, command: str, date: str, minutes: float) -> str:
    first = days[0]
    median = {job: statistics.median(times) for job, times in first.seconds.items()}
    ratio = {job: seconds / median[batch.BASELINE] for job, seconds in median.items()}
    target = {batch.BATCH: f"≤ {BATCH_RATIO}: {_met(ratio[batch.BATCH] <= BATCH_RATIO)}"}
    rows = [
        f"| {job} | {median[job]:,.1f} | {', '.join(f'{s:,.1f}' for s in times)} | {ratio[job]:.2f} | "
        f"{target.get(job, '')} |"
        for job, times in first.seconds.items()
    ]
    growth = [
        (day.events, *(statistics.median(day.seconds[job]) for job in (batch.BATCH, batch.BASELINE))) for day in days
    ]
    growth_rows = [
        f"| {events:,} | {ours:,.1f} | {base:,.1f} | {ours / base:.2f} | {ours / events * 1e6:,.1f} | "
        f"{base / events * 1e6:,.1f} | ≤ {BATCH_RATIO}: {_met(ours / base <= BATCH_RATIO)} |"
        for events, ours, base in growth
    ]
    (n, ours_n, base_n), (most, ours_most, base_most) = growth[0], growth[-1]
    stale = ", ".join(map(str, late.stale))
    return "\n".join(
        [
            PARTS["batch"],
            "",
            _doc(batch),
            "",
            f"Ratio: a day ({first.day}) of {first.events:,} events; seconds per recompute, median of "
            f"{len(first.seconds[batch.BATCH])} timed runs (each listed).",
            "",
            "| job | seconds | runs | ratio to baseline | target |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Growth: seconds per recompute of a day (at the first size the median above, then one run).",
            "",
            "| events in the day | batch layer s | baseline s | ratio | batch layer s per million events | "
            "baseline s per million events | target |",
            "|---|---|---|---|---|---|---|",
            *growth_rows,
            "",
            f"From {n:,} to {most:,} events ({most / n:.0f}x), the batch layer's time grew "
            f"{ours_most / ours_n:.1f}x and the baseline's {base_most / base_n:.1f}x.",
            "",
            f"Late event: {len(late.days)} days held ({late.days[0]} .. {late.days[-1]}), {late.events:,} events each; "
            f"the late event is a page view of {late.days[-1]} at 23:30.",
            "",
            "| job | days recomputed | seconds |",
            "|---|---|---|",
            f"| full rebuild: `recompute_day` over every day held | {len(late.days)} | {late.rebuild_seconds:,.1f} |",
            f"| correcting one late event: `stale_days`, then `recompute_day` per run of stale days | "
            f"{len(late.stale)} ({stale}) | {late.correction_seconds:,.1f} |",
            "",
            f"The correction took {late.correction_seconds / late.rebuild_seconds:.2f} of the rebuild's time.",
            "",
            "### Run",
            "",
            *_run(command, date, minutes),
            "",
        ]
    )


def render_orchestrated(runs: orchestrated.Runs, command: str, date: str, minutes: float) -> str:
    warm = statistics.median(runs.warm_recompute)
    tasks = runs.backfill_tasks
    first, last = runs.engine_after_first, runs.engine_after_backfill
    growth = last.idle / first.idle - 1
    return "\n".join(
        [
            PARTS["orchestrated"],
            "",
            _doc(orchestrated),
            "",
            f"Days of {runs.events:,} events; {runs.runs_in_flight} runs in flight at most.",
            "",
            "| measure | seconds | against | target |",
            "|---|---|---|---|",
            f"| nightly run: task start to success | {runs.nightly_task:,.1f} | warm `recompute_day` "
            f"{warm:,.1f} s ({runs.nightly_task / warm:.1f}x; runs "
            f"{', '.join(f'{t:,.1f}' for t in runs.warm_recompute)}) "
            f"| ≤ 10: {_met(runs.nightly_task <= 10)} |",
            f"| nightly run: due to success | {runs.nightly_due_to_success:,.1f} | | ≤ 20: "
            f"{_met(runs.nightly_due_to_success <= 20)} |",
            f"| backfill of {runs.backfill_days} days: `POST /api/v2/backfills` to every run's success | "
            f"{runs.backfill:,.1f} | {runs.backfill_days} x warm `recompute_day` one after another: "
            f"{runs.backfill_days * warm:,.0f} s | ≤ 300: {_met(runs.backfill <= 300)} |",
            f"| a backfill run's task: median (max) | {statistics.median(tasks):,.1f} ({max(tasks):,.1f}) | | |",
            "",
            "| engine memory, MB | after the nightly run | after the backfill | growth | target |",
            "|---|---|---|---|---|",
            f"| resident, as the last run ends | {first.busy:,} | {last.busy:,} | "
            f"{last.busy / first.busy - 1:+.0%} | |",
            f"| resident, after {orchestrated.IDLE} s without work | {first.idle:,} | {last.idle:,} | {growth:+.0%} | "
            f"within 20%: {_met(abs(growth) <= 0.2)} |",
            f"| live heap | {first.live:,.0f} | {last.live:,.0f} | {last.live / first.live - 1:+.0%} | |",
            "",
            "### Run",
            "",
            *_run(command, date, minutes),
            "",
        ]
    )


def _lost(landing: reliability.Landing) -> str:
    return (
        f"{landing.produced:,} records in the topic: {landing.landed:,} landed, {landing.dead:,} dead-lettered, "
        f"{landing.repeated:,} written twice, {landing.lost:,} written nowhere"
    )


def _render_soak(soak: reliability.Soak) -> list[str]:
    first, last = soak.windows[0], soak.windows[-1]
    fresh = [[t for v in w.freshness.values() for t in v] for w in soak.windows]
    rows = [
        f"| {w.minute:.0f} | {w.speed_mb:,} ({w.state_mb:,.0f}) | {w.serving_mb:,} ({w.engine_mb:,.0f}) | "
        f"{w.raw_events_files:,} | "
        f"{w.speed_partials_files:,} | {w.checkpoints_mb:,.1f} | {_p(seen, 0.5)} / {_p(seen, 0.99)} | "
        f"{live.percentile(w.points_ms, 0.5):,.1f} / {live.percentile(w.points_ms, 0.99):,.1f} | {w.point_errors} | "
        f"{w.health_errors} of {w.health_checks} |"
        for w, seen in zip(soak.windows, fresh, strict=True)
    ]
    growth = {name: getattr(last, name) / getattr(first, name) - 1 for name in ("speed_mb", "serving_mb")}
    runs = "; ".join(f"{dag} {run_id}: {state}" for dag, run_id, state in soak.runs) or "none"
    return [
        f"Soak at {soak.rate:,.0f} events/s. Freshness is over every marker and relation of the window (p50 / p99, "
        f"seconds); point queries p50 / p99 in ms.",
        "",
        "| minute | speed layer MB (its state's) | HTTP API MB (its query engine's) | raw_events files | "
        "speed_partials files | checkpoints MB | "
        "freshness s | point query ms | failed queries | failed /health calls |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"After the first {reliability.SOAK_WINDOW // 60} minutes, the speed layer's memory grew "
        f"{growth['speed_mb']:+.0%} and the HTTP API's {growth['serving_mb']:+.0%} (target < 10%: "
        f"{_met(max(growth.values()) < 0.1)}); what the speed views' state holds went from {first.state_mb:,.0f} to "
        f"{last.state_mb:,.0f} MB, what the API's query engine holds from {first.engine_mb:,.0f} to "
        f"{last.engine_mb:,.0f} MB. DAG runs meanwhile: {runs}.",
    ]


def _kill_rows(kills: reliability.Kills) -> list[str]:
    """The kill scenarios' rows of one topology."""
    storm, broker, orchestrator, on = kills.storm, kills.broker, kills.orchestrator, kills.topology
    differing = sum(wrong for wrong, _ in storm.differing.values())
    restarts = storm.restart_seconds
    wrong = sum(wrong for wrong, _ in orchestrator.differing.values())
    orchestrator_lost = (
        orchestrator.stuck + orchestrator.leftovers + orchestrator.recorded_twice + orchestrator.unrecorded + wrong
    )
    states = collections.Counter(orchestrator.states.values())
    return [
        f"| {on} | kill storm | {storm.kills} x `kill -9` of the speed layer while {storm.events:,} records were "
        f"produced; back each time in {statistics.median(restarts):.1f} s (median; most {max(restarts):.1f} s) | "
        f"{_lost(storm.landing)}; after batch, rows differing from the oracle: {_views(storm.differing)} | "
        f"{storm.landing.lost + storm.landing.repeated + differing} |",
        f"| {on} | broker kill | `kill -9` of a broker while {broker.sent:,} records were sent, then started again; "
        f"the watchdog said: {'; '.join(broker.watchdog) or 'healthy throughout'}; the speed layer "
        f"{'was restarted' if broker.speed_restarted else 'went on in the same process'} | {broker.acknowledged:,} "
        f"acknowledged, {broker.lost:,} of them missing from raw_events; {_lost(broker.landing)} | "
        f"{broker.lost + broker.landing.lost + broker.landing.repeated} |",
        f"| {on} | orchestrator kill | a backfill of {orchestrator.days} days of {orchestrator.events_per_day:,} "
        f"events; {len(orchestrator.killed_at)} x `kill -9` of Airflow's scheduler and API server, at "
        f"{', '.join(f'{t:.0f}' for t in orchestrator.killed_at)} s, each started again as `lambdalake up` does "
        f"(in {statistics.median(orchestrator.back_seconds):.1f} s, median); {orchestrator.seconds:.0f} s from the "
        f"call to every run's end; {orchestrator.reruns} tasks rerun | runs: "
        f"{', '.join(f'{n} {state}' for state, n in states.items())}; processes of a dead scheduler left running: "
        f"{orchestrator.leftovers}; the ledger's (view, day) recorded twice {orchestrator.recorded_twice}, never "
        f"{orchestrator.unrecorded}; rows differing from the oracle: {_views(orchestrator.differing)} | "
        f"{orchestrator_lost} |",
    ]


def _views(differing: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{name} {wrong} of {rows:,}" for name, (wrong, rows) in differing.items())


def _failed(errors: collections.Counter[str]) -> str:
    """Point queries that failed, with their outcomes."""
    causes = "; ".join(f"{n} `{outcome}`" for outcome, n in errors.most_common())
    return f"{errors.total()} point queries failed" + (f" ({causes})" if causes else "")


def _ms(seconds: list[float], q: float) -> str:
    return f"{live.percentile(seconds, q) * 1000:,.1f} ms"


def render_reliability(
    kills: list[reliability.Kills],
    batch_kill: reliability.BatchKill,
    hostile: reliability.Hostile,
    queries: reliability.Queries,
    soak: reliability.Soak,
    command: str,
    date: str,
    minutes: float,
) -> str:
    rounds = batch_kill.rounds
    errors = sorted({r.error for r in rounds if r.error})
    points = queries.points
    outcomes = [
        f"| {name} | {sent:,} | " + "; ".join(f"{n:,} x {outcome}" for outcome, n in found.items()) + " |"
        for name, (sent, found) in queries.bad.items()
    ]
    embedded = kills[0].topology
    return "\n".join(
        [
            PARTS["reliability"],
            "",
            _doc(reliability),
            "",
            "The kill scenarios run on each topology; the batch kill (the engine and the tables alone) and the "
            f"hostile input, hostile queries and soak run on the first, {embedded}.",
            "",
            "| on | scenario | what was done | what was checked | lost |",
            "|---|---|---|---|---|",
            *(row for each in kills for row in _kill_rows(each)),
            f"| {embedded} | batch kill | {len(rounds)} x `kill -9` of the batch engine at a random moment of a day's "
            f"recompute (an unkilled one took {batch_kill.task_seconds:.1f} s; killed at "
            f"{', '.join(f'{r.killed_at:.1f}' for r in rounds)} s), {batch_kill.events_per_round:,} more events of the "
            f"day landed before each; tasks that failed in one line: {sum(bool(r.error) for r in rounds)} (the others "
            f"had finished); the engine back in {statistics.median(r.back_seconds for r in rounds):.1f} s (median) | "
            f"reruns that converged to the oracle: {sum(r.converged for r in rounds)} of {len(rounds)}; reader "
            f"snapshots with a view's day half-replaced: {sum(r.mixed for r in rounds)} of "
            f"{sum(r.snapshots for r in rounds):,} | "
            f"{sum(not r.converged for r in rounds) + sum(r.mixed for r in rounds)} |",
            f"| {embedded} | hostile input | {hostile.records:,} records, {hostile.kinds} kinds of malformation among "
            f"valid events; a 10 MB record refused when sent: {hostile.refused_by_broker} of 1 | "
            f"{_lost(hostile.landing)}; "
            f"valid events landed {hostile.valid_landed:,} of {hostile.valid:,}; speed layer restarts "
            f"{hostile.speed_restarts} | "
            f"{hostile.landing.lost + hostile.landing.repeated + hostile.valid - hostile.valid_landed} |",
            "",
            f"The batch kill's failed tasks said: {' / '.join(f'`{e}`' for e in errors) or 'nothing'}; its reruns "
            f"that failed: {' / '.join(f'`{r.rerun_error}`' for r in rounds if r.rerun_error) or 'none'}.",
            "",
            f"Hostile queries: {reliability.BAD_CLIENTS} clients sending the queries below for "
            f"{reliability.QUERY_SECONDS} s through `POST /query` while {reliability.POINT_CLIENTS} clients sent "
            f"{len(points):,} point queries back to back: p50 {_ms(points, 0.5)}, p99 {_ms(points, 0.99)} (target "
            f"≤ 50 ms: {_met(live.percentile(points, 0.99) <= 0.05)}); the same clients alone just before, "
            f"{len(queries.alone):,} point queries: p50 {_ms(queries.alone, 0.5)}, p99 {_ms(queries.alone, 0.99)} "
            f"(p99 beside the bad clients {live.percentile(points, 0.99) / live.percentile(queries.alone, 0.99):.2f}x "
            f"alone); {_failed(queries.point_errors)}; the server answered its health check throughout: "
            f"{'yes' if queries.server_up else '**no**'}.",
            "",
            "| bad query | sent | outcomes (HTTP status: the one-line error) |",
            "|---|---|---|",
            *outcomes,
            "",
            *_render_soak(soak),
            "",
            "### Run",
            "",
            *_run(command, date, minutes),
            "",
        ]
    )


def _run(command: str, date: str, minutes: float) -> list[str]:
    return [f"- Command: `{command}`", f"- Date: {date}, {minutes:.0f} min in all", f"- Machine: {machine()}"]


def _p(times: list[float], share: float) -> str:
    value = live.percentile(times, share)
    return "∞" if value == float("inf") else f"{value:.1f}"


def _doc(module) -> str:
    return (module.__doc__ or "").split("\n", 1)[-1].strip().replace("``", "`")


def machine() -> str:
    """The machine, as ``nproc``, /proc/cpuinfo and /proc/meminfo describe it."""
    info = Path("/proc/cpuinfo").read_text()
    model = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
        platform.processor() or "unknown",
    )
    kib = int(
        next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))
    )
    return (
        f"{len(os.sched_getaffinity(0))} CPUs (`nproc`), {model}; {kib / 2**20:.1f} GiB memory; "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}; pyspark "
        f"{version('pyspark')}, delta-spark {version('delta-spark')}, Kafka broker {kafka.version()}"
    )


#: Each part's render function: the part's measurements, then the command, the date and the minutes it took.
RENDERS: dict[str, Callable[..., str]] = {
    "speed": render,
    "serving": render_serving,
    "batch": render_batch,
    "orchestrated": render_orchestrated,
    "reliability": render_reliability,
}


def read() -> dict[str, str]:
    """The parts of the report written before, by name (see :data:`PARTS`)."""
    text = REPORT.read_text() if REPORT.exists() else ""
    starts = sorted(
        (text.index(f"\n{heading}\n") + 1, name) for name, heading in PARTS.items() if f"\n{heading}\n" in text
    )
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return {name: text[start:end].rstrip() + "\n" for (start, name), end in zip(starts, ends, strict=True)}


def write(parts: dict[str, str]) -> None:
    """Write the report of ``parts`` (by name, in :data:`PARTS`' order)."""
    REPORT.write_text(HEADER + "\n" + "\n".join(parts[name] for name in PARTS if name in parts))
