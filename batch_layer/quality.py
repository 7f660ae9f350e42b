"""Data quality through Great Expectations: an expectation suite for raw_events and one per view, each
run by its checkpoint over the rows a batch recompute is about to commit, with as few Spark jobs as the
checks need.

The GX project lives in the deployment home (``<home>/gx``, a file data context): two data sources whose
DataFrame assets are the batch layer's rows in flight (``lambdalake``, Spark, for raw_events' records;
``lambdalake_rows``, pandas, for a view's rows), the suites, their checkpoints and the Data Docs,
updated with each result, or once for every check of a block (:func:`docs_once`: a recompute's seven
checks update them once, since rendering the site's index is a good part of a small check's time). The
suites and checkpoints are built from the declarations once per process and written to the file
context only when their definition changed (a fingerprint kept in each suite's ``meta``).

- **A view** (:func:`check_view`): its declared expectations (critical), each evaluated by Spark as a
  boolean column of the rows (named by the condition, a null counting as false) in one projection that
  is brought to the driver once (``toArrow``: at most tens of thousands of aggregate rows a day), where
  GX validates it with pandas: each condition's column must be true on every row, and the checkpoint's
  COMPLETE results list the failing rows' window and keys. Reconciliation (critical): for a view whose
  windows tumble, each count of its events sums, over the days checked, to the valid unique events of
  its types in raw_events (a suite parameter, :func:`unique_events`: one Spark job for every view of a
  recompute). The same rows give the rows per day (:attr:`Check.per_day`). One Spark job per view.
- **raw_events** (:func:`check_raw_events`), over the days' records where they are (never collected):
  keys present, known types, each in its own day's partition (critical); resent copies a minority (the
  share of records that are not their event_id's first copy, :func:`with_first_copy`, which the
  recompute numbers once for the check and for the views' first copies) and the days not empty
  (warnings). The conditions are columns of one projection and GX computes its metrics in a few bundled
  aggregations (its lists of unexpected values cost a scan each, so they are left out); only if a
  critical expectation fails is the suite run again, by a second checkpoint, to list the first failing
  records' keys.

A critical failure raises :class:`QualityFailed` before anything is written; warnings are kept and do
not block. Every expectation's result is appended to ``quality_results``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from infra.deployment import Deployment
from views import compile, tables, timebase
from views.model import Tumbling, View
from views.source import KEY, KIND, TIME, Source

if TYPE_CHECKING:
    import pandas as pd

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # the machine may be offline; nothing leaves it

#: The results of the checks in a :func:`docs_once` block, whose Data Docs are not updated yet.
_pending_docs: ContextVar[list | None] = ContextVar("lambdalake_pending_data_docs", default=None)
#: The share of a day's raw_events records that may be resent copies before a warning.
MOST_RESENT = 0.2
#: The boolean column that tells a raw_events record is its event_id's first received copy.
FIRST_COPY = "first_copy"
#: The suite parameter a view's reconciliation compares its counts' sums with.
UNIQUE_EVENTS = "unique_events"
#: Failing rows' keys kept per expectation in :attr:`Check.failing` and shown in :class:`QualityFailed`.
SHOWN = 20
#: Where a suite's ``meta`` keeps the fingerprint of the definition it was written from.
_FINGERPRINT = "lambdalake_definition"
#: The data sources, by the engine that hands GX the rows.
_SOURCES = {"spark": "lambdalake", "pandas": "lambdalake_rows"}


class QualityFailed(ValueError):
    """A critical expectation failed; nothing was written and the days stay as they were."""

    def __init__(self, message: str, check: Check | None = None):
        super().__init__(message)
        self.check = check


@dataclass(frozen=True)
class Check:
    """One checkpoint run: the suite, the days it covered and each expectation's outcome."""

    suite: str
    days: tuple[date, date]
    results: list[tuple[str, str, bool, str]]  # (expectation, severity, success, observed)
    #: A view's rows per UTC day of their window's start (every day that has rows).
    per_day: dict[date, int] = field(default_factory=dict)
    #: Expectation -> the keys of its first failing rows (a view's window and keys; a record's event_id,
    #: partition and offset), at most :data:`SHOWN`.
    failing: dict[str, list[dict]] = field(default_factory=dict)
    #: A view's checked rows themselves, as they were brought to the driver (for the caller to write).
    rows: pa.Table | None = None

    @property
    def failed(self) -> list[str]:
        return [e for e, severity, success, _ in self.results if not success and severity == "critical"]


