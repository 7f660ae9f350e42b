"""``lambdalake``: one entry point for running the pipeline and querying its views."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import asdict
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import NoReturn

from infra import credentials, processes
from infra import deployment as config


class Parser(argparse.ArgumentParser):
    """argparse that explains a wrong argument in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class Usage(Exception):
    """A wrong combination of arguments, told as argparse tells a wrong argument (exit 2)."""


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a day (YYYY-MM-DD): {text}") from None


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("no view named")
    return names


def _parser() -> Parser:
    parser = Parser(prog="lambdalake", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    sub.add_parser("up", help="start Kafka, the speed layer, Airflow and the HTTP API with its dashboard").set_defaults(
        run=_up
    )
    down = sub.add_parser("down", help="stop everything")
    down.add_argument("--purge", action="store_true", help="also delete all data, checkpoints and logs")
    down.set_defaults(run=_down)
    status = sub.add_parser("status", help="what runs where, and whether it is healthy")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_status)
    produce = sub.add_parser("produce", help="send events to Kafka, from a file or the generator")
    produce.add_argument(
        "--from-file",
        type=Path,
        metavar="F",
        help="a JSONL file, one event per line (with --changelog: one change per line)",
    )
    produce.add_argument("--days", type=_positive(int), help="generate this many days of history up to now")
    produce.add_argument("--per-day", type=_positive(int), default=2000, help="history events per day")
    produce.add_argument("--rate", type=_positive(float), help="live events per second")
    produce.add_argument("--duration", type=_positive(float), default=30, help="live seconds (default 30)")
    produce.add_argument(
        "--changelog",
        nargs="?",
        const="",
        metavar="DIMENSION",
        help="send a dimension's changelog (the domain's only one if unnamed) to its topic: from "
        '--from-file (a line {"<key>": K, "deleted": true} deletes K), or generated '
        "(creations, changes, deletions; every dimension's if unnamed) over the span of "
        "--days/--rate, beside those events",
    )
    produce.add_argument("--seed", type=int, default=7)
    produce.set_defaults(run=_produce)
    speed = sub.add_parser("speed", help="control the speed layer's process")
    speed.add_argument("action", choices=("start", "stop", "restart", "status", "compact"))
    speed.add_argument(
        "--resume-from-tables",
        action="store_true",
        help="if the landing checkpoint is lost, go on after the offsets already landed",
    )
    speed.set_defaults(run=_speed)
    serve = sub.add_parser("serve", help="serve the HTTP API and dashboard (`lambdalake up` starts it too)")
    serve.add_argument(
        "--host",
        help="address to bind (default: setting serve_host, 127.0.0.1); any other than loopback requires a token",
    )
    serve.add_argument("--port", type=_positive(int), help="port (default: setting serve_port, 8000)")
    serve.set_defaults(run=_serve)
    query = sub.add_parser("query", help="run SQL against the merged views")
    query.add_argument("sql")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.set_defaults(run=_query)
    views = sub.add_parser("views", help="list the declared views")
    views.add_argument("--json", action="store_true")
    views.set_defaults(run=_views)
    dead = sub.add_parser("deadletters", help="summarise dead letters by reason; `replay` sends them back")
    dead.add_argument(
        "action",
        nargs="?",
        choices=("replay",),
        help="send corrected records (--from-file) or unchanged payloads (--reason) to the events topic",
    )
    dead.add_argument("--json", action="store_true")
    dead.add_argument(
        "--limit",
        type=_positive(int),
        default=20,
        metavar="N",
        help="how many of the latest dead letters to list (default 20)",
    )
    dead.add_argument("--reason", metavar="TEXT", help="only dead letters whose reason contains TEXT (any case)")
    dead.add_argument(
        "--from-file",
        type=Path,
        metavar="F",
        help='replay: JSONL, one {"partition": p, "offset": o, "value": corrected event} per line',
    )
    dead.set_defaults(run=_deadletters)
    reprocess = sub.add_parser(
        "reprocess",
        help="rebuild views with the code deployed now into a new version "
        "and switch serving to it at once; or switch back",
    )
    action = reprocess.add_mutually_exclusive_group(required=True)
    action.add_argument("--label", help="the new version's name: lowercase letters, digits, - and _")
    action.add_argument("--switch-back", action="store_true", help="serve the views' previous versions again")
    reprocess.add_argument("--views", type=_names, metavar="A,B", help="comma-separated views (default: all)")
    reprocess.add_argument("--from", dest="first", type=_day, metavar="D", help="first day to recompute")
    reprocess.add_argument("--to", dest="last", type=_day, metavar="D", help="last day to recompute")
    reprocess.add_argument(
        "--all", dest="all_history", action="store_true", help="recompute every ended day of raw_events"
    )
    reprocess.set_defaults(run=_reprocess)
    new_domain = sub.add_parser(
        "new-domain",
        help="write a domain of your own into a new folder: its source, "
        "one view and a test of it (then set domain to the folder)",
    )
    new_domain.add_argument("folder", type=Path, help="the folder to create; its name is the domain's")
    new_domain.set_defaults(run=_new_domain)
    return parser


