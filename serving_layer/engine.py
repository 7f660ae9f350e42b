"""The query engine analysts use: DuckDB over the Delta tables (read with delta-rs), no JVM.

Every declared view is a SQL view of the same name: batch rows of its final days and speed rows of the
others (lake.merge); the master dataset and dead letters are there too, as ``raw_events`` and
``dead_letters``. An :class:`Engine` serves many queries: it opens a table again only when its Delta
log changed, and runs each query in the sandbox (``serving_layer/sandbox.py``) on a cursor of its own,
so readers run side by side. A query still running after ``query_fast_lane_seconds`` (longer if others
kept it off the cores meanwhile: :data:`FAST_LANE_CPU_SHARE`) is stopped and run again, for the rest of
its time limit, in the slow lane: one query at a time, on a thread of lower CPU priority, so that a few
long queries cannot take the cores from the many short ones, nor the memory: a query of the fast lane
refused for memory stops the slow lane's and runs again.

Each version of the other tables the views read (the ledger, the version pointers, the batch tables,
the dimensions) is copied once into DuckDB's own storage, where a point query takes a millisecond; the
master dataset, dead letters and speed partials, which grow with every micro-batch, are scanned in
place. A local table's new version is read from its new commits in the Delta log alone
(serving_layer.table_files; delta-rs builds a dataset of 10,000 files in 5 s): a copy takes the files a
version only added, and a version that only rearranged rows (``dataChange`` false: the speed layer's
packing, OPTIMIZE) copies nothing.
Each view's two parts (lake.merge.merged_parts: batch rows of its final days, speed rows of the
others) are kept as tables too, and the view is their union: DuckDB binds and plans that in a third of
the time it takes for the merge's SQL, which was most of a point query's. The speed part keeps each
window's folded states (lake.merge.folded_sql), so the files a micro-batch adds are folded, in place,
into the windows they touch (lake.merge.refolded_sql): its cost is the micro-batch's, not the day's;
and the days a batch run makes final are left out of a copy of it.

A view's batch rows come from the version of its batch table that ``serving_versions`` names
(lake.versions): the engine reads the ledger, then the pointers, then the batch tables, so a
switch shows at the next query, whole, and a query runs on one state (one version of each table).

One query at a time brings the state up to date (a refresh), before it runs: the others do not wait
for it. A query that arrives during a refresh runs on the state the last refresh left, if that refresh
read the tables it reads and began at most :data:`FOLLOW_SECONDS` before the one under way; else it
waits and refreshes in turn. So a micro-batch's fold, or a version switch's copies, hold up only the
query that makes them, and a query still sees every version committed a little before it arrived. A
long-lived engine (the HTTP API's) also watches the Delta logs of the tables queries read
(:meth:`Engine.watch`) and refreshes as soon as one commits: then no query makes the folds.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import duckdb
import pyarrow.dataset as ds
from inotify_simple import INotify, flags

from infra import processes, storage
from infra.deployment import Deployment
from lake import versions
from lake.merge import (
    batch_relation,
    final_days_sql,
    folded_sql,
    merged_parts,
    partials_of,
    refolded_sql,
    speed_rows_sql,
)
from lake.sketches import sketch_functions
from serving_layer import sandbox
from serving_layer.table_files import TableFiles
from views import tables
from views.model import View


def base_tables(settings: Deployment) -> tuple[str, ...]:
    """The deployment's tables besides the views, in the order they are read: the domain's dimensions and
    their changes, then the platform's (:data:`views.tables.PLATFORM`)."""
    dimensions = (
        table for declared in settings.dimensions for table in (tables.changes(declared), tables.dimension(declared))
    )
    return tuple(table.name for table in (*dimensions, *tables.PLATFORM))