@dataclass(frozen=True)
class Suite:
    """What one checkpoint runs: suite ``name``'s expectations on the rows an ``engine`` hands GX
    (``spark`` or ``pandas``), reported in ``result_format``; the checkpoint is ``checkpoint`` (by
    default the suite's name)."""

    name: str
    engine: str
    expectations: tuple
    result_format: dict
    checkpoint: str = ""

    @property
    def checkpoint_name(self) -> str:
        return self.checkpoint or self.name

    @cached_property
    def fingerprint(self) -> str:
        """The suite's definition (its expectations, and the data source of its asset), kept in the
        suite's ``meta``: the suite and its checkpoint are written again when it changes."""
        configs = [{k: v for k, v in e.configuration.to_json_dict().items() if k != "id"} for e in self.expectations]
        text = json.dumps([_SOURCES[self.engine], configs], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


#: One thread of this process at a time uses a GX project.
_in_process = threading.Lock()


@contextmanager
def _locked(home: str, exclusive: bool) -> Iterator[None]:
    """The deployment's GX project locked against the other processes using it (a backfill's runs in
    flight): exclusively while definitions or the Data Docs are written, shared while a checkpoint
    runs, since it reads the definitions (GX's file stores are not safe to write concurrently: a run
    once found a suite gone while another process rewrote it); and against this process's other
    threads (a recompute's views checked at once) in any case, since a GX context is not thread-safe.
    Never nested."""
    path = os.path.join(home, "gx", ".lambdalake.lock")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _in_process, open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: home -> the deployment's GX file context, loaded once per process (with its Data Docs' compiled
#: templates), again when another process may have written to it.
_contexts: dict[str, object] = {}


def _context(settings: Deployment, reload: bool = False):
    """The deployment's GX file context, made the current GX project (validation definitions and
    checkpoints look their stores up there). Loaded under the project's lock, which the caller holds
    to ``reload`` it (GX writes a new project's files as it loads it)."""
    from great_expectations.data_context.data_context.context_factory import project_manager

    home = str(settings.home)
    if reload:
        _contexts[home] = _load(home)
    elif home not in _contexts:
        with _locked(home, exclusive=True):
            _contexts[home] = _load(home)
    project_manager.set_project(_contexts[home])
    return _contexts[home]


def _load(home: str):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=home)
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # task logs, not terminals
    return context


def _source(context, engine: str):
    """The data source of ``engine``, as this module needs it (a Spark source that persists nothing: the
    caller caches what it reuses, and nothing GX cached would ever be released). Made when a suite of
    that engine is first stored: GX tries a new Spark source out on the process's SparkSession (or
    starts one), which exists by then, since the rows checked are its."""
    source = context.data_sources.all().get(_SOURCES[engine])
    if engine == "spark" and (source is None or source.type != "spark" or source.persist):
        return context.data_sources.add_or_update_spark(name=_SOURCES[engine], persist=False)
    if engine == "pandas" and (source is None or source.type != "pandas"):
        return context.data_sources.add_or_update_pandas(name=_SOURCES[engine])
    return source


#: (home, checkpoint) -> (what it was made from, checkpoint) of the checkpoints this process checked
#: or wrote.
_checkpoints: dict[tuple[str, str], tuple[tuple, object]] = {}


