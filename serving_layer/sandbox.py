"""The query sandbox: one read-only SELECT per request, over the views and tables the engine registers.

Enforced twice. The database cannot reach files, the network, extensions or its own settings
(:func:`connect`), and every request is checked with DuckDB's own parser before it runs
(:func:`parse`, :func:`check`): one SELECT statement whose FROM items are the engine's views and tables, CTEs,
subqueries, VALUES and the generator functions in :data:`TABLE_FUNCTIONS`. :func:`run` stops a
query at its time limit and refuses a result beyond its row limit; the database refuses a query that
needs more than its memory limit (it never spills to disk).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import duckdb

#: Table functions that read nothing but their arguments.
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
#: Scalar functions that tell about the host or the database's settings.
DENIED_FUNCTIONS = frozenset({"current_setting", "getenv"})
#: FROM items besides views, tables and the functions above.
FROM_ITEMS = frozenset({"SUBQUERY", "JOIN", "EXPRESSION_LIST", "PIVOT", "EMPTY"})
#: No files, network or extensions, no Python variable read as a table (DuckDB's replacement scan), and
#: no spilling to disk (an in-memory database would spill into ``.tmp`` of the working directory).
CONFIG: dict[str, bool | str] = {
    "enable_external_access": False,
    "python_enable_replacements": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "temp_directory": "",
}


class QueryError(ValueError):
    """A query that cannot run; the message is one line."""


class TimeLimit(QueryError):
    """A query stopped at its time limit."""

    def __init__(self, seconds: float):
        super().__init__(
            f"stopped after {seconds:g} s, the time limit (setting query_timeout_seconds); "
            f"narrow the query with WHERE or aggregate"
        )


class OutOfMemory(QueryError):
    """A query refused for needing more memory than the database has left."""


def _one_line(error: object) -> str:
    return " ".join(str(error).split())


def connect(memory_limit: str, threads: int) -> duckdb.DuckDBPyConnection:
    """An in-memory database (times in UTC) with no route to files, network or extensions, using at
    most ``memory_limit`` (e.g. ``"2GB"``) and ``threads``, its configuration locked; Arrow data
    registered on it, and on its cursors, stays readable."""
    con = duckdb.connect(config={**CONFIG, "memory_limit": memory_limit, "threads": threads})
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    con.execute("SET lock_configuration = true")
    return con


def memory_limit_of(con: duckdb.DuckDBPyConnection) -> str:
    """The database's memory limit, as DuckDB writes it (``"1.8 GiB"`` for 2GB)."""
    return con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]


#: The refusal of a query nested deeper than the database's parser or the checker's JSON decoder reads.
TOO_DEEP = "refused: expressions nested too deeply; write the query flatter"


def _needs_memory(con: duckdb.DuckDBPyConnection) -> OutOfMemory:
    with con.cursor() as fresh:  # ``con`` may be interrupted still (:class:`_Deadlines`)
        limit = memory_limit_of(fresh)
    return OutOfMemory(
        f"refused: needs more memory than the limit, {limit} (setting query_memory_limit); "
        f"narrow the query with WHERE or aggregate"
    )


#: The longest query text the sandbox parses, in characters: far more than a person or a dashboard
#: writes, and at most about half a second of DuckDB's parser for the deepest nest of parentheses.
MAX_SQL_CHARS = 100_000