def _query(settings, args) -> None:
    answer = _answer(settings, args.sql)
    _print_rows(answer.columns, answer.rows, args.format)


def _answer(settings, sql: str):
    """``sql`` answered by the running HTTP API (milliseconds), else by an engine of this process's own."""
    from serving_layer import client

    answer = client.query(settings, sql)
    if answer is None:
        from serving_layer.engine import query

        answer = client.sent(*query(settings, sql))
    return answer


def _print_rows(columns: list[str], rows: list[tuple], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([dict(zip(columns, row, strict=True)) for row in rows], default=str, indent=1))
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        from tabulate import tabulate

        print(tabulate(rows, headers=columns, tablefmt="simple"))
        print(f"({len(rows)} row{'s' * (len(rows) != 1)})")


def _dimensions(settings, name: str | None, from_file: bool) -> list:
    """The dimensions whose changelog ``produce --changelog [name]`` sends."""

    declared = {d.name: d for d in settings.dimensions}
    if name is None:
        return []
    if name and name not in declared:
        raise ValueError(
            f"--changelog: domain {settings.domain} has no dimension {name!r}; it has {', '.join(declared) or 'none'}"
        )
    if not name and from_file and len(declared) != 1:
        raise ValueError(f"--changelog --from-file: name the dimension, one of {', '.join(declared) or 'none'}")
    return [declared[name]] if name else list(declared.values())


def _produce(settings, args) -> None:
    from domains.sample import counts
    from infra import producer
    from views import generator
    from views.timebase import UTC

    if not (args.from_file or args.days or args.rate):
        raise ValueError("produce needs --from-file F, --days D or --rate N")
    now = datetime.now(UTC)
    dimensions = _dimensions(settings, args.changelog, bool(args.from_file))
    if dimensions and args.from_file:
        [dimension] = dimensions
        read = producer.read_file(args.from_file, now, key=dimension.key, changelog=True)
        topic = settings.topic_of(dimension.topic)
        sent = producer.send_changelog(settings, read.records, topic)
        print(
            f"{dimension.name} changelog: sent {sent} from {args.from_file} to {topic}: "
            f"{sum(r.value is None for r in read.records)} deletions" + (f"; {read.report()}" if read.report() else "")
        )
    elif dimensions:
        start, end = now - timedelta(days=args.days or 0), now + timedelta(seconds=args.duration if args.rate else 0)
        changelogs = generator(settings.domain).changelogs(start, end, seed=args.seed)
        for dimension in dimensions:
            changes, topic = changelogs[dimension.name], settings.topic_of(dimension.topic)
            sent = producer.send_changelog(settings, changes, topic)
            print(
                f"{dimension.name} changelog: sent {sent} to {topic}: {sum(c.value is None for c in changes)} deletions"
            )
    if args.from_file and not dimensions:
        read = producer.read_file(args.from_file, now)
        sent = producer.send(settings, read.records)
        print(
            f"sent {sent} records from {args.from_file} to {settings.topic}"
            + (f"; {read.report()}" if read.report() else "")
        )
    if args.days:
        records = generator(settings.domain).generate(
            now - timedelta(days=args.days), now, args.days * args.per_day, args.seed
        )
        sent = producer.send(settings, records)
        print(f"history ({args.days} days): sent {sent}: {counts(records)}")
    if args.rate:
        records = generator(settings.domain).generate(
            now, now + timedelta(seconds=args.duration), int(args.rate * args.duration), args.seed + 1, shaped=False
        )
        sent = producer.send(settings, records, paced_from=now)
        print(f"live ({args.rate:g}/s for {args.duration:g}s): sent {sent}: {counts(records)}")