def _checkpoint(settings: Deployment, suite: Suite):
    """``suite``'s checkpoint in the file context: looked up once per process, written only if missing
    or made from another definition."""
    key = (str(settings.home), suite.checkpoint_name)
    made_from = (suite.fingerprint, json.dumps(suite.result_format, sort_keys=True))
    known = _checkpoints.get(key)
    if known is None or known[0] != made_from:
        context = _context(settings)
        with _locked(str(settings.home), exclusive=True):
            stored = _stored(context, suite)
            if stored is None:  # perhaps written by another process since this one loaded the project
                context = _context(settings, reload=True)
                stored = _stored(context, suite) or _store(context, suite)
            known = (made_from, stored)
        _checkpoints[key] = known
    return known[1]


def _stored(context, suite: Suite):
    """The checkpoint the file context holds for ``suite``, if it was written from this definition."""
    try:
        checkpoint = context.checkpoints.get(suite.checkpoint_name)
        [validation] = checkpoint.validation_definitions
        asset = validation.data.data_asset
        current = (
            validation.suite.meta.get(_FINGERPRINT) == suite.fingerprint
            and validation.suite.name == suite.name
            and asset.datasource.name == _SOURCES[suite.engine]
            and asset.name == suite.name
            and checkpoint.result_format == suite.result_format
            and not checkpoint.actions
        )
    except Exception:  # missing, or naming what no longer exists: written again
        return None
    return checkpoint if current else None


def _store(context, suite: Suite):
    """Write ``suite``, its asset and batch definition, validation definition and checkpoint."""
    import great_expectations as gx

    _forget_unreadable(context.validation_definition_store, context.validation_definitions, suite.name)
    _forget_unreadable(context.checkpoint_store, context.checkpoints, suite.checkpoint_name)
    source = _source(context, suite.engine)
    try:
        asset = source.get_asset(suite.name)
    except LookupError:
        asset = source.add_dataframe_asset(name=suite.name)
    try:
        batch = asset.get_batch_definition(suite.name)
    except (KeyError, LookupError):
        batch = asset.add_batch_definition_whole_dataframe(suite.name)
    expectations = [e.copy(update={"id": None}, deep=True) for e in suite.expectations]
    stored = context.suites.add_or_update(
        gx.ExpectationSuite(name=suite.name, expectations=expectations, meta={_FINGERPRINT: suite.fingerprint})
    )
    validation = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=suite.name, data=batch, suite=stored)
    )
    return context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=suite.checkpoint_name,
            validation_definitions=[validation],
            actions=[],
            result_format=suite.result_format,
        )
    )


def _forget_unreadable(store, factory, name: str) -> None:
    """Remove ``name`` from ``store`` if it is there but cannot be read (it names an asset that is gone,
    e.g. one of the Spark source a previous version checked the views' rows with): GX would neither
    load nor overwrite it."""
    key = store.get_key(name=name, id=None)
    if store.has_key(key):
        try:
            factory.get(name)
        except Exception:  # whatever made it unreadable, it is written again
            store.remove_key(key)


def reconciled(view: View) -> list[str]:
    """The view's count measures that count each of its events once (its windows tumble, no flag)."""
    if type(view.window) is not Tumbling:  # a Hopping window counts an event several times
        return []
    return [m.name for m in view.measures if m.kind == "count" and m.column is None]


def conditions(view: View) -> dict[str, str]:
    """The view's declared expectations (SQL conditions every row must meet) -> the boolean column of
    the checked rows that holds each (named by the condition, unless that is one of the view's columns)."""
    return {c: c if c not in view.columns else f"({c})" for c in dict.fromkeys(view.expectations)}


def view_expectations(view: View) -> list:
    """The view's declared expectations, as GX sees them (each condition's column true on every row),
    and its reconciliation with the suite parameter :data:`UNIQUE_EVENTS` (the days' valid unique
    events of its types in raw_events; needed if :func:`reconciled` names a measure)."""
    import great_expectations.expectations as gxe

    declared = [
        gxe.ExpectColumnValuesToBeInSet(column=column, value_set=[True], description=f"every row: {c}")
        for c, column in conditions(view).items()
    ]
    totals = [
        gxe.ExpectColumnSumToBeBetween(
            column=name,
            min_value={"$PARAMETER": UNIQUE_EVENTS},
            max_value={"$PARAMETER": UNIQUE_EVENTS},
            description=f"{name} sums to the days' valid unique {', '.join(view.event_types)} events in raw_events",
        )
        for name in reconciled(view)
    ]
    return declared + totals