def parse(con: duckdb.DuckDBPyConnection, sql: str) -> dict:
    """``sql`` as DuckDB's parser reads it (``json_serialize_sql``: its statements, each a SELECT); a
    :class:`QueryError` in one line if it is too long, does not parse, or holds anything but SELECTs.

    The parser runs without holding Python's global lock (``extract_statements`` held it: a server's
    every request waited the second a nest of 100,000 parentheses took to refuse); only a statement
    that parsed but is not a SELECT is read again, to name it."""
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(
            f"refused: the query is {len(sql):,} characters long, over the limit of {MAX_SQL_CHARS:,}; write it shorter"
        )
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql($sql)", {"sql": sql}).fetchall()[0][0])
    except RecursionError:  # the decoder's depth: far past any query a person writes
        raise QueryError(TOO_DEEP) from None
    except duckdb.OutOfMemoryException:  # other queries holding it all
        raise _needs_memory(con) from None
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from None
    if not tree["error"]:
        return tree
    message = tree["error_message"]
    if "expression depth" in message:  # DuckDB's limit says to raise it, which no query here can do
        raise QueryError(TOO_DEEP)
    if not message.startswith("Only SELECT statements"):
        raise QueryError(_one_line(f"Parser Error: {message}"))
    statements = con.extract_statements(sql)
    if len(statements) != 1:
        raise QueryError(f"one SQL statement per query, got {len(statements)}")
    raise QueryError(f"only SELECT queries run here, not {statements[0].type.name}")


def check(con: duckdb.DuckDBPyConnection, sql: str, known: set[str], tree: dict | None = None) -> None:
    """Raise :class:`QueryError` unless ``sql`` (its :func:`parse` ``tree`` if parsed already) is one
    SELECT over the relations ``known`` (and its own CTEs), using no table function but :data:`TABLE_FUNCTIONS`."""
    statements = (tree or parse(con, sql))["statements"]
    if len(statements) != 1:
        raise QueryError(f"one SQL statement per query, got {len(statements)}")
    _walk(statements, {name.lower() for name in known}, known)


def named(tree: dict) -> set[str]:
    """The relation names (lower case) that the :func:`parse` ``tree`` of a query reads from, besides its CTEs."""
    found: set[str] = set()
    ctes: set[str] = set()
    stack = [tree["statements"]]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and "table_name" in node:
                found.add(node["table_name"].lower())
            ctes.update(cte["key"].lower() for cte in (node.get("cte_map") or {}).get("map", []))
            stack.extend(node.values())
    return found - ctes