def _views(settings, args) -> None:
    from serving_layer import catalog

    listing = catalog.views(settings)
    if args.json:
        print(json.dumps([v.model_dump(mode="json") for v in listing], indent=1))
        return
    for v in listing:
        since = f" since {v.version.since}" if v.version.since else ""
        previous = f"; can switch back to {v.version.previous}" if v.version.previous else ""
        print(
            f"{v.name}: {v.description}\n  window {v.window}; keys {', '.join(v.keys) or '-'}; "
            f"measures {', '.join(v.measures)} (approximate in speed: {', '.join(v.approximate_in_speed) or 'none'})"
            f"\n  final days {v.final_days}; provisional days {v.provisional_days}\n  "
            f"batch {v.tables.batch}; speed {v.tables.speed}\n  batch version {v.version.label}{since}{previous}"
        )


def _reprocess(settings, args) -> None:
    from batch_layer import reprocess
    from lake import versions

    if args.switch_back:
        if args.first or args.last or args.all_history:
            raise Usage("--switch-back takes only --views")
        chosen = args.views or settings.views
        for view, done in versions.switch_back(settings, chosen).items():
            print(f"{view}: serving {done.label} again; days carried over from the version left: {done.carried_days}")
        return
    from infra import spark as sparks

    plan = reprocess.plan(settings, args.label, args.views, args.first, args.last, args.all_history)
    with sparks.engine(settings) as spark:
        done_per_view = reprocess.reprocess(spark, settings, plan)
    for view, built in done_per_view.items():
        print(
            f"{view}: serving {built.label} (was {built.previous}): {built.rows} rows recomputed for "
            f"{built.days}; newly final {built.newly_final}"
        )


def _status(settings, args) -> None:
    from infra import services
    from lake import versions
    from serving_layer.catalog import corrections, quality, rows
    from views import tables

    running, checks, off = services.status(settings), quality(settings), corrections(settings)
    serving = versions.describe(settings, settings.views)
    late = rows(
        settings,
        tables.LATE_EVENTS.name,
        "SELECT view, day, sum(events) AS events, max(received_at) AS last "
        "FROM late_events GROUP BY view, day ORDER BY view, day",
    )
    dead = rows(
        settings,
        tables.DEAD_LETTERS.name,
        "SELECT reason, count(*) AS records FROM dead_letters GROUP BY reason ORDER BY records DESC",
    )
    if args.json:
        print(
            json.dumps(
                {
                    **asdict(running),
                    "quality": checks.model_dump(),
                    "corrections": [c.model_dump() for c in off],
                    "late_events": late,
                    "dead_letters": dead,
                    "versions": {view: asdict(v) for view, v in serving.items()},
                },
                indent=1,
                default=str,
            )
        )
        return
    from tabulate import tabulate

    def table(title: str, rows: list[list], headers: list[str]) -> None:
        print(f"\n{title}")
        print(tabulate(rows, headers=headers, tablefmt="simple", intfmt=",", floatfmt=",.6g") if rows else "(none)")

    print(f"home: {running.home}")
    table("services", _services(settings, running), ["service", "state", "pid", "where", "detail"])
    health = running.speed_layer.health
    table(
        "speed layer queries",
        [
            [name, q.batch_id, q.last_progress, round(q.processed_rows_per_second or 0)]
            for name, q in (health.queries if health else {}).items()
        ],
        ["query", "micro-batch", "last progress", "records/s"],
    )
    for what, steps in (("started", health.startup), ("last micro-batch", health.steps)) if health else ():
        if steps:
            print(f"{what}: " + ", ".join(f"{step} {seconds:.2f}s" for step, seconds in steps.items()))
    if health and health.state:
        held = health.state
        print(f"state: {held['events']:,} events, {held['sessions']:,} open sessions, {held['bytes'] / 2**20:,.1f} MB")
    table(
        f"late events, behind the speed watermark (the batch layer recomputes their days): "
        f"{sum(r['events'] for r in late)}",
        [[r["view"], r["day"], r["events"], r["last"]] for r in late],
        ["view", "day", "events", "last"],
    )
    table(
        f"dead letters: {sum(r['records'] for r in dead)}",
        [[r["records"], r["reason"]] for r in dead],
        ["records", "reason"],
    )
    table(
        f"data quality (Great Expectations; Data Docs: {checks.data_docs})",
        [
            [suite, f"{c.first_day}..{c.last_day}", c.failed, c.warnings, c.checked_at]
            for suite, c in checks.suites.items()
        ],
        ["suite", "days", "failed", "warnings", "checked at"],
    )
    table(
        "batch versions serving the views",
        [[view, v.label, v.since or "-", v.previous or "-"] for view, v in serving.items()],
        ["view", "version", "since", "can switch back to"],
    )
    table(
        "corrections (how far provisional speed rows were off when batch made their days final)",
        [
            [
                f"{c.view}.{c.measure}",
                _share(c.mean_relative_difference),
                c.reports,
                f"{c.last.first_day}..{c.last.last_day}",
                c.last.added,
                c.last.removed,
                c.last.changed,
                c.last.difference,
                _share(c.last.relative_difference),
            ]
            for c in off
        ],
        ["measure", "mean off", "reports", "last days", "added", "removed", "changed", "off by", "share"],
    )