def view_keys(view: View) -> list[str]:
    """The columns that name a view's row: its window (by its start) and keys."""
    return ["window_start", *view.keys]


@lru_cache(maxsize=64)
def view_suite(view: View) -> Suite:
    return Suite(
        f"view.{view.name}",
        "pandas",
        tuple(view_expectations(view)),
        {
            "result_format": "COMPLETE",
            "unexpected_index_column_names": view_keys(view),
            "return_unexpected_index_query": False,
        },
    )


#: The raw_events records' columns that name one (a missing event_id is a failure to list too).
RECORD_KEYS = (KEY, "partition", "offset")
#: The condition (and column) of a record in its own day's partition.
_OWN_DAY = f"event_date = to_date({TIME})"


def raw_events_expectations(source: Source) -> list:
    import great_expectations.expectations as gxe

    return [
        *(
            gxe.ExpectColumnValuesToNotBeNull(column=c, description=f"every event has {c}")
            for c in map(source.column, source.required)
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column=KIND, value_set=list(source.types), description="every event type is known"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column=_OWN_DAY, value_set=[True], description="every event is in its own day's partition"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column=FIRST_COPY,
            value_set=[True],
            mostly=1 - MOST_RESENT,
            severity="warning",
            description=f"at most {MOST_RESENT:.0%} of the records are resent copies",
        ),
        gxe.ExpectTableRowCountToBeBetween(min_value=1, severity="warning", description="the days have events"),
    ]


@lru_cache(maxsize=8)
def raw_events_suites(source: Source) -> tuple[Suite, Suite]:
    """raw_events' checkpoint for events of ``source``, and the one that runs the same suite again to list
    failing records' keys.

    The first reports counts only: GX would otherwise scan the records once more per expectation for
    its lists of unexpected values, whether any failed or not."""
    expectations = tuple(raw_events_expectations(source))
    return (
        Suite("raw_events", "spark", expectations, {"result_format": "SUMMARY", "partial_unexpected_count": 0}),
        Suite(
            "raw_events",
            "spark",
            expectations,
            {
                "result_format": "SUMMARY",
                "partial_unexpected_count": SHOWN,
                "unexpected_index_column_names": list(RECORD_KEYS),
                "return_unexpected_index_query": False,
            },
            checkpoint="raw_events.failing",
        ),
    )


@contextmanager
def docs_once(settings: Deployment) -> Iterator[None]:
    """Checks run in the block update the Data Docs once, when it ends (however it ends)."""
    results: list = []
    token = _pending_docs.set(results)
    try:
        yield
    finally:
        _pending_docs.reset(token)
        if results:
            context = _context(settings)
            with _locked(str(settings.home), exclusive=True):
                context.build_data_docs(resource_identifiers=results)


def _observed(result: dict) -> str:
    """What an expectation saw: its observed value, else how many rows it did not expect."""
    value: object = result.get("observed_value", result.get("unexpected_count"))
    return json.dumps(value.item() if hasattr(value, "item") else value, default=str)  # numpy's scalars as numbers


def _keys(result: dict) -> list[dict]:
    """The keys of the first failing rows a result lists (the checked columns themselves left out)."""
    names = result.get("unexpected_index_column_names") or []
    listed = result.get("unexpected_index_list") or result.get("partial_unexpected_index_list") or []
    return [{k: _text(row.get(k)) for k in names} for row in _listed(listed)[:SHOWN]]


def _listed(listed) -> list[dict]:
    """A result's failing rows, one dict each (GX lists them so, or column by column when it leaves the
    unexpected values out)."""
    rows = []
    for row in [listed] if isinstance(listed, dict) else listed:
        if isinstance(row, dict) and row and all(isinstance(v, list) for v in row.values()):
            rows += [dict(zip(row, values, strict=True)) for values in zip(*row.values(), strict=True)]
        elif isinstance(row, dict):
            rows.append(row)
    return rows


