"""Compile a :class:`~views.model.View` into DuckDB SQL: a micro-batch's speed partials, folded on the
speed layer's driver (:mod:`speed_layer.fold`).

The same steps as :mod:`views.compile` builds in Spark for batch (own rows, FollowedBy flags, sessions,
dimensions, mergeable states per window and key, the same SQL for the states), over relations the
speed layer keeps in its DuckDB:

- :data:`NEW`: the micro-batch's new events (the source's columns); :data:`RECENT`: the events of
  earlier micro-batches it remembers whole (those, and the :func:`on_key` of each FollowedBy join);
  :data:`SEEN`: the keys and times of every event it remembers (:mod:`speed_layer.state`);
- :func:`open_sessions` of a session view;
- the tables the fold makes from the others before a view's partials (:func:`made_first`): the
  :func:`met` events of each FollowedBy join, and the :func:`touched` and :func:`grown` sessions of a
  session view;
- :func:`dimension`: a dimension's current rows.
"""

from __future__ import annotations

from views import compile
from views.model import Dimension, FollowedBy, Hopping, Session, View, interval

NEW, RECENT, SEEN = "new_events", "recent_events", "seen_events"


def open_sessions(view: View) -> str:
    return f"open_{view.name}"


def touched(view: View) -> str:
    return f"touched_{view.name}"


def grown(view: View) -> str:
    return f"grown_{view.name}"


def met(view: View, join: FollowedBy) -> str:
    return f"met_{view.name}_{join.flag}"


def dimension(table: str) -> str:
    return f"dimension_{table}"


def quoted(column: str) -> str:
    """``column`` as a DuckDB identifier (raw_events' Kafka columns include keywords: offset)."""
    return '"' + column.replace('"', '""') + '"'