def _services(settings, running) -> list[list]:
    """One row per service of ``running`` (services.status): its name, state, pid, address and details."""

    def state(healthy: bool) -> str:
        return "healthy" if healthy else "DOWN"

    kafka, speed, engine, api = running.kafka, running.speed_layer, running.batch_engine, running.serving_api
    rows = [["kafka", state(kafka.healthy), "", kafka.address, ""]]
    rows += [[f"kafka broker {b.node}", state(b.healthy), b.pid, b.address, ""] for b in kafka.brokers]
    progress = f"lag {speed.health.lag}, watermark {speed.health.watermark}" if speed.health else ""
    problems = "; ".join(filter(None, (progress, speed.problem)))
    rows.append(["speed layer", state(speed.healthy), speed.pid, "", problems])
    login = f"login {settings.airflow_user}, password in {credentials.airflow_password_location(settings)}"
    rows += [
        [name, state(part.healthy), part.pid, part.url or "", login if part.url else ""]
        for name, part in running.airflow.items()
    ]
    resident = f"resident {engine.rss_mb} MB" if engine.rss_mb else ""
    rows.append(["batch engine", state(engine.healthy), engine.pid, engine.url, resident])
    rows.append(["serving API", state(api.healthy), api.pid, api.url, ""])
    workers = f"{running.spark.alive_workers or 0} workers alive" if settings.spark_master == "standalone" else ""
    rows.append(["spark", "", "", running.spark.master, workers])
    return rows


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _speed(settings, args) -> None:
    from infra import services

    action = args.action

    if action in ("stop", "restart"):
        stopped = services.stop_speed(settings, hold=action == "stop")
        print("speed layer stopped" if stopped else "speed layer was not running")
    if action in ("start", "restart"):
        services.start_speed(settings, resume_from_tables=args.resume_from_tables)
        print("speed layer running")
    if action == "status":
        health = services.speed_health(settings)
        print(json.dumps(asdict(health), indent=1) if health else "speed layer is not running")
    if action == "compact":
        from infra import spark as sparks
        from speed_layer.compact import compact

        with sparks.engine(settings) as spark:
            folded = compact(spark, settings)
        print("; ".join(f"{view}: {hours} hours folded" for view, hours in folded.items()) or "nothing to fold")


def _up(settings, args) -> None:
    from infra import services

    settings = services.up(settings)
    print(
        f"up. Airflow UI: {settings.airflow_url} (login {settings.airflow_user}, password in "
        f"{credentials.airflow_password_location(settings)}); dashboard and API: {settings.serve_url}; "
        f"stop with `lambdalake down`"
    )


def _down(settings, args) -> None:
    from infra import services

    stopped = services.down(settings, args.purge)
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}" + ("; data purged" if args.purge else ""))


def _serve(settings, args) -> None:
    from serving_layer import api

    api.serve(settings, args.host or settings.serve_host, args.port or settings.serve_port)


def _deadletters(settings, args) -> None:
    from lambdalake import deadletters

    print(
        deadletters.command(
            settings, args.action, reason=args.reason, limit=args.limit, from_file=args.from_file, as_json=args.json
        )
    )


def _new_domain(settings, args) -> None:
    from lambdalake import new_domain

    written = new_domain.write(args.folder)
    folder = written[0].parent
    print("\n".join(f"wrote {path}" for path in written))
    print(
        f'next: edit them, run `pytest {folder}/tests`, and set "domain": "{folder}" in '
        f"{settings.home / 'settings.json'}"
    )


def run(argv: list[str]) -> None:
    """Run the command ``argv`` names (each subcommand's handler is its parser's ``run`` default)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        args.run(config.load(), args)
    except Usage as wrong:
        parser.error(str(wrong))


def _told() -> tuple[type[Exception], ...]:
    """The errors told in one line (their modules imported once one is raised: a query stays quick)."""
    from infra.airflow import AirflowError
    from infra.spark import EngineError
    from lake.versions import Conflict
    from serving_layer.sandbox import QueryError

    return (
        QueryError,
        processes.ServiceError,
        AirflowError,
        EngineError,
        Conflict,
        FileNotFoundError,
        ValueError,
        LookupError,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not isinstance(exc, _told()):
            raise
        print(f"lambdalake: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
