"""Reprocess: rebuild views with the code deployed now into new versions of their batch tables, then
switch serving to all of them at once (blue/green; lake.versions).

For each chosen view, a new table ``batch/<view>@<label>`` gets the view's rows of the chosen days,
computed as the nightly recompute computes them (compile.batch, the Great Expectations suites, the
correction report), and the rows of every other day copied from the version serving now, so that the
new version is complete. Reprocessing all history recomputes every ended day of raw_events and copies
nothing. Only once every view is built are they all switched in one commit of the pointer table, and
then the days newly final are recorded in the ledger (the days that were final keep their entry: a
switch back carries over only the days recorded since). Until the switch, readers see the versions
serving before, whole; if anything fails before it, the new tables are deleted and nothing else changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from batch_layer.recompute import Written, checked_events, each_view, write_days
from infra import storage
from infra.deployment import Deployment
from lake import ledger, versions
from views import tables, timebase
from views.model import View


@dataclass(frozen=True)
class Plan:
    """What to reprocess: views, into which version, and which days (``first``..``last``)."""

    views: tuple[str, ...]
    label: str
    first: date
    last: date
    #: Copy the days outside first..last from the serving versions (not when reprocessing all history).
    copy_others: bool = True

    @property
    def start(self) -> datetime:
        return timebase.day_start(self.first)

    @property
    def end(self) -> datetime:
        return timebase.day_start(self.last) + timebase.DAY


def history(settings: Deployment) -> tuple[date, date]:
    """The first and last day of raw_events (read from its partitions, no Spark job)."""
    raw_events = tables.RAW_EVENTS.opened(settings)
    if raw_events is None:
        raise FileNotFoundError(
            f"no raw_events table at {tables.RAW_EVENTS.path(settings)}: start the speed layer (`lambdalake up`)"
        )
    days = [date.fromisoformat(p["event_date"]) for p in raw_events.partitions()]
    if not days:
        raise ValueError("raw_events has no events yet")
    return min(days), max(days)


def _day(value: date | str | None) -> date | None:
    return date.fromisoformat(value) if isinstance(value, str) else value


def plan(
    settings: Deployment,
    label: str,
    views: Iterable[str] | None = None,
    first: date | str | None = None,
    last: date | str | None = None,
    all_history: bool = False,
) -> Plan:
    """Check a reprocess's arguments (ISO days or dates); ValueError says what is wrong."""
    known = settings.views
    views = tuple(dict.fromkeys(views or known))
    unknown = [name for name in views if name not in known]
    if unknown or not views:
        raise ValueError(f"unknown view(s) {', '.join(unknown) or '(none given)'}; known views: {', '.join(known)}")
    versions.check_label(settings, views, label)
    first, last = _day(first), _day(last)
    yesterday = datetime.now(timebase.UTC).date() - timebase.DAY
    if all_history:
        if first or last:
            raise ValueError("give either the days to reprocess or all history, not both")
        first, last = history(settings)
        last = min(last, yesterday)
    elif first is None or last is None:
        raise ValueError("give the days to reprocess (a first and a last day), or all history")
    if last > yesterday:
        raise ValueError(f"{last} has not ended yet (UTC): batch computes whole past days")
    if first > last:
        raise ValueError(f"no days from {first} to {last}")
    return Plan(views, label, first, last, copy_others=not all_history)


def _copy_others(
    spark: SparkSession, settings: Deployment, plan: Plan, view: str, source: tuple[str, int | None], target: str
) -> None:
    """Append to ``target`` the rows of the serving version ``source`` (table, Delta version) outside the
    plan's days."""
    table, version = source
    if version is None:
        return
    rows = (
        spark.read.format("delta")
        .option("versionAsOf", version)
        .load(settings.table(table))
        .where((F.col("window_start") < F.lit(plan.start)) | (F.col("window_start") >= F.lit(plan.end)))
    )
    built = spark.read.format("delta").load(target).columns
    if rows.columns != built:
        raise ValueError(
            f"{view}'s columns changed ({', '.join(rows.columns)} -> {', '.join(built)}): the days "
            f"outside {plan.first}..{plan.last} cannot be copied; reprocess all history"
        )
    rows.write.format("delta").mode("append").save(target)


def build(
    spark: SparkSession,
    settings: Deployment,
    views: list[View],
    plan: Plan,
    based_on: dict[str, tuple[str, int | None]],
) -> dict[str, Written]:
    """Build every view's new version (see the module doc) from the serving versions of ``based_on``
    (versions.snapshot); per view, what was written of the recomputed days. If any fails, the new tables
    are deleted."""
    targets = {view.name: tables.batch(view.name, plan.label).path(settings) for view in views}
    for target in targets.values():
        storage.delete(target)  # a failed attempt's
    try:
        with checked_events(spark, settings, views, plan.start, plan.end) as (events, unique, checked):

            def build_view(view: View) -> Written:
                written = write_days(
                    spark, settings, view, events, plan.start, plan.end, targets[view.name], unique, checked
                )
                if plan.copy_others:
                    _copy_others(spark, settings, plan, view.name, based_on[view.name], targets[view.name])
                return written

            return each_view(build_view, views)
    except BaseException:
        discard(settings, plan)
        raise


def discard(settings: Deployment, plan: Plan) -> None:
    """Delete the plan's new tables."""
    for view in plan.views:
        storage.delete(tables.batch(view, plan.label).path(settings))


@dataclass(frozen=True)
class Reprocessed:
    """What a reprocess did to a view: the version it serves now and the one before (None: the view had
    none), the rows recomputed for the plan's days (``first..last``), and the days it made final."""

    label: str
    previous: str | None
    rows: int
    days: str
    newly_final: str


def publish(
    settings: Deployment, plan: Plan, built: dict[str, Written], based_on: dict[str, tuple[str, int | None]]
) -> dict[str, Reprocessed]:
    """Switch every view of ``built`` to its new version in one commit, then record the days it made
    final; per view, what changed. If a serving version changed meanwhile, nothing is switched and the
    new tables are deleted (versions.Conflict)."""
    days = timebase.days_between(plan.start, plan.end)
    final = ledger.final_days(settings)
    newly = {view: [day for day in days if day not in final.get(view, set())] for view in built}
    at = datetime.now(timebase.UTC)
    try:
        versions.switch(settings, {view: tables.batch(view, plan.label).name for view in built}, at, based_on)
    except versions.Conflict:
        discard(settings, plan)
        raise
    ledger.record(
        settings, [entry for view, written in built.items() for entry in written.entries(view, newly[view], at)]
    )
    return {
        view: Reprocessed(
            plan.label,
            versions.label(based_on[view][0]) if based_on[view][1] is not None else None,
            sum(written.rows.values()),
            f"{plan.first}..{plan.last}",
            timebase.spans(newly[view]),
        )
        for view, written in built.items()
    }


def reprocess(spark: SparkSession, settings: Deployment, plan: Plan) -> dict[str, Reprocessed]:
    """Run ``plan`` on ``spark`` (a session of the batch engine): build every view's new version, then switch."""
    known = settings.views
    based_on = versions.snapshot(settings, plan.views)
    built = build(spark, settings, [known[name] for name in plan.views], plan, based_on)
    return publish(settings, plan, built, based_on)
