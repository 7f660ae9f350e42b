"""``make demo``: start the stack, produce history and a live stream, batch the past days through
Airflow's scheduler, and report the merged view. The services keep running afterwards."""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime, timedelta

from domains.clickstream import PRODUCTS, generator

from infra import airflow, credentials, kafka, producer, services
from infra import settings as config
from infra.settings import Settings
from serving_layer import engine
from views import all_views, timebase

DAG = "batch_recompute"
PER_DAY = 3000
LIVE_RATE, LIVE_SECONDS = 20, 60


def run_batch(settings: Settings, say) -> dict[str, str]:
    """Turn every DAG on and let the scheduler catch the nightly DAG up to yesterday; on a deployment
    whose past days were batched already (an earlier demo), backfill them again with the new history."""
    client = airflow.AirflowClient(settings)
    client.wait_for_dag(DAG)
    earlier = len(client.dag_runs(DAG))
    client.unpause_all()
    first = datetime.fromisoformat(settings.batch_start_date).replace(tzinfo=timebase.UTC)
    days = (datetime.now(timebase.UTC) - first).days
    if earlier:
        say(f"backfilling {days} days of {DAG} from {first:%Y-%m-%d} again (they ran before) ...")
        client.create_backfill(DAG, first, first + timedelta(days=days - 1), reprocess_behavior="completed")
    else:
        say(f"Airflow's scheduler is catching up {days} nightly runs of {DAG} from {first:%Y-%m-%d} ...")
    return client.wait_for_runs(DAG, earlier + days, timeout=180 * days)


def report(settings: Settings) -> str:
    """Every view's rows per source and its final days, a few merged rows, lag and counts."""
    lines = []

    def table(sql: str) -> None:
        from tabulate import tabulate

        columns, rows = engine.query(settings, sql)
        lines.append(tabulate(rows, headers=columns))

    days = engine.finality(settings)
    lines.append("\n== every view: rows per source (batch: its final days; speed: provisional) ==")
    table(" UNION ALL ".join(
        f"SELECT '{name}' AS view, '{timebase.spans(days[name]['final'])}' AS final_days, "
        f"count(*) FILTER (WHERE source = 'batch') AS batch_rows, count(*) FILTER (WHERE source = 'speed') "
        f"AS speed_rows, max(window_start) AS latest_window FROM \"{name}\"" for name in all_views(settings.view_modules, settings.domain)))
    view = "page_views_per_minute"
    lines.append(f"\n== {view}: the latest speed rows and the latest batch rows ==")
    table(f"(SELECT * FROM {view} WHERE source = 'speed' ORDER BY window_start DESC, page LIMIT 5) UNION ALL "
          f"(SELECT * FROM {view} WHERE source = 'batch' ORDER BY window_start DESC, page LIMIT 5) "
          f"ORDER BY window_start DESC, page")
    lines.append("\n== revenue_by_category_hourly: yesterday, by the category each product had when bought ==")
    table("SELECT category, sum(orders) AS orders, sum(items) AS items, sum(revenue) AS revenue "
          "FROM revenue_by_category_hourly WHERE window_start >= current_date - 1 AND window_start < current_date "
          "GROUP BY category ORDER BY revenue DESC")
    health = services.speed_health(settings) or {}
    produced = sum(kafka.end_offsets(settings, settings.topic).values())
    _, [(landed, dead)] = engine.query(
        settings, "SELECT (SELECT count(*) FROM raw_events), (SELECT count(*) FROM dead_letters)")
    lines += [
        f"\nspeed layer lag: {health.get('lag')} records",
        f"produced {produced} = landed {landed} + dead-lettered {dead}"
        f"{'' if produced == landed + dead else ' (still landing)'}",
        f"Airflow UI: {settings.airflow_url}  login {settings.airflow_user} / {credentials.airflow_password(settings)}",
        f"Dashboard: {settings.serve_url}  (HTTP API: {settings.serve_url}views, /health, POST /query; "
        f"OpenAPI at {settings.serve_url}openapi.json)",
        "Query more: .venv/bin/lambdalake query \"SELECT * FROM search_ctr_hourly ORDER BY window_start DESC LIMIT 10\"",
        "List the views: .venv/bin/lambdalake views",
        "The services keep running; stop them with `.venv/bin/lambdalake down` (add --purge to delete the data).",
    ]
    return "\n".join(lines)


def main() -> int:
    say = lambda text: print(text, flush=True)  # noqa: E731
    settings = services.up(config.load(), say, schedule=False)  # the DAGs go on once history has landed
    first = datetime.fromisoformat(settings.batch_start_date).replace(tzinfo=timebase.UTC)
    now = datetime.now(timebase.UTC)
    changes = generator.products(first, now, seed=int(now.timestamp()))
    say(f"producing the products changelog: {producer.send_changelog(settings, changes, settings.topic_of(PRODUCTS.topic))} changes")
    history = generator.generate(first, now, PER_DAY * max(1, (now - first).days), seed=int(now.timestamp()))
    say(f"producing history since {first:%Y-%m-%d}: {generator.counts(history)}")
    producer.send(settings, history)
    live = generator.generate(now, now + timedelta(seconds=LIVE_SECONDS), LIVE_RATE * LIVE_SECONDS,
                              seed=int(now.timestamp()) + 1, shaped=False)
    say(f"streaming live events at {LIVE_RATE}/s for {LIVE_SECONDS}s in the background: {generator.counts(live)}")
    stream = threading.Thread(target=producer.send, args=(settings, live, now), daemon=True)
    stream.start()
    say("waiting for the speed layer to land the history ...")
    services.wait_for_landing(settings)
    states = run_batch(settings, say)
    say(f"batch runs: {sorted(states.values()).count('success')} succeeded")
    stream.join()
    services.wait_for_landing(settings)  # landing commits each micro-batch's speed partials first
    say(report(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
