"""Recompute batch views exactly from raw_events for whole UTC days, then record those days final.

Each view's days are replaced atomically (Delta ``replaceWhere``) in the version of its batch table
serving it (lake.versions), so reruns and backfills converge; a day enters the ledger
(serving_state) only after its rows are committed.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch_layer import corrections, quality
from infra import delta
from infra.deployment import Deployment
from lake import ledger, versions
from views import compile, tables, timebase
from views.model import View

log = logging.getLogger(__name__)
R = TypeVar("R")
#: Views a recompute computes at once: one view's Spark job runs on the engine while another's rows
#: are checked and written in the client (a demo day's recompute on the engine, warm: 3.7-4.0 s one
#: view at a time, 2.9-3.1 s three at once; the first after the engine's start: 8.8 s, 6.5 s).
VIEWS_AT_ONCE = 3


@dataclass(frozen=True)
class Recomputed:
    """What a recompute did to a view: its rows written, the days replaced, and its final days after it
    (as spans: ``2026-11-19..2026-11-21, 2026-11-23``)."""

    rows: int
    days: tuple[str, ...]
    final_days: str


@dataclass(frozen=True)
class Written:
    """A view's days written: its rows per day (the days with any), and per day until when an event
    after it can change its rows (View.open_until)."""

    rows: dict[date, int]
    open_until: dict[date, datetime]

    def entries(self, view: str, days: Iterable[date], at: datetime) -> list[ledger.Entry]:
        """The ledger's entries for ``days`` of ``view``, computed ``at``."""
        return [ledger.Entry(view, day, self.rows.get(day, 0), at, self.open_until[day]) for day in days]


def _open_until(view: View, rows: pa.Table, days: list[date]) -> dict[date, datetime]:
    """Per day, until when an event after it can change ``view``'s ``rows`` of it: for a view of sessions,
    from their newest event (compile.NEWEST; the day's start if none began that day)."""
    if compile.NEWEST not in rows.column_names:
        return {day: view.open_until(day) for day in days}
    newest = {day: timebase.day_start(day) for day in days}
    for start, last in zip(rows["window_start"].to_pylist(), rows[compile.NEWEST].to_pylist(), strict=True):
        day = timebase.utc(start).date()
        newest[day] = max(newest[day], timebase.utc(last))
    return {day: view.open_until(day, newest[day]) for day in days}


def _literal(moment: datetime) -> str:
    return f"TIMESTAMP'{timebase.utc(moment):%Y-%m-%d %H:%M:%S}'"


def read_table(spark: SparkSession, settings: Deployment, name: str) -> DataFrame:
    """The catalogue's table ``name`` (raw_events, a dimension)."""
    path = settings.table(name)
    if not tables.exists(path):
        raise FileNotFoundError(
            f"no {name} table at {path}: start the speed layer (`lambdalake up`) so that events land before recomputing"
        )
    return spark.read.format("delta").load(path)


def read_records(
    spark: SparkSession, settings: Deployment, views: Iterable[View], start: datetime, end: datetime
) -> DataFrame:
    """The raw_events records ``views`` read to compute the days of ``[start, end)``, with the columns
    they use (each event_id's first copy is taken from them: every copy of an event is on its day).

    A view reads as far before and after those days as its windows reach (a session that began the
    day before, a 10-minute window starting at 23:59, a click after midnight).
    """
    start, end = timebase.utc(start), timebase.utc(end)
    timebase.days_between(start, end)  # whole days, or nothing is read
    first, last = _days_read(views, start, end)
    records = read_table(spark, settings, tables.RAW_EVENTS.name).where(F.col("event_date").between(first, last))
    return records.select(*settings.source.columns, "event_date", *compile.RECEIPT_ORDER)


@contextmanager
def checked_events(
    spark: SparkSession, settings: Deployment, views: Iterable[View], start: datetime, end: datetime
) -> Iterator[tuple[DataFrame, dict[str, int], Future]]:
    """Give each event_id's first copy among the records ``views`` read (:func:`read_records`), the
    valid unique events of each type in ``[start, end)`` (what the views' checks reconcile with), and
    the raw_events check of ``[start, end)``, which runs meanwhile: a future whose result (the check's,
    or its :class:`quality.QualityFailed`) must be had before anything is written. The block ends once
    the check has ended, and raises its failure; the checks update the Data Docs once. The records are
    read, numbered (first copy or not) and cached once, for all: the first copies are a filter of them.

    The views compute and check their rows while raw_events is checked (a demo day's nightly run:
    about a second less); none writes before it passed."""
    with quality.docs_once(settings):
        numbered = quality.with_first_copy(read_records(spark, settings, views, start, end))
        # the receipt's times only order the copies: cached without them (4M events: 1 s less)
        records = numbered.drop(*(c for c in compile.RECEIPT_ORDER if c not in quality.RECORD_KEYS)).persist()
        try:
            events = records.where(quality.FIRST_COPY).drop(quality.FIRST_COPY)
            unique = quality.unique_events(events, start, end)  # fills the cache
            with ThreadPoolExecutor(1, thread_name_prefix="lambdalake-raw-events-check") as pool:
                checked = pool.submit(
                    contextvars.copy_context().run, quality.check_raw_events, settings, records, start, end
                )
                yield events, unique, checked
            checked.result()
        finally:
            records.unpersist()