#: Tables scanned in place (as Arrow datasets) rather than copied into DuckDB at each version.
SCANNED = frozenset({tables.RAW_EVENTS.name, tables.DEAD_LETTERS.name, tables.SPEED_PARTIALS.name})
#: The slow lane's thread runs at this niceness (the process's threads at 0 take the cores first).
SLOW_LANE_NICENESS = 10
#: A query leaves the fast lane after ``query_fast_lane_seconds`` once its thread had this share of them
#: on a core, and after this many times them in any case (a scan of the master dataset works on Arrow's
#: threads too). Beside 20 clients sending runaway queries (bench.reliability's hostile queries), a
#: point query kept off the cores for 0.2 s was sent to the slow lane, to wait there behind a 30 s query
#: (in a probe, one of 50,913 took 15 s); a fast lane of 0.2 s of CPU time kept them, but took the point
#: queries' p99 from 31 to 41-51 ms: the runaway queries had the cores longer. With this: 31-34 ms.
FAST_LANE_CPU_SHARE, FAST_LANE_STRETCH = 0.1, 5
#: Seconds a query is given to stop once interrupted at its time limit.
STOPPING_SECONDS = 1.0
#: What a query in the slow lane that gave way to the fast lane's (:meth:`Engine._make_way`) is told.
GAVE_WAY = (
    "stopped: other queries needed the memory it held (setting query_memory_limit); "
    "narrow the query with WHERE or aggregate"
)
#: How many checked queries an engine remembers (it forgets them all when it has this many).
PASSED = 10_000
#: A query that arrives during a refresh runs on the last state if the refresh that made it began at
#: most this many seconds before the one under way (refreshes follow each other under load).
FOLLOW_SECONDS = 0.25
#: The watcher (:meth:`Engine.watch`) keeps a table up to date while a query read it this recently.
WATCHED_SECONDS = 60.0
#: The name of a commit's file in a Delta log (Spark renames it into place, delta-rs links it).
COMMIT = re.compile(r"\d{20}\.json")


def _utc_day(moment: datetime) -> date:
    """The UTC day of ``moment`` (a time without an offset is in UTC)."""
    return (moment.astimezone(UTC) if moment.tzinfo else moment).date()


@dataclass(frozen=True, eq=False)
class _State:
    """What a cursor has registered: by name, each table's data (an Arrow dataset, or the name of its
    copy in the database), and each merged view's SQL (over ``parts``, tables of the database)."""

    tables: dict = field(default_factory=dict)
    views: dict[str, str] = field(default_factory=dict)
    parts: frozenset[str] = frozenset()


def _held(state: _State) -> set[str]:
    """The tables of the database that ``state`` reads: its copies and its views' parts."""
    return {data for data in state.tables.values() if isinstance(data, str)} | state.parts


@dataclass(frozen=True)
class _Part:
    """A part of a merged view (``lake.merge.merged_parts``) kept as a table of the database: what it was
    made from (the ledger's copy and the batch table's, :meth:`Engine._contents`, or the partials' changes
    seen), the SQL that reads it as the view's rows, its rows, and the rows deleted from it since it was
    made (the database holds those until the table is dropped)."""

    table: str
    made_from: tuple
    reads: str
    rows: int
    deleted: int = 0


@dataclass(eq=False)
class _SlowRun:
    """The query running in the slow lane: its connection, whether it was told to give way to the fast
    lane's queries (:meth:`Engine._make_way`), and whether it stopped."""

    con: duckdb.DuckDBPyConnection
    gave_way: bool = False
    stopped: threading.Event = field(default_factory=threading.Event)


