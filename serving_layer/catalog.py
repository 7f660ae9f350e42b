"""What analysts are told about the views: their declarations and tables, and their health.

One description for every front end: ``lambdalake views`` and ``status``, and the HTTP API
(serving_layer/api.py) with its dashboard.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel

from infra import batch_engine, services
from infra.deployment import Deployment
from lake import versions
from serving_layer import engine
from serving_layer.sandbox import QueryError
from views import tables
from views.compile import state_columns
from views.timebase import spans


class ViewTables(BaseModel):
    """Where a view's rows are: its batch table (the version serving it) and its speed partials."""

    batch: str
    speed: str


class ViewInfo(BaseModel):
    """A declared view: window, keys, measures, tables, the version of its batch table serving it, and
    its final and provisional days (as spans, e.g. ``2026-11-20..2026-11-22``)."""

    name: str
    description: str
    window: str
    keys: list[str]
    measures: list[str]
    approximate_in_speed: list[str]
    joins: list[str]
    expectations: list[str]
    tables: ViewTables
    version: versions.Version
    speed_states: list[str]
    final_days: str
    provisional_days: str


class SpeedHealth(BaseModel):
    """The speed layer as the serving side sees it: its lag, watermark and last micro-batch."""

    running: bool
    lag: int | None = None
    watermark: str | None = None
    error: str | None = None
    problem: str | None = None
    last_micro_batch_finished: str | None = None
    last_micro_batch: dict[str, float] | None = None


class SuiteCheck(BaseModel):
    """A Great Expectations suite's last check: its days, how many critical expectations failed and how
    many warnings were raised."""

    checked_at: datetime
    first_day: date
    last_day: date
    failed: int
    warnings: int


class Quality(BaseModel):
    """Where the Data Docs are, and each suite's last check (by suite name)."""

    data_docs: str
    suites: dict[str, SuiteCheck]


class RawEventsQuality(BaseModel):
    """Where the Data Docs are, and raw_events' last check."""

    data_docs: str
    raw_events: SuiteCheck | None


class CorrectionReport(BaseModel):
    """One report of how far a measure's provisional speed rows were off when batch made days final."""

    first_day: date
    last_day: date
    added: int
    removed: int
    changed: int
    difference: float
    relative_difference: float | None


class Correction(BaseModel):
    """A view's measure: how many reports, their mean relative difference, and the last report."""

    view: str
    measure: str
    reports: int
    mean_relative_difference: float | None
    last: CorrectionReport


class ViewHealth(BaseModel):
    """A view's days, late events and last data-quality check. (Its newest window is a query of the view,
    ``SELECT max(window_start)``, which folds its newest speed rows: the dashboard runs it for the view
    it shows.)"""

    final_days: str
    provisional_days: str
    late_events: int
    last_quality_check: SuiteCheck | None


class QueryEngineHealth(BaseModel):
    """What the query engine holds in memory (its copies of the tables, the views' parts, the queries
    running), against its limit (setting ``query_memory_limit``)."""

    memory_mb: float
    memory_limit: str


class Health(BaseModel):
    """The serving side's health (``GET /health``)."""

    speed_layer: SpeedHealth
    batch_engine: dict[str, Any]
    query_engine: QueryEngineHealth
    speed_rows_written: datetime | None
    speed_rows_age_seconds: float | None
    dead_letters: int
    quality: RawEventsQuality
    views: dict[str, ViewHealth]


def views(settings: Deployment) -> list[ViewInfo]:
    """Every declared view (:class:`ViewInfo`)."""
    days = engine.finality(settings)
    declared = settings.views
    batch, serving = versions.serving(settings, declared), versions.describe(settings, declared)
    return [
        ViewInfo(
            name=v.name,
            description=" ".join(v.description.split()),
            window=str(v.window),
            keys=list(v.keys),
            measures=[m.name for m in v.measures],
            approximate_in_speed=[m.name for m in v.measures if m.approximate_in_speed],
            joins=[str(j) for j in v.joins],
            expectations=list(v.expectations),
            tables=ViewTables(
                batch=batch[v.name],
                speed=f"{tables.SPEED_PARTIALS.path(settings)} (partition view={v.name}, column {v.name})",
            ),
            version=serving[v.name],
            speed_states=list(state_columns(v)),
            final_days=spans(days[v.name]["final"]),
            provisional_days=spans(days[v.name]["provisional"]),
        )
        for v in declared.values()
    ]


