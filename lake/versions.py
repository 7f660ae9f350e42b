"""Which table serves each view's batch rows: the versions of a view's batch table and the switches
between them (blue/green).

A view's batch rows live in one Delta table per *version*: ``batch/<view>``, its first, and
``batch/<view>@<label>`` for each reprocess (batch_layer.reprocess). The pointer table
``serving_versions`` has a row per view ever switched: the table serving it (``table``), when it was
switched to (``switched_at``) and the table it replaced (``previous_table``, which can be switched
back to). A view without a row is served by its first version. A switch of any number of views is one
Delta commit, so readers see all of them switch at once.

The order of writes and reads keeps every day whole: writers commit a batch table, then the pointers,
then the ledger (``serving_state``); readers read the ledger, then the pointers, then the tables these
name. So no reader sees a day final whose rows the table it reads lacks. A switch back first copies
into the previous version the days the ledger recorded since the switch (a reprocess records only the
days it made newly final, at the switch's time), for the same reason.

Everything here is delta-rs, no Spark job; the pointers and the copied days are written with
``infra.delta`` (``upsert``, ``replace``), imported only when writing, so that readers and DAG files
import no Spark.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import date, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from infra import storage
from infra.deployment import Deployment
from lake import ledger
from views import tables, timebase

#: A version's label: lowercase letters, digits, ``-`` and ``_`` (a JSON schema pattern, for the DAG's form too).
LABEL = "^[a-z0-9][a-z0-9_-]{0,39}$"
#: What a view's first version (``batch/<view>``) is called.
INITIAL = "initial"


class Conflict(RuntimeError):
    """A table serving a view changed while a switch or recompute was under way; nothing was switched
    or recorded."""


@dataclass(frozen=True)
class Pointer:
    """A switched view's row of ``serving_versions``: the table serving it, since when, and the one it
    replaced (None once that is retired)."""

    view: str
    table: str
    switched_at: datetime
    previous_table: str | None


@dataclass(frozen=True)
class Version:
    """The version serving a view (its label), since when (None: its first, never switched), and the
    label it can be switched back to."""

    label: str
    since: str | None
    previous: str | None


@dataclass(frozen=True)
class SwitchedBack:
    """A view switched back: the version serving it again, and the days carried over into it."""

    label: str
    carried_days: str


def label(table: str) -> str:
    """The label of the version stored in ``table``."""
    return table.partition("@")[2] or INITIAL


def pointers(settings: Deployment, rows: pa.Table | None = None) -> dict[str, Pointer]:
    """The pointer of each switched view, from ``rows`` (a version of the pointer table already read)
    or else from the table now."""
    rows = tables.SERVING_VERSIONS.rows(settings) if rows is None else rows
    return {} if rows is None else {row["view"]: Pointer(**row) for row in rows.to_pylist()}


def _serving(rows: dict[str, Pointer], view: str) -> str:
    return rows[view].table if view in rows else tables.batch(view).name


def serving(settings: Deployment, views: Iterable[str], rows: dict[str, Pointer] | None = None) -> dict[str, str]:
    """The path of the table serving each of ``views``, by the pointer rows ``rows`` (default: read now)."""
    rows = pointers(settings) if rows is None else rows
    return {view: settings.table(_serving(rows, view)) for view in views}


def current(settings: Deployment, view: str) -> str:
    """The path of the table serving ``view`` now: where its batch rows are read and written."""
    return serving(settings, [view])[view]


def describe(settings: Deployment, views: Iterable[str]) -> dict[str, Version]:
    """Per view, the version serving it, since when, and the one it can be switched back to."""
    rows = pointers(settings)
    described = {}
    for view in views:
        row = rows.get(view)
        described[view] = Version(
            label(_serving(rows, view)),
            row.switched_at.isoformat() if row else None,
            label(row.previous_table) if row and row.previous_table else None,
        )
    return described


def check_label(settings: Deployment, views: Iterable[str], new: str) -> None:
    """Refuse a label that breaks :data:`LABEL`, or that names a version serving one of ``views`` or kept
    to switch back to. (Any other table of that label, left by a failed attempt, is built again.)"""
    if not isinstance(new, str) or not re.fullmatch(LABEL, new) or new == INITIAL:
        raise ValueError(f"label {new!r}: use 1 to 40 lowercase letters, digits, - and _ (not {INITIAL!r})")
    rows = pointers(settings)
    used = [
        v
        for v in views
        if tables.batch(v, new).name in (_serving(rows, v), rows[v].previous_table if v in rows else None)
    ]
    if used:
        raise ValueError(
            f"label {new!r} is in use by {', '.join(used)} (serving or kept to switch back to); choose another"
        )


def _version(path: str) -> int | None:
    table = tables.opened(path)
    return None if table is None else table.version()


def snapshot(settings: Deployment, views: Iterable[str]) -> dict[str, tuple[str, int | None]]:
    """Each view's serving table and its Delta version (None: no table yet): what a switch builds on."""
    rows = pointers(settings)
    return {view: (_serving(rows, view), _version(settings.table(_serving(rows, view)))) for view in views}