class _Cursor:
    """A cursor of the engine's database and what is registered on it: the tables and views of a state
    that its queries named."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con
        #: What is registered, by name: each table's data (as a :class:`_State` holds it), each view's SQL.
        self.tables: dict = {}
        self.views: dict[str, str] = {}
        #: The slow lane's run of a query on this cursor that its caller stopped waiting for.
        self.abandoned: Future | None = None

    def sync(self, state: _State, names: set[str] | None) -> None:
        """Register the tables and views of ``state`` among ``names`` (lower case; None: all), as they are
        in it, and drop what is registered as it is not (no version is kept past its state). A point
        query of a view registers the view's SQL alone, not each micro-batch's new dataset of partials."""
        for name in [name for name, sql in self.views.items() if state.views.get(name) != sql]:
            self.con.execute(f'DROP VIEW "{name}"')
            del self.views[name]
        for name in [name for name, data in self.tables.items() if state.tables.get(name) is not data]:
            self.con.unregister(name)
            del self.tables[name]
        for name, data in state.tables.items():
            if name in self.tables or (names is not None and name.lower() not in names):
                continue
            if isinstance(data, str):
                self.con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS FROM "{data}"')
            else:
                self.con.register(name, data)
            self.tables[name] = data
        for name, sql in state.views.items():
            if name not in self.views and (names is None or name.lower() in names):
                self.con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS {sql}')
                self.views[name] = sql


class Engine:
    """One sandboxed DuckDB database over a deployment's Delta tables, kept for many queries."""

    def __init__(self, settings: Deployment):
        self.settings = settings
        self._views = settings.views
        #: The tables by relation name; the batch tables last, since the version pointers name them.
        self._tables = {name: TableFiles(settings.table(name)) for name in base_tables(settings)}
        self._tables.update(
            {
                batch_relation(name): TableFiles(path)
                for name, path in versions.serving(settings, self._views, {}).items()
            }
        )
        self._copies = itertools.count()
        #: The merged views' parts, by view and part, and the rows of each copy.
        self._parts: dict[tuple[str, str], _Part] = {}
        self._rows: dict[str, int] = {}
        #: The database; only a refresh (one at a time: ``_refreshing``) uses it, and ``_spare``, a cursor
        #: of it, makes the queries' cursors and drops unused tables (under ``_lock``, which guards the rest).
        self._db = sandbox.connect(settings.query_memory_limit, settings.query_threads)
        sketch_functions(self._db)
        self._spare = self._db.cursor()
        self._state, self._lock, self._refreshing = _State(), threading.Lock(), threading.Lock()
        #: When the refresh under way began (None: none is), and by table, when the last refresh that read
        #: it began (a batch table counts as read only by a refresh that brought its view's parts up to date).
        self._refresh_began: float | None = None
        self._read_at: dict[str, float] = {}
        #: By table, when a query last asked for it (what the watcher watches), and the engine's end.
        self._asked: dict[str, float] = {}
        self._closed = threading.Event()
        self._idle: list[_Cursor] = []
        #: States that queries are running on, and copies no longer current (dropped once unused).
        self._running: Counter[_State] = Counter()
        self._retired: set[str] = set()
        #: Queries that passed the sandbox's check, with the relations they were checked against.
        self._passed: dict[str, set[str]] = {}
        #: Queries parsed so far, with the relations each names (:func:`sandbox.named`; None if it did not parse).
        self._reads: dict[str, set[str] | None] = {}
        #: How many versions of each table were copied into the database so far.
        self._copied: Counter[str] = Counter()
        self._slow_lane = ThreadPoolExecutor(1, "query-slow-lane", _lower_priority)
        #: The query running in the slow lane, and how many ran there so far.
        self._slow_run: _SlowRun | None = None
        self._slow_runs = 0

    def _refresh(self, needed: set[str] | None = None, fold: bool = True) -> _State:
        """What is registered now (called with ``_refreshing`` held): :meth:`_bring_up_to_date`, its
        start and the tables it read noted for the queries that arrive meanwhile (:meth:`_follows`)."""
        began = time.monotonic()
        with self._lock:
            self._refresh_began = began
        try:
            state = self._bring_up_to_date(needed, fold)
        except BaseException:
            with self._lock:
                self._refresh_began = None
            raise
        read = self._tables.keys() if needed is None else needed & self._tables.keys()
        views = {batch_relation(name) for name in self._views}
        with self._lock:
            self._refresh_began = None
            self._read_at.update({name: began for name in read if fold or name not in views})
        return state

    def _follows(self, reads: set[str] | None) -> bool:
        """Whether a query reading the tables ``reads`` (None: all) can run on the current state while
        a refresh is under way: the last refresh that read them began at most :data:`FOLLOW_SECONDS`
        before it (called with ``_lock`` held)."""
        if self._refresh_began is None:
            return False
        since = self._refresh_began - FOLLOW_SECONDS
        return all(self._read_at.get(name, since - 1) >= since for name in (self._tables if reads is None else reads))

    def _bring_up_to_date(self, needed: set[str] | None, fold: bool) -> _State:
        """The tables ``needed`` (default: all) opened again if their Delta log changed, and, if ``fold``,
        the parts of the views whose batch table is among them brought up to date; copies the new
        versions of the tables not :data:`SCANNED` (unless a version only rearranged the rows of the
        last one copied). The new state is swapped in at once, whole."""
        changed = []
        for name in self._tables:  # in order: a batch table is replaced as soon as the pointers changed
            if (needed is None or name in needed) and self._tables[name].changed():
                changed.append(name)
                if name == tables.SERVING_VERSIONS.name:
                    self._point_batch_tables()
        present = {name for name, t in self._tables.items() if t.fragments is not None}
        registered: dict = {name: self._tables[name].dataset for name in present & SCANNED}
        registered.update(
            {
                name: data
                for name, data in self._state.tables.items()
                if name in present and (name not in changed or self._tables[name].rearranged) and isinstance(data, str)
            }
        )
        views = {name for name in self._views if fold and (needed is None or batch_relation(name) in needed)}
        state = self._build([name for name in changed if name in present and name not in registered], registered, views)
        if changed or state.views != self._state.views:
            with self._lock:
                self._retired.update(_held(self._state) - _held(state))
                self._state = state
                self._drop_unused()
        return self._state

    def _point_batch_tables(self) -> None:
        """Read each view's batch rows from the table the version pointers name now."""
        pointers = self._tables[tables.SERVING_VERSIONS.name].dataset
        rows = versions.pointers(self.settings, pointers.to_table()) if pointers is not None else {}
        for name, path in versions.serving(self.settings, self._views, rows).items():
            if self._tables[batch_relation(name)].path != path:
                self._tables[batch_relation(name)] = TableFiles(path)

    def _drop_unused(self) -> None:
        """Drop the retired copies and parts that no running query's state holds (called with ``_lock``
        held; a retired table is no refresh's to read or write, so a refresh under way is not waited for)."""
        unused = self._retired.difference(*(_held(s) for s in self._running))
        for copy in unused:
            self._spare.execute(f'DROP TABLE "{copy}"')
            self._rows.pop(copy, None)
        self._retired -= unused

    def _build(self, names: list[str], registered: dict, views: set[str]) -> _State:
        """The state with a new :meth:`_copy` of each table ``names`` added to ``registered``, and the parts
        of the merged ``views`` brought up to date (:meth:`_make_parts`). If one does not fit in memory,
        nothing new is kept and the tables are read anew at the next query (which tries again), not left
        at their last copy."""
        made: set[str] = set()
        try:
            for name in names:
                what = f"table {name} does"
                registered[name] = self._copy(name, self._state.tables.get(name))
                made.add(registered[name])
            what = "the merged views do"
            return self._make_parts(registered, views, made)
        except duckdb.OutOfMemoryException:
            with self._lock:
                self._retired.update(made - _held(self._state))
                self._drop_unused()
            for table in names:
                self._tables[table].forget()
            raise sandbox.QueryError(
                f"{what} not fit in the query engine's memory limit, "
                f"{sandbox.memory_limit_of(self._db)}; raise the setting query_memory_limit"
            ) from None

    def _copy(self, name: str, previous) -> str:
        """Copy the current version of table ``name`` into the database, in window order if it has
        windows (so that a query for a time skips all but a few row groups); the copy's name. A version
        that only added files to the one copied as ``previous`` is copied there (its added files
        inserted); any other gets a name never used before (two tables a view switches between may
        have versions of one number)."""
        table = self._tables[name]
        assert table.fragments is not None and table.schema is not None  # only a table with data is copied
        order = " ORDER BY window_start" if "window_start" in table.schema.names else ""
        grown = isinstance(previous, str) and table.appended is not None
        copy = previous if grown else f"{name}@{table.version}#{next(self._copies)}"
        with self._reading(table.read_anew(table.appended if grown else None)):
            self._rows[copy] = (
                self._rows[copy] + self._count(f'INSERT INTO "{copy}" FROM _version{order}')
                if grown
                else self._count(f'CREATE TABLE "{copy}" AS FROM _version{order}')
            )
        if not grown:  # reading a table's files whole leaves most of what it took free but held (418 small
            # files of speed partials: a process from 231 to 413 MB, and 340 MB after this)
            processes.give_back_freed()
        self._copied[name] += 1
        return copy

    def copied(self) -> Counter[str]:
        """How many versions of each table were copied into the database so far (a table :data:`SCANNED`
        is read in place, never copied)."""
        with self._refreshing:
            return Counter(self._copied)

    def finality(self) -> dict[str, dict[str, set[date]]]:
        """Per view, its ``final`` days (the ledger's) and its ``provisional`` ones: the UTC days its speed
        partials hold windows of (a window whose partials were all taken back among them), not final.
        Read from the engine's copy of the ledger and the partials' files (partitioned by the hour their
        windows start), one state of both: no view's speed rows are folded for it."""
        ledger_table, partials = tables.SERVING_STATE.name, tables.SPEED_PARTIALS.name
        with self._refreshing:
            ledger = self._refresh({ledger_table, partials}, fold=False).tables.get(ledger_table)
            final: dict[str, set[date]] = {name: set() for name in self._views}
            for name, day in self._db.execute(f'SELECT view, day FROM "{ledger}"').fetchall() if ledger else ():
                final.setdefault(name, set()).add(day)
            speed: dict[str, set[date]] = {}
            for fragment in self._tables[partials].fragments or ():
                keys = ds.get_partition_keys(fragment.partition_expression)
                speed.setdefault(keys["view"], set()).add(_utc_day(keys["window_hour"]))
        return {
            name: {"final": final[name], "provisional": speed.get(name, set()) - final[name]} for name in self._views
        }

    def with_data(self) -> set[str]:
        """The tables and views that have data now, their tables opened again if they changed; no view's
        rows are folded for it."""
        with self._refreshing:
            registered = self._refresh(fold=False).tables
            return registered.keys() | {name for name in self._views if any(self._sources(name, registered))}

    def _sources(self, name: str, registered: dict) -> tuple[bool, bool]:
        """Whether view ``name`` has batch rows (its batch table and the ledger registered) and speed rows
        (a column of its own in the registered partials)."""
        partials = self._tables[tables.SPEED_PARTIALS.name].schema
        return (
            batch_relation(name) in registered and tables.SERVING_STATE.name in registered,
            tables.SPEED_PARTIALS.name in registered and partials is not None and name in partials.names,
        )

    def committed_at(self, name: str) -> datetime | None:
        """When table ``name``'s current version was committed (None if it has none)."""
        with self._refreshing:
            self._refresh({name})
            return self._tables[name].committed_at()

    def memory(self) -> tuple[int, str]:
        """The bytes the database holds now (its copies, the views' parts, running queries) and its limit."""
        with self._refreshing:
            [(held,)] = self._db.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()
            return int(held), sandbox.memory_limit_of(self._db)

    def _contents(self, name: str, registered: dict) -> tuple[str, int] | None:
        """What the copy of table ``name`` holds, if it has one: its name and its number of rows (a copy
        keeps its name only while its table's versions add rows, which come after the rows it had)."""
        copy = registered.get(name)
        return (copy, self._rows[copy]) if isinstance(copy, str) else None

    def _make_parts(self, registered: dict, views: set[str], made: set[str]) -> _State:
        """The state over ``registered``: each merged view's parts as tables of the database (a point query
        binds a union of two tables in a third of the time it binds the merge's SQL). The parts of
        ``views`` are brought up to date if what they are made from changed (the new tables added to
        ``made``); the others' wait until a query reads them."""
        partials, ledger = tables.SPEED_PARTIALS.name, tables.SERVING_STATE.name
        parts = {key: part for key, part in self._parts.items() if key[0] not in views}
        for name in views:
            view, batch = self._views[name], batch_relation(name)
            on = f'"{registered[ledger]}"' if ledger in registered else None
            finals = self._contents(ledger, registered)
            has_batch, has_speed = self._sources(name, registered)
            if has_batch:
                made_from = (finals, self._contents(batch, registered))
                part = self._parts.get((name, "batch"))
                if part is None or part.made_from != made_from:
                    sql = merged_parts(view, f'"{registered[batch]}"', None, on)["batch"]
                    part = self._new_part(name, f"SELECT * FROM ({sql})", made_from, lambda table: f'FROM "{table}"')
                    made.add(part.table)
                parts[(name, "batch")] = part
            if has_speed:
                part = self._speed_part(view, on, (finals, self._tables[partials].seen))
                made.add(part.table)
                parts[(name, "speed")] = part
        self._parts = parts
        found: dict[str, list[str]] = {}
        for (name, _), part in sorted(parts.items()):
            found.setdefault(name, []).append(part.reads)
        return _State(
            registered,
            {name: " UNION ALL ".join(sources) for name, sources in found.items()},
            frozenset(part.table for part in parts.values()),
        )

    def _speed_part(self, view: View, ledger: str | None, made_from: tuple) -> _Part:
        """The speed part of ``view``, its partials folded (``lake.merge.folded_sql``) from the partials'
        changes ``made_from`` names and the ledger relation ``ledger``. If the part was made with that
        ledger, or with fewer of its rows (days made final since, as a batch run does), and the partials'
        changes since then only added files, the part is brought up to date from its own rows: copied
        without the windows of the days made final (a query that began before, on the state the part was
        in, reads it whole: its batch part does not hold those days yet), and the windows the new partials
        touch folded again, in place, from the part's rows and the new partials (the new files read
        once): a micro-batch's cost, not the day's.
        Otherwise, or once the rows deleted from it outnumber its rows (so that what it holds stays in
        proportion to its rows), a new table is made, under a name never used before."""
        table, previous = self._tables[tables.SPEED_PARTIALS.name], self._parts.get((view.name, "speed"))
        if previous is not None and previous.made_from == made_from:
            return previous

        def reads(part: str) -> str:
            return speed_rows_sql(view, f'"{part}"')

        finals, before = made_from[0], previous.made_from[0] if previous else None
        grown = finals is not None and (before is None or before[0] == finals[0])  # the ledger came or grew
        added = table.added(previous.made_from[1]) if previous and (before == finals or grown) else None
        if previous is None or added is None:
            with self._reading(table.read_anew()):
                part = self._new_part(
                    view.name, folded_sql(view, partials_of(view, "_version"), ledger), made_from, reads
                )
            processes.give_back_freed()
            return part
        part = previous
        if before != finals:  # a copy: a query that began before reads the part it found, whole
            assert ledger is not None  # the ledger came or grew
            days = final_days_sql(view, ledger)
            sql = f'FROM "{previous.table}" WHERE CAST(window_start AS DATE) NOT IN ({days})'
            part = self._new_part(view.name, sql, made_from, reads)
        rows, deleted, kept = part.rows, part.deleted, f'"{part.table}"'
        try:
            self._db.execute("BEGIN TRANSACTION")
            if added:
                with self._reading(table.read_anew(added)):
                    self._db.execute(f"CREATE TEMP TABLE _new AS {partials_of(view, '_version')}")
                self._db.execute(f"CREATE TEMP TABLE _refolded AS {refolded_sql(view, kept, '_new', ledger)}")
                gone = self._count(f"DELETE FROM {kept} WHERE window_start IN (SELECT window_start FROM _refolded)")
                rows += self._count(f"INSERT INTO {kept} FROM _refolded ORDER BY window_start") - gone
                deleted += gone
                self._db.execute("DROP TABLE _refolded")
                self._db.execute("DROP TABLE _new")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            if part is not previous:
                self._db.execute(f"DROP TABLE {kept}")
            raise
        if deleted <= rows:
            return _Part(part.table, made_from, part.reads, rows, deleted)
        made = self._new_part(view.name, f"FROM {kept}", made_from, reads)
        if part is not previous:
            self._db.execute(f"DROP TABLE {kept}")
        return made

    def _new_part(self, view: str, sql: str, made_from: tuple, reads: Callable[[str], str]) -> _Part:
        """A part of ``view`` made anew from ``sql``, in window order; ``reads`` gives the SQL that reads
        it, from its table's name."""
        table = f"{view}:{next(self._copies)}"
        rows = self._count(f'CREATE TABLE "{table}" AS {sql} ORDER BY window_start')
        return _Part(table, made_from, reads(table), rows)

    @contextmanager
    def _reading(self, data: ds.FileSystemDataset) -> Iterator[None]:
        """``data`` registered on the database as ``_version`` meanwhile."""
        self._db.register("_version", data)
        try:
            yield
        finally:
            self._db.unregister("_version")

    def _count(self, statement: str) -> int:
        """Run ``statement``; the rows it wrote or deleted."""
        return self._db.execute(statement).fetchall()[0][0]

    def _read_by(
        self, con: duckdb.DuckDBPyConnection, sql: str
    ) -> tuple[set[str] | None, set[str] | None, dict | None]:
        """The relations ``sql`` names (lower case; None if it does not parse), the tables it reads
        through them (None: all of them, if it does not parse or names a relation the engine does not
        know: the error lists those it knows), and its parsed tree if it was parsed now
        (:func:`sandbox.parse`)."""
        tree = None
        try:
            names = self._reads[sql]
        except KeyError:
            try:
                tree = sandbox.parse(con, sql)
                names = sandbox.named(tree)
            except sandbox.QueryError:
                names = None
            if len(self._reads) >= PASSED:
                self._reads.clear()
            self._reads[sql] = names
        views = {name.lower(): name for name in self._views}
        known = {name.lower(): name for name in self._tables}
        if names is None or not names <= views.keys() | known.keys():
            return names, None, tree
        merged = {tables.SERVING_STATE.name, tables.SERVING_VERSIONS.name, tables.SPEED_PARTIALS.name}
        reads = {
            table
            for name in names
            for table in ({batch_relation(views[name]), *merged} if name in views else {known[name]})
        }
        return names, reads, tree

    def query(self, sql: str, params: dict | None = None) -> tuple[list[str], list[tuple]]:
        """Run ``sql`` (with ``$name`` parameters bound from ``params``) in the sandbox against the merged
        views; the column names and rows. Only the tables it reads are opened again if they changed: a
        view's query does not wait for raw_events' new version."""
        with self._lock:
            cursor = self._idle.pop() if self._idle else _Cursor(self._spare.cursor())
        try:
            names, reads, tree = self._read_by(cursor.con, sql)
            state = self._running_state(reads)
        except BaseException:
            self._give_back(cursor)
            raise
        try:
            cursor.sync(state, names)
            known = state.tables.keys() | state.views.keys()
            if self._passed.get(sql) != known:
                sandbox.check(cursor.con, sql, known, tree)
                if len(self._passed) >= PASSED:
                    self._passed.clear()
                self._passed[sql] = known
            return self._run(cursor, sql, params)
        finally:
            with self._lock:
                self._running -= Counter([state])
                self._drop_unused()
            if cursor.abandoned is None:
                self._give_back(cursor)
            else:  # the cursor is free once the lane's run stopped
                cursor.abandoned.add_done_callback(lambda _: self._give_back(cursor))

    def _running_state(self, reads: set[str] | None) -> _State:
        """The state a query reading the tables ``reads`` (None: all) runs on, counted as running:
        refreshed by this query, unless a refresh is under way and the query :meth:`_follows` it."""
        if not self._refreshing.acquire(blocking=False):
            with self._lock:
                if self._follows(reads):
                    self._ask(reads)
                    self._running[self._state] += 1
                    return self._state
            self._refreshing.acquire()
        try:
            state = self._refresh(reads)
            with self._lock:
                self._ask(reads)
                self._running[state] += 1
            return state
        finally:
            self._refreshing.release()

    def _ask(self, reads: set[str] | None) -> None:
        """Note that a query reads the tables ``reads`` (None: all) now, for the watcher (called with
        ``_lock`` held)."""
        now = time.monotonic()
        self._asked.update((name, now) for name in (self._tables if reads is None else reads))

    def watch(self) -> None:
        """From now on, bring the tables queries read in the last :data:`WATCHED_SECONDS` up to date as
        soon as one commits a version, on a thread of the engine's: each local table's Delta log folder
        is watched (inotify, the system's file events). A micro-batch's fold is then made before a
        query asks for it, where the first query to find the new version would wait for it; queries
        that arrive meanwhile run on the state before (:meth:`_follows`). Only a long-lived engine
        needs it: the HTTP API's."""
        threading.Thread(target=self._watch, name="table-watcher", daemon=True).start()

    def _watched(self) -> dict[str, str]:
        """The Delta log folders to watch, each with its table's name."""
        with self._lock:
            since = time.monotonic() - WATCHED_SECONDS
            asked = [name for name, at in self._asked.items() if at >= since and name in self._tables]
        logs = {}
        for name in asked:
            local = storage.local_path(self._tables[name].path)
            if local is not None and os.path.isdir(os.path.join(local, storage.LOG)):
                logs[os.path.join(local, storage.LOG)] = name
        return logs

    def _watch(self) -> None:
        """Refresh the watched tables as soon as a version is committed to one of their logs (a commit's
        file appears there: :data:`COMMIT`), until the engine closes. The thread sleeps in the system's
        read of the file events (inotify) and wakes every second to look at the set watched again; a
        table newly watched is refreshed at once (a version committed before is seen then). A refresh
        that fails (a table that does not fit in memory, a log being rewritten) is left to the query that
        reads the table next, which says why."""
        with INotify() as events:
            watched: dict[int, str] = {}  # each log folder watched, by its watch
            while not self._closed.is_set():
                logs = self._watched()
                for handle in [handle for handle, log in watched.items() if log not in logs]:
                    with contextlib.suppress(OSError):  # the folder is gone, and its watch with it
                        events.rm_watch(handle)
                    del watched[handle]
                added = False
                for log in logs.keys() - set(watched.values()):
                    with contextlib.suppress(OSError):  # gone meanwhile, or the system's watches all taken
                        watched[events.add_watch(log, flags.CREATE | flags.MOVED_TO)] = log
                        added = True
                read = [] if added else events.read(timeout=1000)
                for event in read:
                    if event.mask & flags.IGNORED:  # the folder went
                        watched.pop(event.wd, None)
                if added or any(COMMIT.fullmatch(event.name) for event in read):
                    with self._refreshing, contextlib.suppress(Exception):
                        if not self._closed.is_set():
                            self._refresh(set(logs.values()))

    def _give_back(self, cursor: _Cursor) -> None:
        cursor.abandoned = None
        with self._lock:
            self._idle.append(cursor)

    def _run(self, cursor: _Cursor, sql: str, params: dict | None) -> tuple[list[str], list[tuple]]:
        """Run ``sql`` in the fast lane for ``query_fast_lane_seconds``, and on, up to
        :data:`FAST_LANE_STRETCH` times that, until its thread had :data:`FAST_LANE_CPU_SHARE` of it on a
        core (the thread's CPU time is the query's with one thread, ``query_threads``; with more, the fast
        lane ends at ``query_fast_lane_seconds``); if it needs more, stop it and run it again in the slow
        lane until its time limit (waiting its turn counts). So a short query kept off the cores by
        others is not sent to wait behind a long one."""
        limit, fast, rows = (
            self.settings.query_timeout_seconds,
            self.settings.query_fast_lane_seconds,
            self.settings.query_max_rows,
        )
        con, deadline = cursor.con, time.monotonic() + limit
        if self.settings.query_threads == 1:
            timeout, on_cpu = min(fast * FAST_LANE_STRETCH, limit), sandbox.OnCpu(fast, fast * FAST_LANE_CPU_SHARE)
        else:
            timeout, on_cpu = min(fast, limit), None
        try:
            return self._fast_lane(con, sql, timeout, on_cpu, rows, params)
        except sandbox.TimeLimit:
            if time.monotonic() >= deadline:
                raise

        def slow() -> tuple[list[str], list[tuple]]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise sandbox.TimeLimit(limit)
            run = _SlowRun(con)
            with self._lock:
                self._slow_run, self._slow_runs = run, self._slow_runs + 1
            try:
                return sandbox.run(con, sql, left, rows, params)
            except sandbox.QueryError as exc:
                if run.gave_way:
                    raise sandbox.QueryError(GAVE_WAY) from None
                if isinstance(exc, sandbox.TimeLimit):
                    raise sandbox.TimeLimit(limit) from None
                raise
            finally:
                with self._lock:
                    self._slow_run = None
                run.stopped.set()

        waiting = self._slow_lane.submit(slow)
        try:  # a query in the lane that is slow to stop does not hold the ones behind it past their limits
            return waiting.result(timeout=max(0.0, deadline - time.monotonic()) + STOPPING_SECONDS)
        except TimeoutError:
            if not waiting.cancel():
                cursor.abandoned = waiting
            raise sandbox.TimeLimit(limit) from None

    def _fast_lane(
        self,
        con: duckdb.DuckDBPyConnection,
        sql: str,
        timeout: float,
        on_cpu: sandbox.OnCpu | None,
        rows: int,
        params: dict | None,
    ) -> tuple[list[str], list[tuple]]:
        """Run ``sql`` for at most ``timeout`` seconds, or less as ``on_cpu`` says; refused for memory
        while a query of the slow lane ran, it runs again once that query stopped (:meth:`_make_way`)."""
        began = time.monotonic()
        with self._lock:
            lane = (self._slow_run, self._slow_runs)
        try:
            return sandbox.run(con, sql, timeout, rows, params, on_cpu)
        except sandbox.OutOfMemory:
            if not self._make_way(lane):
                raise
        return sandbox.run(con, sql, max(0.0, timeout - (time.monotonic() - began)), rows, params, on_cpu)

    def _make_way(self, lane: tuple[_SlowRun | None, int]) -> bool:
        """Stop the query running in the slow lane, if one is, so that the memory it holds is free for the
        fast lane's; whether a query of the slow lane ran since ``lane`` (its run and count of runs then)
        and none runs now. A query is interrupted again every ``sandbox.AGAIN_SECONDS`` (an interrupt that
        comes before it began is lost) for at most :data:`STOPPING_SECONDS`, and only while it runs: an
        interrupt would stop what runs next on its connection."""
        with self._lock:
            run = self._slow_run
            if run is None:
                return lane != (None, self._slow_runs)
            run.gave_way = True
        until = time.monotonic() + STOPPING_SECONDS
        while True:
            with self._lock:
                if self._slow_run is run:
                    run.con.interrupt()
            if run.stopped.wait(sandbox.AGAIN_SECONDS):
                return True
            if time.monotonic() >= until:
                return False

    def close(self) -> None:
        self._closed.set()
        self._slow_lane.shutdown(cancel_futures=True)
        with self._refreshing, self._lock:
            for cursor in self._idle:
                cursor.con.close()
            self._idle.clear()
            self._spare.close()
            self._db.close()


