"""The vocabulary of a source declaration: an event stream, or a dimension's changelog.

Like a view, a source is data, not code. It names its topic, its JSON fields and their types, and the
rules a record must meet to land; the speed layer's parse (:mod:`views.events`, :mod:`views.changelog`)
turns it into Spark, and the batch and serving layers read the columns it lands. A record that breaks a
rule goes to dead_letters with the first broken rule's reason.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Field types, as a JSON value is read: text; a whole number; a decimal with at most 2 places (signed,
#: or not negative). The event time is text (RFC 3339 with an offset) that lands as a UTC timestamp.
STRING, INTEGER, DECIMAL, UNSIGNED_DECIMAL = "string", "integer", "decimal", "unsigned decimal"
TYPES = (STRING, INTEGER, DECIMAL, UNSIGNED_DECIMAL)
#: The columns of raw_events that every source has: its key, event time and type fields land as these.
KEY, TIME, KIND = "event_id", "event_time", "event_type"
#: Names no field may have: the landed record's Kafka columns and the parse's own.
RESERVED = frozenset(
    {
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        "key",
        "payload",
        "ingested_at",
        "event_date",
        "raw",
        "size",
        "json",
        "text",
        "reason",
    }
)


@dataclass(frozen=True)
class Check:
    """A rule of the domain: a record for which the SQL condition ``bad`` holds (over the typed fields)
    is dead-lettered with ``reason``."""

    bad: str
    reason: str


def _refuse(what: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"{what}: {'; '.join(problems)}")


@dataclass(frozen=True, eq=False)
class Source:
    """An event stream on a Kafka topic, one JSON object per record.

    Every event has a key (``key``: later copies of the same key are duplicates), an event time
    (``time``) and a type (``kind``, one of ``types``); ``types`` names the fields each type must have
    beside the ``required`` ones. raw_events holds its ``fields`` in order, typed.
    """

    name: str
    description: str
    topic: str
    #: Field -> type (:data:`TYPES`), in the order raw_events holds them.
    fields: dict[str, str]
    #: Fields every event has, not blank.
    required: tuple[str, ...]
    #: Event type -> the fields (not null) an event of that type has beside the required ones.
    types: dict[str, tuple[str, ...]]
    checks: tuple[Check, ...] = ()
    key: str = "event_id"
    time: str = "event_time"
    kind: str = "event_type"

    def __post_init__(self) -> None:
        problems = [
            f"field {name} has unknown type {kind!r} (known: {', '.join(TYPES)})"
            for name, kind in self.fields.items()
            if kind not in TYPES
        ]
        named = {self.key, self.time, self.kind, *self.required, *(f for fs in self.types.values() for f in fs)}
        problems += [f"{name} is not one of the fields" for name in sorted(named - set(self.fields))]
        problems += [
            f"{role} field {name} must be a string"
            for role, name in (("key", self.key), ("time", self.time), ("kind", self.kind))
            if self.fields.get(name, STRING) != STRING
        ]
        problems += [
            f"{role} field {name} must be required"
            for role, name in (("key", self.key), ("time", self.time), ("kind", self.kind))
            if name not in self.required
        ]
        problems += [
            f"field {name} has a name the landing keeps for itself" for name in self.fields if name in RESERVED
        ]
        columns = [self.column(name) for name in self.fields]
        problems += [f"two fields land as column {c}" for c in sorted(set(columns)) if columns.count(c) > 1]
        _refuse(f"source {self.name}", problems)

    @property
    def columns(self) -> tuple[str, ...]:
        """raw_events' event columns, in order: the fields, with the key, time and kind fields landed as
        :data:`KEY`, :data:`TIME` and :data:`KIND` (the names every view and layer reads)."""
        return tuple(self.column(name) for name in self.fields)

    def column(self, field: str) -> str:
        """The raw_events column that ``field`` lands in."""
        return {self.key: KEY, self.time: TIME, self.kind: KIND}.get(field, field)

    @property
    def strings(self) -> tuple[str, ...]:
        return tuple(name for name, kind in self.fields.items() if kind == STRING)

    @property
    def numbers(self) -> dict[str, str]:
        return {name: kind for name, kind in self.fields.items() if kind != STRING}


@dataclass(frozen=True, eq=False)
class Changelog:
    """A dimension fed by change data capture: a compacted topic keyed by ``key``, whose record value is
    the row (JSON) valid from its ``valid_from`` time until the key's next change; a null value (a
    tombstone) deletes the key at the record's Kafka timestamp. The changes land in the ``changes``
    table; the dimension (table ``name``) has one row per key and validity interval
    ``[valid_from, valid_to)``, the current one with a null valid_to."""

    name: str
    description: str
    topic: str
    changes: str
    key: str
    #: Field -> type (:data:`TYPES`); all are required. ``key`` and ``valid_from`` are strings.
    fields: dict[str, str]
    valid_from: str = "updated_at"

    def __post_init__(self) -> None:
        problems = [
            f"field {name} has unknown type {kind!r} (known: {', '.join(TYPES)})"
            for name, kind in self.fields.items()
            if kind not in TYPES
        ]
        problems += [
            f"{role} field {name} must be a string field"
            for role, name in (("key", self.key), ("valid_from", self.valid_from))
            if self.fields.get(name) != STRING
        ]
        _refuse(f"changelog {self.name}", problems)

    @property
    def attributes(self) -> tuple[str, ...]:
        """The dimension's columns besides its key and validity."""
        return tuple(name for name in self.fields if name not in (self.key, self.valid_from))


@dataclass(frozen=True, eq=False)
class Domain:
    """What a deployment computes over: its event source, the changelogs of the dimensions its views
    join, and its views (the modules of the package ``domains.<name>.views``)."""

    name: str
    description: str
    source: Source
    dimensions: tuple[Changelog, ...] = ()
