"""Data quality through Great Expectations: an expectation suite for raw_events and one per view, each
run by its checkpoint on Spark over the rows a batch recompute is about to commit.

The GX project lives in the deployment home (``<home>/gx``, a file data context): a Spark data source
whose DataFrame assets are the batch layer's rows in flight, the suites, one checkpoint per suite and
the Data Docs, updated with each result, or once for every check of a block (:func:`docs_once`: a
recompute's seven checks update them once, since rendering the site's index is a good part of a
small check's time). The suites are built here, from the declarations, on every run: a view's
declared expectations (critical) plus reconciliation: for a view whose windows are tumbling, each
count of its events sums, over the days checked, to the valid unique events of its types in
raw_events (critical). raw_events is checked for the days' events: keys
present, known types, each in its own day's partition (critical); resent copies a minority and the
days not empty (warnings). A critical failure raises :class:`QualityFailed` before anything is written;
warnings are kept and do not block. Every expectation's result is appended to ``quality_results``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from infra.settings import Settings
from views import domain, tables, timebase
from views.model import Tumbling, View
from views.source import Source

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # the machine may be offline; nothing leaves it

#: The results of the checks in a :func:`docs_once` block, whose Data Docs are not updated yet.
_pending_docs: ContextVar[list | None] = ContextVar("lambdalake_pending_data_docs", default=None)
#: The share of a day's raw_events records that may be resent copies before a warning.
MOST_RESENT = 0.2


class QualityFailed(ValueError):
    """A critical expectation failed; nothing was written and the days stay as they were."""


@dataclass(frozen=True)
class Check:
    """One checkpoint run: the suite, the days it covered and each expectation's outcome."""

    suite: str
    days: tuple[date, date]
    results: list[tuple[str, str, bool, str]]  # (expectation, severity, success, observed)

    @property
    def failed(self) -> list[str]:
        return [e for e, severity, success, _ in self.results if not success and severity == "critical"]


def _context(settings: Settings):
    return _context_at(str(settings.home))


@lru_cache(maxsize=4)
def _context_at(home: str):
    """The deployment's GX file context, loaded once per process (with its Data Docs' compiled templates)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=home)
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # task logs, not terminals
    return context


def _every(condition: str, description: str, rows: str = "{batch}"):
    """A critical expectation: every row of ``rows`` (by default the batch) meets ``condition``."""
    from great_expectations.expectations import UnexpectedRowsExpectation

    return UnexpectedRowsExpectation(unexpected_rows_query=f"SELECT * FROM {rows} WHERE NOT coalesce({condition}, false)",
                                     description=description)


def reconciled(view: View) -> list[str]:
    """The view's count measures that count each of its events once (its windows tumble, no flag)."""
    if type(view.window) is not Tumbling:  # noqa: E721 (a Hopping window counts an event several times)
        return []
    return [m.name for m in view.measures if m.kind == "count" and m.column is None]


def view_expectations(view: View, unique_events: int | None = None) -> list:
    """The view's declared expectations, and its reconciliation with ``unique_events`` (the days' valid
    unique events of its types in raw_events; needed if :func:`reconciled` names a measure)."""
    declared = [_every(e, f"every row: {e}") for e in view.expectations]
    totals = [_every(f"total = {unique_events}", f"{name} sums to the days' valid unique "
                     f"{', '.join(view.event_types)} events in raw_events",
                     f"(SELECT coalesce(sum({name}), 0) AS total FROM {{batch}})") for name in reconciled(view)]
    return declared + totals


def raw_events_expectations(source: Source) -> list:
    import great_expectations.expectations as gxe

    return [
        *(gxe.ExpectColumnValuesToNotBeNull(column=c, description=f"every event has {c}")
          for c in map(source.column, source.required)),
        gxe.ExpectColumnValuesToBeInSet(column="event_type", value_set=list(source.types),
                                        description="every event type is known"),
        _every("event_date = to_date(event_time)", "every event is in its own day's partition"),
        gxe.ExpectColumnProportionOfUniqueValuesToBeBetween(
            column="event_id", min_value=1 - MOST_RESENT, severity="warning",
            description=f"at most {MOST_RESENT:.0%} of the records are resent copies"),
        gxe.ExpectTableRowCountToBeBetween(min_value=1, severity="warning", description="the days have events"),
    ]


@contextmanager
def docs_once(settings: Settings) -> Iterator[None]:
    """Checks run in the block update the Data Docs once, when it ends (however it ends)."""
    results: list = []
    token = _pending_docs.set(results)
    try:
        yield
    finally:
        _pending_docs.reset(token)
        if results:
            _context(settings).build_data_docs(resource_identifiers=results)


def _checkpoint(context, name: str, expectations: list):
    """The checkpoint of suite ``name`` (made or updated from ``expectations``)."""
    import great_expectations as gx

    suite = context.suites.add_or_update(gx.ExpectationSuite(name=name, expectations=expectations))
    source = context.data_sources.add_or_update_spark(name="lambdalake")
    asset = source.add_dataframe_asset(name=name)
    batch = asset.add_batch_definition_whole_dataframe(name)
    validation = context.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    return context.checkpoints.add_or_update(gx.Checkpoint(
        name=name, validation_definitions=[validation], actions=[]))


def check(settings: Settings, name: str, expectations: list, rows: DataFrame, start: datetime,
          end: datetime) -> Check:
    """Run suite ``name`` on ``rows`` (of the days in ``[start, end)``); record every result in
    quality_results; raise :class:`QualityFailed` if a critical expectation failed."""
    context = _context(settings)
    result = _checkpoint(context, name, expectations).run(batch_parameters={"dataframe": rows})
    pending = _pending_docs.get()
    if pending is None:
        context.build_data_docs(resource_identifiers=list(result.run_results))
    else:
        pending.extend(result.run_results)
    [validation] = result.run_results.values()
    days = (start.date(), (end - timebase.DAY).date())
    done = Check(name, days, [(r.expectation_config.description or r.expectation_config.type,
                               r.expectation_config.severity.value, bool(r.success),
                               json.dumps(r.result.get("observed_value"), default=str))
                              for r in validation.results])
    now = datetime.now(timebase.UTC)
    schema = tables.QUALITY_RESULTS.schema
    write_deltalake(tables.QUALITY_RESULTS.path(settings), pa.Table.from_pylist(
        [dict(zip(schema.names, (now, name, *days, *outcome))) for outcome in done.results], schema), mode="append")
    if done.failed:
        raise QualityFailed(f"{name} for {days[0]}..{days[1]}: failed {'; '.join(done.failed)}; nothing was "
                            f"written and those days stay as they were; see {settings.data_docs}")
    return done


def check_view(settings: Settings, view: View, rows: DataFrame, events: DataFrame, start: datetime,
               end: datetime) -> Check:
    """Check ``view``'s rows for ``[start, end)`` against its suite; ``events``: the first copies of the
    raw_events records around them (views.compile.first_copies)."""
    unique = None
    if reconciled(view):
        unique = events.where(F.col("event_type").isin(*view.event_types)
                              & (F.col("event_time") >= start) & (F.col("event_time") < end)).count()
    return check(settings, f"view.{view.name}", view_expectations(view, unique), rows, start, end)


def check_raw_events(settings: Settings, events: DataFrame, start: datetime, end: datetime) -> Check:
    """Check raw_events' records of ``[start, end)`` against its suite."""
    day = events.where(F.col("event_date").between(start.date(), (end - timebase.DAY).date()))
    return check(settings, "raw_events", raw_events_expectations(domain(settings.domain).source), day, start, end)
