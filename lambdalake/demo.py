"""``make demo [DOMAIN=ads]``: start the stack, produce a domain's history, changelogs and a live
stream, batch the past days through Airflow's scheduler, and report the merged views. The services keep
running afterwards.

``python -m lambdalake.demo --domain NAME`` runs a bundled domain other than the deployment's; unless
``LAMBDALAKE_HOME`` is set, its deployment is ``.lambdalake-NAME`` in the checkout, beside the default
domain's ``.lambdalake``."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from datetime import datetime, timedelta

from domains.sample import counts
from infra import airflow, credentials, kafka, producer, services
from infra import deployment as config
from infra.deployment import REPO, Deployment
from infra.processes import Say
from serving_layer import engine
from views import DEFAULT_DOMAIN, domain, generator, tables, timebase

DAG = "batch_recompute"
PER_DAY = 3000
LIVE_RATE, LIVE_SECONDS = 20, 60


def run_batch(settings: Deployment, say: Say) -> dict[str, str]:
    """Turn every DAG on and let the scheduler catch the nightly DAG up to yesterday; on a deployment
    whose past days were batched already (an earlier demo), backfill them again with the new history."""
    client = airflow.AirflowClient(settings)
    client.wait_for_dag(DAG)
    earlier = len(client.dag_runs(DAG))
    client.unpause_all()
    assert settings.batch_start_date is not None  # services.up sets it
    first = datetime.fromisoformat(settings.batch_start_date).replace(tzinfo=timebase.UTC)
    days = (datetime.now(timebase.UTC) - first).days
    if earlier:
        say(f"backfilling {days} days of {DAG} from {first:%Y-%m-%d} again (they ran before) ...")
        client.create_backfill(DAG, first, first + timedelta(days=days - 1), reprocess_behavior="completed")
    else:
        say(f"Airflow's scheduler is catching up {days} nightly runs of {DAG} from {first:%Y-%m-%d} ...")
    return client.wait_for_runs(DAG, earlier + days, timeout=180 * days)


def report(settings: Deployment) -> str:
    """Every view's rows per source and its final days, a few merged rows, lag and counts."""
    lines = []

    def table(sql: str) -> None:
        from tabulate import tabulate

        columns, rows = engine.query(settings, sql)
        lines.append(tabulate(rows, headers=columns))

    days, views = engine.finality(settings), settings.views
    lines.append("\n== every view: rows per source (batch: its final days; speed: provisional) ==")
    table(
        " UNION ALL ".join(
            f"SELECT '{name}' AS view, '{timebase.spans(days[name]['final'])}' AS final_days, "
            f"count(*) FILTER (WHERE source = 'batch') AS batch_rows, count(*) FILTER (WHERE source = 'speed') "
            f'AS speed_rows, max(window_start) AS latest_window FROM "{name}"'
            for name in views
        )
    )
    for name, view in views.items():
        order = ", ".join(("window_start DESC", *view.keys))
        lines.append(f"\n== {name}: the latest speed rows and the latest batch rows ==")
        table(
            f"(SELECT * FROM {name} WHERE source = 'speed' ORDER BY {order} LIMIT 3) UNION ALL "
            f"(SELECT * FROM {name} WHERE source = 'batch' ORDER BY {order} LIMIT 3) ORDER BY {order}"
        )
    home = "" if settings.home == REPO / ".lambdalake" else f"LAMBDALAKE_HOME={settings.home} "
    cli = f"{home}.venv/bin/lambdalake"
    health = services.speed_health(settings)
    produced = sum(kafka.end_offsets(settings, settings.topic).values())
    _, [(landed, dead)] = engine.query(
        settings, "SELECT (SELECT count(*) FROM raw_events), (SELECT count(*) FROM dead_letters)"
    )
    lines += [
        f"\nspeed layer lag: {health.lag if health else None} records",
        f"produced {produced} = landed {landed} + dead-lettered {dead}"
        f"{'' if produced == landed + dead else ' (still landing)'}",
        f"Airflow UI: {settings.airflow_url}  login {settings.airflow_user}, password in "
        f"{credentials.airflow_password_location(settings)}",
        f"Dashboard: {settings.serve_url}  (HTTP API: {settings.serve_url}views, /health, POST /query; "
        f"OpenAPI at {settings.serve_url}openapi.json)",
        f'Query more: {cli} query "SELECT * FROM {next(iter(views))} ORDER BY window_start DESC LIMIT 10"',
        f"List the views: {cli} views",
        f"The services keep running; stop them with `{cli} down` (add --purge to delete the data).",
    ]
    return "\n".join(lines)


def deployment(domain_name: str | None) -> Deployment:
    """The deployment to demonstrate ``domain_name`` in (default: the home's own domain)."""
    if domain_name and domain_name != DEFAULT_DOMAIN and not os.environ.get("LAMBDALAKE_HOME"):
        os.environ["LAMBDALAKE_HOME"] = str(REPO / f".lambdalake-{domain_name}")
    settings = config.load()
    if not domain_name or domain_name == settings.domain:
        return settings
    domain(domain_name)  # a known one
    if tables.RAW_EVENTS.exists(settings):
        raise ValueError(
            f"{settings.home} holds the {settings.domain} domain's data; set LAMBDALAKE_HOME to another "
            f"folder, or delete it with `lambdalake down --purge`"
        )
    return settings.save(domain=domain_name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lambdalake.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", help="a bundled domain (default: the deployment's, clickstream)")
    args = parser.parse_args(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    try:
        settings = deployment(args.domain)
    except ValueError as problem:
        parser.error(str(problem))
    settings = services.up(settings, say, schedule=False)  # the DAGs go on once history has landed
    assert settings.batch_start_date is not None  # services.up sets it
    generated = generator(settings.domain)
    first = datetime.fromisoformat(settings.batch_start_date).replace(tzinfo=timebase.UTC)
    now = datetime.now(timebase.UTC)
    changelogs = generated.changelogs(first, now, seed=int(now.timestamp()))
    for dimension in settings.dimensions:
        sent = producer.send_changelog(settings, changelogs[dimension.name], settings.topic_of(dimension.topic))
        say(f"producing the {dimension.name} changelog: {sent} changes")
    history = generated.generate(first, now, PER_DAY * max(1, (now - first).days), seed=int(now.timestamp()))
    say(f"producing {settings.domain} history since {first:%Y-%m-%d}: {counts(history)}")
    producer.send(settings, history)
    live = generated.generate(
        now,
        now + timedelta(seconds=LIVE_SECONDS),
        LIVE_RATE * LIVE_SECONDS,
        seed=int(now.timestamp()) + 1,
        shaped=False,
    )
    say(f"streaming live events at {LIVE_RATE}/s for {LIVE_SECONDS}s in the background: {counts(live)}")
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