def _days_read(views: Iterable[View], start: datetime, end: datetime) -> tuple[date, date]:
    views = tuple(views)
    return (
        min((start - view.lookback).date() for view in views),
        max((end + view.reach - timedelta(microseconds=1)).date() for view in views),
    )


def each_view(work: Callable[[View], R], views: Iterable[View]) -> dict[str, R]:
    """``work(view)`` for each of ``views``, :data:`VIEWS_AT_ONCE` at a time (each in a copy of this
    thread's context: a :func:`quality.docs_once` block's Data Docs); each view's result once all have
    ended. If any failed, the first failure in ``views``' order is raised once the others have ended:
    what they committed stands (every commit is atomic, and records nothing final that is not written)."""
    with ThreadPoolExecutor(VIEWS_AT_ONCE, thread_name_prefix="lambdalake-view") as pool:
        futures = {view.name: pool.submit(contextvars.copy_context().run, work, view) for view in views}
    return {name: future.result() for name, future in futures.items()}


def write_days(
    spark: SparkSession,
    settings: Deployment,
    view: View,
    events: DataFrame,
    start: datetime,
    end: datetime,
    path: str,
    unique: dict[str, int] | None = None,
    raw_events_checked: Future | None = None,
) -> Written:
    """Compute ``view``'s rows for the days of ``[start, end)`` exactly from ``events`` (the first copies
    of at least the records it reads, :func:`read_records`) and replace those days in the table at
    ``path``; what was written. ``unique``: the valid unique events per type in ``[start, end)``
    (counted from ``events`` if not given); ``raw_events_checked``: the raw_events check that must pass
    before the rows are written (:func:`checked_events`).

    The rows pass the view's Great Expectations suite (batch_layer.quality) before they are written,
    and are compared with the speed layer's rows of those days (batch_layer.corrections).
    """
    start, end = timebase.utc(start), timebase.utc(end)
    events = events.where(F.col("event_date").between(*_days_read([view], start, end)))
    dimensions = {name: read_table(spark, settings, name) for name in compile.dimension_tables(view)}
    window = f"window_start >= {_literal(start)} AND window_start < {_literal(end)}"
    rows = compile.batch(view, events, dimensions, newest=True).where(window)
    checked = quality.check_view(settings, view, rows, events if unique is None else unique, start, end)
    assert checked.rows is not None
    written = Written(checked.per_day, _open_until(view, checked.rows, timebase.days_between(start, end)))
    view_rows = checked.rows.select(list(view.columns))
    if raw_events_checked is not None:
        raw_events_checked.result()
    delta.replace(view_rows, path, f"window_start >= '{start.isoformat()}' AND window_start < '{end.isoformat()}'")
    corrections.record(settings, view, view_rows, start, end)
    return written


def recompute_view(
    spark: SparkSession,
    settings: Deployment,
    view: View,
    start: datetime,
    end: datetime,
    events: DataFrame | None = None,
    unique: dict[str, int] | None = None,
    raw_events_checked: Future | None = None,
) -> Recomputed:
    """Replace ``view``'s batch rows for the days of ``[start, end)`` in the version serving it
    (lake.versions, :func:`write_days` from ``events``, by default read for this view alone) and
    record those days final."""
    days = timebase.days_between(start, end)
    path = versions.current(settings, view.name)
    if events is None:
        events = compile.first_copies(read_records(spark, settings, [view], start, end))
    written = write_days(spark, settings, view, events, start, end, path, unique, raw_events_checked)
    versions.require_serving(settings, view.name, path)
    ledger.record(settings, written.entries(view.name, days, datetime.now(timebase.UTC)))
    final = timebase.spans(ledger.final_days(settings).get(view.name, set()))
    count = sum(written.rows.values())
    log.info("batch %s: %d rows for %s..%s; final days %s", view.name, count, days[0], days[-1], final)
    return Recomputed(count, tuple(d.isoformat() for d in days), final)


def recompute_day(spark: SparkSession, settings: Deployment, start: datetime, end: datetime) -> dict[str, Recomputed]:
    """Recompute every view for the days of ``[start, end)`` (whole UTC days) on ``spark`` (a session
    of the batch engine, infra.spark.engine, or the process's own), a few at once (:func:`each_view`),
    each written once raw_events passed its check (:func:`checked_events`; the Data Docs updated once
    for all the checks); the summary per view."""
    start, end = timebase.utc(start), timebase.utc(end)  # Airflow passes pendulum times
    views = settings.views
    with checked_events(spark, settings, views.values(), start, end) as (events, unique, checked):
        return each_view(
            lambda view: recompute_view(spark, settings, view, start, end, events, unique, checked), views.values()
        )