def _write(settings: Deployment, rows: list[Pointer]) -> None:
    """Upsert pointers, all in one commit."""
    from infra.delta import upsert

    pointers_table = tables.SERVING_VERSIONS
    upsert(
        pa.Table.from_pylist([asdict(row) for row in rows], pointers_table.schema),
        pointers_table.path(settings),
        ("view",),
    )


def switch(
    settings: Deployment, tables: dict[str, str], at: datetime, based_on: dict[str, tuple[str, int | None]]
) -> None:
    """Serve each view of ``tables`` from the table named there, all in one commit; the tables they
    replace become their previous versions. ``based_on`` is the :func:`snapshot` the new tables were
    built from: if a serving table was written or switched since, nothing is switched (:class:`Conflict`)."""
    now = snapshot(settings, tables)
    moved = [view for view in tables if now[view] != based_on[view]]
    if moved:
        raise Conflict(
            f"{', '.join(moved)}: the serving version was written or switched while this ran "
            f"(another recompute or switch); nothing was switched, run again"
        )
    _write(
        settings,
        [
            Pointer(view, table, at, now[view][0] if now[view][1] is not None else None)
            for view, table in tables.items()
        ],
    )


def require_serving(settings: Deployment, view: str, path: str) -> None:
    """Raise :class:`Conflict` unless ``path`` still serves ``view`` (a recompute checks this after writing
    its rows and before recording its days final: a switch in between would leave them unserved)."""
    if current(settings, view) != path:
        raise Conflict(
            f"{view}: serving switched to {current(settings, view)} while rows were written to "
            f"{path}; no day was recorded final, run again"
        )


def _changed_days(settings: Deployment, view: str, since: datetime) -> list[date]:
    """The days of ``view`` the ledger records computed at or after ``since``."""
    return sorted(entry.day for entry in ledger.entries(settings) if entry.view == view and entry.computed_at >= since)


def _carry(settings: Deployment, view: str, source: str, target: str, days: list[date]) -> None:
    """Replace the rows of ``days`` in table ``target`` by those in ``source``."""
    from infra.delta import replace

    rows, into = tables.dataset(settings.table(source)), settings.table(target)
    if rows.schema.names != tables.columns(into).names:
        raise ValueError(
            f"cannot switch {view} back: {label(source)} has days the previous version lacks "
            f"({timebase.spans(days)}) and other columns than it; reprocess instead"
        )
    for first, last in timebase.ranges(days):
        start, end = timebase.day_start(first), timebase.day_start(last) + timebase.DAY
        found = rows.to_table(filter=(pc.field("window_start") >= start) & (pc.field("window_start") < end))
        replace(found, into, f"window_start >= '{start.isoformat()}' AND window_start < '{end.isoformat()}'")


def switch_back(settings: Deployment, views: Iterable[str]) -> dict[str, SwitchedBack]:
    """Serve each of ``views`` from its previous version again, all in one commit (and the version left
    becomes the previous one). The days the version being left made final or recomputed since it was
    switched to are first copied into the previous version, so it lacks no final day. Per view, the
    version now serving and the days carried over."""
    rows, views = pointers(settings), list(views)
    back = {v: previous for v in views if v in rows and (previous := rows[v].previous_table)}
    missing = [v for v in views if v not in back or not tables.exists(settings.table(back[v]))]
    if missing:
        raise ValueError(
            f"no previous version to switch back to for {', '.join(missing)} (never switched, "
            f"no table before its switch, or past version_retention_days)"
        )
    based_on = snapshot(settings, views)
    carried = {}
    for view in views:
        carried[view] = _changed_days(settings, view, rows[view].switched_at)
        if carried[view]:
            _carry(settings, view, rows[view].table, back[view], carried[view])
    switch(settings, {v: back[v] for v in views}, datetime.now(timebase.UTC), based_on)
    return {v: SwitchedBack(label(back[v]), timebase.spans(carried[v])) for v in views}


def retire(settings: Deployment) -> list[str]:
    """Delete the versions that serve no view and may not be switched back to: a previous version is kept
    ``version_retention_days`` after the switch away from it (then its pointer is cleared, first); any
    other version not serving (a failed reprocess's, one replaced twice) once it was not written for as
    long. A serving version never goes. The names of the tables deleted."""
    now, kept = datetime.now(timebase.UTC), timedelta(days=settings.version_retention_days)
    rows = pointers(settings)
    expired = [row for row in rows.values() if row.previous_table and now - row.switched_at >= kept]
    if expired:
        _write(settings, [replace(row, previous_table=None) for row in expired])
    keep = {row.previous_table for row in rows.values() if row.previous_table and row not in expired}
    gone = []
    for location in storage.folders(settings.table(tables.BATCH)):
        view, _, version = location.rpartition("/")[2].partition("@")
        name = tables.batch(view, version or None).name
        if name == _serving(rows, view) or name in keep:
            continue
        if now.timestamp() - storage.last_written(location) >= kept.total_seconds():
            storage.delete(location)
            gone.append(name)
    return gone