def _text(value) -> str | None:
    return None if value is None else value.isoformat() if isinstance(value, (date, datetime)) else str(value)


def _run(settings: Deployment, suite: Suite, rows: DataFrame | pd.DataFrame, parameters: dict | None):
    """Run ``suite``'s checkpoint on ``rows``; its one validation's results, and the run's identifiers
    (for the Data Docs)."""
    checkpoint = _checkpoint(settings, suite)
    with _locked(str(settings.home), exclusive=False):
        result = checkpoint.run(batch_parameters={"dataframe": rows}, expectation_parameters=parameters)
    [validation] = result.run_results.values()
    return validation, list(result.run_results)


def check(
    settings: Deployment,
    suite: Suite,
    rows: DataFrame | pd.DataFrame,
    start: datetime,
    end: datetime,
    parameters: dict | None = None,
    per_day: dict[date, int] | None = None,
    detail: Suite | None = None,
) -> Check:
    """Run ``suite``'s checkpoint on ``rows`` (of the days in ``[start, end)``; a Spark or pandas
    DataFrame, as the suite's engine takes) with suite ``parameters``; record every result in
    quality_results; raise :class:`QualityFailed` if a critical expectation failed, after running
    ``detail`` (the same suite, listing failing rows) if given."""
    context = _context(settings)
    validation, identifiers = _run(settings, suite, rows, parameters)
    order = {e.description: i for i, e in enumerate(suite.expectations)}
    outcomes = sorted(
        (
            (
                r.expectation_config.description or r.expectation_config.type,
                r.expectation_config.severity.value,
                bool(r.success),
                r.result,
            )
            for r in validation.results
        ),
        key=lambda outcome: order.get(outcome[0], len(order)),
    )  # in the suite's order
    if detail is not None and any(not ok and severity == "critical" for _, severity, ok, _ in outcomes):
        listed, more = _run(settings, detail, rows, parameters)
        identifiers += more
        lists = {r.expectation_config.description: r.result for r in listed.results}
    else:
        lists = {}
    pending = _pending_docs.get()
    if pending is None:
        with _locked(str(settings.home), exclusive=True):
            context.build_data_docs(resource_identifiers=identifiers)
    else:
        pending.extend(identifiers)
    days = (start.date(), (end - timebase.DAY).date())
    failing = {e: keys for e, _, ok, result in outcomes if not ok and (keys := _keys(lists.get(e, result)))}
    done = Check(
        suite.name,
        days,
        [(e, severity, ok, _observed(result)) for e, severity, ok, result in outcomes],
        per_day or {},
        failing,
    )
    now = datetime.now(timebase.UTC)
    tables.QUALITY_RESULTS.append(settings, [(now, suite.name, *days, *outcome) for outcome in done.results])
    if done.failed:
        shown = "; ".join(
            f"{e}: {', '.join(_shown(k) for k in done.failing[e][:3])}{' ...' if len(done.failing[e]) > 3 else ''}"
            for e in done.failed
            if done.failing.get(e)
        )
        raise QualityFailed(
            f"{suite.name} for {days[0]}..{days[1]}: failed {'; '.join(done.failed)}; nothing was "
            f"written and those days stay as they were; see {settings.data_docs}"
            + (f" (failing rows: {shown})" if shown else ""),
            done,
        )
    return done


def _shown(keys: dict) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in keys.items()) + ")"


def unique_events(events: DataFrame, start: datetime, end: datetime) -> dict[str, int]:
    """The valid unique events of each type in ``[start, end)`` among ``events`` (each event_id's
    first copy, views.compile.first_copies): one Spark job, which also fills ``events``' cache if it
    is cached and not filled yet (every partition is read). What :func:`check_view` reconciles with."""
    start, end = timebase.utc(start), timebase.utc(end)
    within = (F.col(TIME) >= F.lit(start)) & (F.col(TIME) < F.lit(end))
    return {r[KIND]: r["count"] for r in events.where(within).groupBy(KIND).count().collect()}