def text(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def _own(view: View, events: str) -> str:
    types = ", ".join(map(text, view.event_types))
    return (
        f"SELECT *, {text(compile.EVENT)} AS {compile.ROLE}, 1 AS {compile.WEIGHT} "
        f"FROM {events} WHERE event_type IN ({types})"
    )


def _followers(join: FollowedBy, events: str) -> str:
    return f"SELECT * FROM {events} WHERE event_type = {text(join.event_type)}"


def _flagged(view: View, join: FollowedBy, rows: str, later: str, how: str = "EXISTS") -> str:
    """Copies of the ``rows`` that an event of ``later`` follows (``how="NOT EXISTS"``: that none
    follows), their role ``join``'s flag."""
    time = view.event_time
    meets = " AND ".join(
        [
            *(f"l.{c} = r.{c}" for c in join.on),
            f"l.{time} >= r.{time}",
            f"l.{time} <= r.{time} + INTERVAL '{interval(join.within)}'",
        ]
    )
    return (
        f"SELECT * REPLACE ({text(join.flag)} AS {compile.ROLE}) FROM ({rows}) AS r "
        f"WHERE {how} (SELECT 1 FROM ({later}) AS l WHERE {meets})"
    )


#: The prefix of :data:`RECENT`'s :func:`on_key` columns.
ON = "_on_"


def on_key(join: FollowedBy) -> tuple[str, str]:
    """The column of :data:`RECENT` that holds the hash of an event's ``join.on`` values, and its SQL."""
    return ON + "_".join(join.on), f"hash({', '.join(join.on)})"


def met_sql(view: View, join: FollowedBy) -> str:
    """The :data:`RECENT` events that can meet the micro-batch's in ``join``: those whose ``on`` values
    hash as one of its own rows' or followers' (a hash shared by chance only adds rows that the join's
    own conditions then leave out), once for the three reads of :func:`_rows`. Found by probing the
    hashes the state keeps with the micro-batch's (a semi join hashes its small side), not by hashing
    its ``on`` values every micro-batch (with 2 million events held: 0.16 s -> 0.03 s quiet)."""
    column, value = on_key(join)
    types = ", ".join(map(text, (*view.event_types, join.event_type)))
    return (
        f"SELECT COLUMNS(lambda c: NOT starts_with(c, {text(ON)})) FROM {RECENT} WHERE {column} IN "
        f"(SELECT {value} FROM {NEW} WHERE event_type IN ({types}))"
    )


def _rows(view: View) -> str:
    """The prepared rows :data:`NEW` adds to ``view`` before sessions: its own rows, and flagged copies
    of those (and of the :func:`met` state's) that a follower now follows for the first time."""
    rows = _own(view, NEW)
    for join in view.joins:
        if isinstance(join, FollowedBy):
            new, known = _followers(join, NEW), _followers(join, met(view, join))
            flagged_new = _flagged(view, join, rows, f"{known} UNION ALL {new}")
            newly = _flagged(view, join, _flagged(view, join, _own(view, met(view, join)), new), known, "NOT EXISTS")
            rows = f"{rows} UNION ALL BY NAME {flagged_new} UNION ALL BY NAME {newly}"
    return rows


def made_first(view: View) -> list[tuple[str, str]]:
    """The tables (name, SQL) the fold makes, in this order, before ``view``'s :func:`partials`."""
    made = [(met(view, join), met_sql(view, join)) for join in view.joins if isinstance(join, FollowedBy)]
    if isinstance(view.window, Session):
        made += [(touched(view), touched_sql(view)), (grown(view), grown_sql(view))]
    return made


def _spans(view: View, rows: str | None = None) -> str:
    """Each of the micro-batch's rows (or ``rows``) as a one-event span of its session: (per, start, last, events)."""
    time = view.event_time
    return (
        f"SELECT {view.session.per}, {time} AS start, {time} AS last, CAST(1 AS BIGINT) AS events "
        f"FROM ({rows or _rows(view)})"
    )


def touched_sql(view: View) -> str:
    """The open sessions of ``view`` that the micro-batch's events may extend or join."""
    per = view.session.per
    return f"SELECT * FROM {open_sessions(view)} WHERE {per} IN (SELECT {per} FROM ({_spans(view)}))"


def grown_sql(view: View) -> str:
    """The sessions the micro-batch starts or changes: its spans merged with the :func:`touched` ones."""
    return _sessions(view, f"SELECT * FROM {touched(view)} UNION ALL BY NAME {_spans(view)}")


def sessions_of(view: View, events: str) -> str:
    """The sessions of ``view`` in ``events`` (a relation of first copies)."""
    return _sessions(view, _spans(view, _own(view, events)))


def _sessions(view: View, spans: str) -> str:
    """Spans (per, start, last, events) merged into sessions: the next span of a ``per`` value joins a
    session while it starts less than the gap after that session's last event so far."""
    per, gap = view.session.per, interval(view.session.gap)
    before = (
        f"max(last) OVER (PARTITION BY {per} ORDER BY start, last ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    )
    starts = f"CASE WHEN _before IS NULL OR start >= _before + INTERVAL '{gap}' THEN 1 ELSE 0 END"
    numbered = (
        f"SELECT *, sum(_starts) OVER (PARTITION BY {per} ORDER BY start, last ROWS UNBOUNDED PRECEDING) "
        f"AS _session FROM (SELECT *, {starts} AS _starts FROM (SELECT *, {before} AS _before FROM ({spans})))"
    )
    return (
        f"SELECT {per}, min(start) AS start, max(last) AS last, CAST(sum(events) AS BIGINT) AS events "
        f"FROM ({numbered}) GROUP BY {per}, _session"
    )


def _session_rows(view: View, sessions: str, weight: int) -> str:
    return (
        f"SELECT start AS {view.event_time}, {view.session.per}, "
        f"(epoch_us(last) - epoch_us(start)) / 1e6 AS duration_s, events, "
        f"{text(compile.EVENT)} AS {compile.ROLE}, {weight} AS {compile.WEIGHT} FROM {sessions}"
    )


def _enriched(view: View, rows: str) -> str:
    """Each Dimension join's column added: the dimension's current row's, its default where none."""
    for join in view.joins:
        if isinstance(join, Dimension):
            rows = (
                f"SELECT r.*, coalesce(d.{join.column}, {text(join.default)}) AS {join.column} "
                f"FROM ({rows}) AS r LEFT JOIN {dimension(join.table)} AS d ON r.{join.key} = d.{join.key}"
            )
    return rows


def _windowed(view: View, rows: str) -> str:
    """``rows`` with window_start and window_end, once per window each is in (as Spark's ``window``:
    aligned to the epoch, start <= time < end)."""
    windows = view.windows
    size = int(windows.size.total_seconds() * 1e6)
    slide = int(windows.slide.total_seconds() * 1e6) if isinstance(windows, Hopping) else size
    at = f"epoch_us({view.event_time})"
    last_start = f"{at} - ((({at} % {slide}) + {slide}) % {slide})"
    return (
        f"SELECT * EXCLUDE (_start, _i), make_timestamptz(_start) AS window_start, "
        f"make_timestamptz(_start + {size}) AS window_end FROM (SELECT *, {last_start} - _i * {slide} AS _start "
        f"FROM ({rows}), range({size // slide}) AS _windows(_i)) WHERE _start + {size} > {at}"
    )


def partials(view: View) -> str:
    """The micro-batch's partials of ``view`` as rows of the partials table (view, window_hour, and the
    states in the struct column named after the view), from :data:`NEW` and the tables :func:`made_first`."""
    if isinstance(view.window, Session):
        rows = f"{_session_rows(view, grown(view), 1)} UNION ALL BY NAME {_session_rows(view, touched(view), -1)}"
    else:
        rows = _rows(view)
    states = compile.partial_states(view)
    columns = ("window_start", "window_end", *view.keys, *states)
    keys = ", ".join(("window_start", "window_end", *view.keys))
    aggregated = (
        f"SELECT {keys}, {', '.join(f'{sql} AS {name}' for name, sql in states.items())} "
        f"FROM ({_windowed(view, _enriched(view, rows))}) GROUP BY {keys}"
    )
    packed = ", ".join(f"{c} := {c}" for c in columns)
    return (
        f"SELECT {text(view.name)} AS view, date_trunc('hour', window_start) AS window_hour, "
        f"struct_pack({packed}) AS {view.name} FROM ({aggregated})"
    )