def rows(settings: Deployment, table: str, sql: str) -> list[dict]:
    """Rows of ``sql``, a query of the view or table ``table``, through the serving engine as dicts; none
    if ``table`` has no data yet. A query that fails raises :class:`QueryError` naming ``table``: an error
    never reads as no rows."""
    if table not in engine.with_data(settings):
        return []
    try:
        columns, found = engine.query(settings, sql)
    except QueryError as exc:
        raise QueryError(f"reading {table} failed: {exc}") from None
    return [dict(zip(columns, row, strict=True)) for row in found]


def quality(settings: Deployment) -> Quality:
    """Where the Great Expectations Data Docs are, and each suite's last check."""

    last = rows(
        settings,
        tables.QUALITY_RESULTS.name,
        (
            "SELECT suite, checked_at, first_day, last_day, count_if(NOT success AND severity = 'critical') AS failed, "
            "count_if(NOT success AND severity <> 'critical') AS warnings FROM quality_results "
            "WHERE (suite, checked_at) IN (SELECT (suite, max(checked_at)) FROM quality_results GROUP BY suite) "
            "GROUP BY ALL ORDER BY suite"
        ),
    )
    return Quality(data_docs=str(settings.data_docs), suites={r.pop("suite"): SuiteCheck(**r) for r in last})


def corrections(settings: Deployment) -> list[Correction]:
    """Per view, how far its provisional speed rows were off when batch made days final: the last
    report (windows added, removed, changed; each measure's difference) and, over every report, each
    measure's mean relative difference."""
    return [
        Correction(**r)
        for r in rows(
            settings,
            tables.CORRECTIONS.name,
            (
                "SELECT view, measure, count(*) AS reports, avg(relative_difference) AS mean_relative_difference, "
                "arg_max(struct_pack(first_day, last_day, added, removed, changed, difference, relative_difference), "
                "computed_at) AS last FROM corrections GROUP BY view, measure ORDER BY view, measure"
            ),
        )
    ]


def health(settings: Deployment) -> Health:
    """The serving side's health: the speed layer (lag, last micro-batch), the query engine's memory,
    when speed rows were last written, dead letters, and per view its final and provisional days, late
    events and last data-quality check; no view's rows are read for it."""
    speed = services.speed_health(settings)
    written = engine.committed_at(settings, tables.SPEED_PARTIALS.name)
    late = {
        r["view"]: r
        for r in rows(
            settings,
            tables.LATE_EVENTS.name,
            "SELECT view, sum(events) AS events, max(received_at) AS last FROM late_events GROUP BY view",
        )
    }
    [dead] = rows(settings, tables.DEAD_LETTERS.name, "SELECT count(*) AS records FROM dead_letters") or [
        {"records": 0}
    ]
    checks = quality(settings)
    per_view = {}
    for view in views(settings):
        per_view[view.name] = ViewHealth(
            final_days=view.final_days,
            provisional_days=view.provisional_days,
            late_events=int((late.get(view.name) or {}).get("events") or 0),
            last_quality_check=checks.suites.get(f"view.{view.name}"),
        )
    held, limit = engine.memory(settings)
    return Health(
        speed_layer=SpeedHealth(running=False, problem=services.speed_problem(settings))
        if speed is None
        else SpeedHealth(
            running=True,
            lag=speed.lag,
            watermark=speed.watermark,
            error=speed.error,
            problem=services.speed_problem(settings),
            last_micro_batch_finished=speed.progressed_at,
            last_micro_batch=speed.steps or None,
        ),
        batch_engine={key: value for key, value in asdict(batch_engine.status(settings)).items() if key != "pid"},
        query_engine=QueryEngineHealth(memory_mb=round(held / 2**20, 1), memory_limit=limit),
        speed_rows_written=written,
        speed_rows_age_seconds=None if written is None else round(time.time() - written.timestamp(), 3),
        dead_letters=dead["records"],
        quality=RawEventsQuality(data_docs=checks.data_docs, raw_events=checks.suites.get("raw_events")),
        views=per_view,
    )