def check_view(
    settings: Deployment,
    view: View,
    rows: DataFrame,
    events: DataFrame | Mapping[str, int],
    start: datetime,
    end: datetime,
) -> Check:
    """Check ``view``'s rows for ``[start, end)`` (cache them if they are used again) against its
    suite, in one Spark job; the check tells the rows per day (:attr:`Check.per_day`) and holds the
    rows themselves (:attr:`Check.rows`).

    ``events``: the valid unique events of each type in ``[start, end)`` (:func:`unique_events`, once
    for every view), or the first copies of the raw_events records around the rows
    (views.compile.first_copies), to count here (one more Spark job)."""
    start, end = timebase.utc(start), timebase.utc(end)
    unique = None
    if reconciled(view):
        counts = unique_events(events, start, end) if isinstance(events, DataFrame) else events
        unique = sum(counts.get(kind, 0) for kind in view.event_types)
    columns = conditions(view)
    try:
        checked = rows.select(
            "*", *(F.coalesce(F.expr(c), F.lit(False)).alias(name) for c, name in columns.items())
        ).toArrow()
    except AnalysisException as e:
        raise ValueError(
            f"view {view.name}: its expectations {list(view.expectations)} are not all conditions "
            f"on its rows (columns {', '.join(view.columns)}): {e}"
        ) from None
    view_rows = checked.select(rows.columns)
    frame = checked.select([*dict.fromkeys([*view_keys(view), *reconciled(view)]), *columns.values()]).to_pandas()
    starts = frame["window_start"]
    starts = starts.dt.tz_convert("UTC") if starts.dt.tz is not None else starts.dt.tz_localize("UTC")
    per_day = {day: int(n) for day, n in starts.dt.date.value_counts().items()}
    done = check(settings, view_suite(view), frame, start, end, {UNIQUE_EVENTS: unique or 0}, per_day)
    return dataclasses.replace(done, rows=view_rows)


def with_first_copy(records: DataFrame) -> DataFrame:
    """``records`` with the column :data:`FIRST_COPY`: whether a record is its event_id's first received
    copy (the one views.compile.first_copies keeps). A recompute that numbers its records once, and
    caches them, serves both the raw_events check and the views' first copies
    (``records.where(FIRST_COPY).drop(FIRST_COPY)``) with that one shuffle."""
    first = Window.partitionBy(KEY).orderBy(*compile.RECEIPT_ORDER)
    return records.withColumn(FIRST_COPY, F.row_number().over(first) == 1)


def check_raw_events(settings: Deployment, events: DataFrame, start: datetime, end: datetime) -> Check:
    """Check raw_events' records of ``[start, end)`` against its suite, where they are: ``events``, the
    records (cached if they are used again), best with :data:`FIRST_COPY` (:func:`with_first_copy`);
    without it, the check numbers the days' records itself."""
    start, end = timebase.utc(start), timebase.utc(end)
    source = settings.source
    day = events.where(F.col("event_date").between(start.date(), (end - timebase.DAY).date()))
    numbered = FIRST_COPY in events.columns
    if not numbered:
        day = with_first_copy(day)
    keys = [c for c in RECORD_KEYS if c in events.columns]
    rows = day.select(
        *dict.fromkeys([*keys, *map(source.column, source.required), KIND]),
        F.coalesce(F.expr(_OWN_DAY), F.lit(False)).alias(_OWN_DAY),
        FIRST_COPY,
    )
    if not numbered:
        rows = rows.persist()  # the suite's few aggregations share the numbering's one shuffle
    try:
        cheap, detail = raw_events_suites(settings.source)
        # records without their Kafka coordinates: failing ones not listed
        return check(settings, cheap, rows, start, end, detail=detail if keys == list(RECORD_KEYS) else None)
    finally:
        if not numbered:
            rows.unpersist()