def _lower_priority() -> None:
    """Give the calling thread (Linux schedules each thread on its own) :data:`SLOW_LANE_NICENESS`."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SLOW_LANE_NICENESS)


_engines: dict[Deployment, Engine] = {}
_engines_lock = threading.Lock()


@atexit.register
def _close_engines() -> None:
    """Close the engines before the interpreter goes (else DuckDB's bindings report leaks on exit)."""
    for engine in _engines.values():
        engine.close()


def _engine(settings: Deployment) -> Engine:
    """The one :class:`Engine` for ``settings``, made on first use."""
    with _engines_lock:
        if settings not in _engines:
            _engines[settings] = Engine(settings)
        return _engines[settings]


def query(settings: Deployment, sql: str, params: dict | None = None) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` (``params`` bound) in the sandbox against the merged views; the column names and rows."""
    return _engine(settings).query(sql, params)


def copied(settings: Deployment) -> Counter[str]:
    """How many versions of each table the engine for ``settings`` has copied so far (:meth:`Engine.copied`)."""
    return _engine(settings).copied()


def finality(settings: Deployment) -> dict[str, dict[str, set[date]]]:
    """Per view, its final and provisional days (:meth:`Engine.finality`)."""
    return _engine(settings).finality()


def watch(settings: Deployment) -> None:
    """Keep the engine for ``settings`` up to date as tables commit (:meth:`Engine.watch`)."""
    _engine(settings).watch()


def committed_at(settings: Deployment, name: str) -> datetime | None:
    """When table ``name`` of ``settings`` was last written (:meth:`Engine.committed_at`)."""
    return _engine(settings).committed_at(name)


def memory(settings: Deployment) -> tuple[int, str]:
    """The bytes the engine for ``settings`` holds and its limit (:meth:`Engine.memory`)."""
    return _engine(settings).memory()


def with_data(settings: Deployment) -> set[str]:
    """The views and tables that have data now (a view has data once its batch or speed table exists)."""
    return _engine(settings).with_data()