def _walk(tree, names: set[str], known: set[str]) -> None:
    """Check the parsed ``tree`` in which the relations ``names`` (and its own CTEs) are in scope (with a
    stack of its own: Python's, in a server's thread, would run out before the JSON decoder's)."""
    stack = [(tree, names)]
    while stack:
        node, names = stack.pop()
        if isinstance(node, list):
            stack.extend((item, names) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        names = names | {cte["key"].lower() for cte in (node.get("cte_map") or {}).get("map", [])}
        if "class" in node:
            if node["class"] == "FUNCTION" and node["function_name"].lower() in DENIED_FUNCTIONS:
                raise QueryError(f"function {node['function_name']}() is not allowed")
        elif "sample" in node and not node["type"].endswith("_NODE"):
            _from_item(node, names, known)
        stack.extend((value, names) for value in node.values())


def _from_item(ref: dict, names: set[str], known: set[str]) -> None:
    kind = ref["type"]
    if kind == "BASE_TABLE":
        name = ".".join(part for part in (ref["catalog_name"], ref["schema_name"], ref["table_name"]) if part)
        if name.lower() not in names:
            raise QueryError(f"no view or table named {name}; known views and tables: {', '.join(sorted(known))}")
    elif kind == "TABLE_FUNCTION":
        function = ref["function"]
        name = function.get("function_name", "")
        if (
            function["class"] != "FUNCTION"
            or function["schema"]
            or function["catalog"]
            or name.lower() not in TABLE_FUNCTIONS
        ):
            raise QueryError(
                f"table function {name or function['class'].lower()}() is not allowed; "
                f"only {', '.join(sorted(TABLE_FUNCTIONS))}"
            )
    elif kind == "SHOW_REF":
        raise QueryError("DESCRIBE, SHOW and SUMMARIZE are not allowed; query the views and tables")
    elif kind not in FROM_ITEMS:
        raise QueryError(f"{kind} is not allowed in FROM")


class OnCpu(NamedTuple):
    """A query's limit by its thread's CPU time (the query's own when the database has one thread: it runs
    each query on its caller's): stopped once ``seconds`` have passed and the thread used ``cpu`` seconds
    of CPU time (a query kept off the cores meanwhile goes on until it had them)."""

    seconds: float
    cpu: float


#: How often a query past its time limit is interrupted again until it stopped.
AGAIN_SECONDS = 0.05


@dataclass
class _Limit:
    """A running query's limits: interrupt ``con`` at ``until`` (monotonic seconds) or, with a ``clock``
    (a thread's CPU clock), once that clock reads ``cpu_until``, looked at first at ``at``."""

    con: duckdb.DuckDBPyConnection
    at: float
    until: float
    clock: int | None = None
    cpu_until: float = 0.0

    def cpu_left(self) -> float:
        """The CPU seconds left before ``cpu_until`` (0 without a clock)."""
        return 0.0 if self.clock is None else self.cpu_until - time.clock_gettime(self.clock)


class _Deadlines:
    """One thread that interrupts each running query at its limit, and again every
    :data:`AGAIN_SECONDS` until it stopped: an interrupt that comes before the database started the
    query is lost, and it would run on for hours. (A thread per query cost a point query a tenth of its
    time.) A query's limit is dropped under the lock the thread interrupts under, so no interrupt
    comes after :meth:`limit` ends: it would stop what runs next on the connection (a soak's next query)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start with no limit and no thread (as a forked child does: it has none of its parent's threads)."""
        self._due: dict[object, _Limit] = {}
        self._changed = threading.Condition()
        self._wakes = float("inf")  # when the thread wakes next
        self._thread: threading.Thread | None = None

    @contextmanager
    def limit(self, con: duckdb.DuckDBPyConnection, timeout: float, on_cpu: OnCpu | None) -> Iterator[None]:
        """Interrupt ``con`` once ``timeout`` seconds have passed or, given ``on_cpu``, once its seconds
        have passed and the calling thread has used its CPU seconds since now, until the block ends."""
        now = time.monotonic()
        until = now + max(timeout, 0)
        if on_cpu is None:
            due = _Limit(con, until, until)
        else:
            clock = time.pthread_getcpuclockid(threading.get_ident())
            due = _Limit(con, min(now + on_cpu.seconds, until), until, clock, time.clock_gettime(clock) + on_cpu.cpu)
        key = object()
        with self._changed:
            self._due[key] = due
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="query-time-limits", daemon=True)
                self._thread.start()
            if due.at < self._wakes:
                self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                del self._due[key]

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                self._wakes = self._interrupt(now)
                self._changed.wait(self._wakes - now if self._due else None)

    def _interrupt(self, now: float) -> float:
        """Interrupt the queries past their limit, each again :data:`AGAIN_SECONDS` later; when to look next."""
        for due in self._due.values():
            if due.at > now:
                continue
            left = due.cpu_left()
            if left > 0 and now < due.until:  # kept off the cores meanwhile: it has that long at least
                due.at = min(now + left, due.until)
            else:
                due.con.interrupt()
                due.at = now + AGAIN_SECONDS
        return min((due.at for due in self._due.values()), default=float("inf"))


_deadlines = _Deadlines()
os.register_at_fork(after_in_child=_deadlines.reset)


def run(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    timeout: float,
    max_rows: int,
    params: dict | None = None,
    on_cpu: OnCpu | None = None,
) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` (``params`` bound to its ``$name`` parameters) on ``con``, interrupted after ``timeout``
    seconds or earlier as ``on_cpu`` says; refused beyond ``max_rows`` rows."""
    try:
        with _deadlines.limit(con, timeout, on_cpu):
            result = con.execute(sql, params)
            rows = result.fetchmany(max_rows + 1)
            con.abort()  # the rows beyond the limit, so that the cursor can be used again
    except duckdb.InterruptException:
        raise TimeLimit(timeout) from None
    except duckdb.OutOfMemoryException:
        raise _needs_memory(con) from None
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from None
    if len(rows) > max_rows:
        raise QueryError(f"more than {max_rows:,} rows (setting query_max_rows); add LIMIT or aggregate")
    return [d[0] for d in result.description or []], rows
