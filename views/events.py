"""An event source's parse: its JSON fields, the validation rules, and the landed (raw_events) columns.

Parsing is defined once here as a pure ``DataFrame -> DataFrame`` function over Kafka records and a
:class:`~views.source.Source`, so the speed layer's landing and any replay of dead letters apply exactly
the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from views.source import DECIMAL, INTEGER, STRING, UNSIGNED_DECIMAL, Source

if TYPE_CHECKING:
    from infra.producer import Record

#: The Spark type each field type lands as.
SPARK_TYPES = {
    STRING: T.StringType(),
    INTEGER: T.IntegerType(),
    DECIMAL: T.DecimalType(12, 2),
    UNSIGNED_DECIMAL: T.DecimalType(12, 2),
}
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}

#: A Kafka record as Spark's Kafka source reads it.
KAFKA_RECORD = T.StructType(
    [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
    ]
)


def kafka_rows(records: Iterable[Record], topic: str = "events", partitions: int = 3) -> list[tuple]:
    """Generated records (``infra.producer.Record``) as :data:`KAFKA_RECORD` tuples, as Spark's Kafka
    source would read them from ``topic``: spread over ``partitions`` by position, offsets in order."""
    offsets = [0] * partitions
    rows = []
    for i, record in enumerate(records):
        partition = i % partitions
        rows.append(
            (record.key, record.value, topic, partition, offsets[partition], record.send_at.replace(tzinfo=None), 0)
        )
        offsets[partition] += 1
    return rows


def kafka_frame(
    spark: SparkSession, records: Iterable[Record], topic: str = "events", partitions: int = 3
) -> DataFrame:
    """A DataFrame of :func:`kafka_rows`."""
    return spark.createDataFrame(kafka_rows(records, topic, partitions), KAFKA_RECORD)


RFC3339 = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|z|[+-]\d{2}:\d{2})$"

KAFKA_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp", "key", "payload", "ingested_at")
#: What ``parse`` keeps of them: the payload only as ``raw`` bytes, made text when landed.
_KAFKA_KEPT = tuple(c for c in KAFKA_COLUMNS if c != "payload")
_TIME = "_time"


def decimal_rule(name: str, kind: str, text: Column) -> tuple[Column, Column]:
    """(is_bad, reason) for a decimal field's text: a number with at most 2 places (not negative, if
    ``kind`` is unsigned)."""
    sign, what = ("", "a non-negative decimal") if kind == UNSIGNED_DECIMAL else ("-?", "a decimal")
    return (
        text.isNotNull() & ~text.rlike(rf"^{sign}\d+(\.\d{{1,2}})?$"),
        F.format_string(f"{name} '%s' is not {what} with at most 2 places", text),
    )


def _rules(
    source: Source,
    typed: dict[str, Column],
    text: Column,
    json: Column,
    size: Column,
    now: Column,
    at: Column,
    max_bytes: int,
    horizon_seconds: int,
) -> list[tuple[Column, Column]]:
    """(is_bad, reason) pairs, checked in order; the first that holds names the record's problem (``at``:
    the time field parsed)."""
    rules = [
        (size > max_bytes, F.lit(f"oversized payload: more than {max_bytes} bytes")),
        (text.isNull() | text["_corrupt"].isNotNull(), F.lit("malformed JSON: not a JSON object")),
    ]
    for name in source.strings:
        kind = F.schema_of_variant(json[name])  # STRING, BIGINT, ARRAY<...>, VOID for null; null if absent
        rules.append(
            (
                ~kind.isin("STRING", "VOID"),
                F.format_string(f"field {name} has the wrong type: %s, expected a string", kind),
            )
        )
    for name in source.required:
        rules.append((F.coalesce(F.trim(text[name]), F.lit("")) == "", F.lit(f"missing field {name}")))
    kind, time = text[source.kind], text[source.time]
    rules += [
        (~kind.isin(*source.types), F.format_string(f"unknown {source.kind} '%s'", kind)),
        (
            ~time.rlike(RFC3339) | at.isNull(),
            F.format_string(f"{source.time} '%s' is not RFC 3339 with an offset", time),
        ),
        (
            at > now + F.expr(f"INTERVAL {horizon_seconds} SECONDS"),
            F.lit(f"{source.time} more than {horizon_seconds}s in the future"),
        ),
    ]
    for event_type, fields in source.types.items():
        for name in fields:
            rules.append(((kind == event_type) & text[name].isNull(), F.lit(f"missing field {name} for {event_type}")))
    rules += [
        decimal_rule(name, number, text[name])
        for name, number in source.numbers.items()
        if number in (DECIMAL, UNSIGNED_DECIMAL)
    ]
    for name in source.numbers:
        rules.append(
            (
                text[name].isNotNull() & typed[name].isNull(),
                F.format_string(f"field {name} has the wrong type: '%s'", text[name]),
            )
        )
    rules += [(F.expr(check.bad), F.lit(check.reason)) for check in source.checks]
    return rules


def first_reason(rules: list[tuple[Column, Column]]) -> Column:
    """The reason of the first (is_bad, reason) rule that holds; null if none does."""
    (is_bad, why), *rest = rules
    reason = F.when(is_bad, why)
    for is_bad, why in rest:
        reason = reason.when(is_bad, why)
    return reason


class _Selection:
    """Columns selected again and again (each micro-batch's parse). In a process's own Spark they are
    sent to its JVM once, as one sequence: PySpark sends a list of columns one py4j call per column at
    each select, some 300 calls and 0.06 s of every micro-batch. (Spark Connect sends a plan whole,
    when it runs.)"""

    def __init__(self, *columns: Column) -> None:
        self.columns, self.sequence = columns, None

    def of(self, frame: DataFrame) -> DataFrame:
        """``frame.select(*columns)``."""
        from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

        if not isinstance(frame, ClassicFrame):
            return frame.select(*self.columns)
        if self.sequence is None:
            jvm = frame.sparkSession._jvm
            assert jvm is not None  # a classic session's
            self.sequence = jvm.PythonUtils.toSeq([column._jc for column in self.columns])
        return ClassicFrame(frame._jdf.select(self.sequence), frame.sparkSession)


@lru_cache(maxsize=8)
def _parse_steps(source: Source, max_payload_bytes: int, future_horizon_seconds: int) -> tuple[_Selection, ...]:
    """What :func:`parse` selects, step by step; built once per source and limits and reused for every
    micro-batch (a few hundred expressions: building them again costs the speed layer's driver more
    than parsing a small micro-batch)."""
    payload = F.col("value").cast("string")
    # one parse of the JSON: each string field as a variant (its JSON type is checked, its text is a
    # cast), the numbers as text
    schema = T.StructType(
        [
            *(T.StructField(name, T.VariantType()) for name in source.strings),
            *(T.StructField(name, T.StringType()) for name in source.numbers),
            T.StructField("_corrupt", T.StringType()),
        ]
    )
    fields = (
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").cast("string").alias("key"),
        F.col("value").alias("raw"),
        F.col("ingested_at"),
        F.from_json(payload, schema, _JSON_OPTIONS).alias("json"),
        F.length(F.col("value")).alias("size"),
    )
    json = F.col("json")
    text = F.when(
        json.isNotNull(),
        F.struct(
            *(json[name].cast("string").alias(name) for name in source.strings),
            *(json[name] for name in (*source.numbers, "_corrupt")),
        ),
    )
    # the typed fields by name, for the source's checks (SQL over them)
    typed = {
        name: F.col(f"text.{name}").try_cast(SPARK_TYPES[kind])
        for name, kind in source.fields.items()
        if name != source.time
    }
    # the event time parsed once, where the rules, event_time and event_date all read it
    texts = (
        *(F.col(c) for c in (*_KAFKA_KEPT, "raw", "size")),
        json,
        text.alias("text"),
        *(column.alias(name) for name, column in typed.items()),
        F.try_to_timestamp(F.col(f"text.{source.time}")).alias(_TIME),
    )
    named = {name: F.col(name) for name in typed}
    event_time = F.col(_TIME)
    reason = first_reason(
        _rules(
            source,
            named,
            F.col("text"),
            json,
            F.col("size"),
            F.col("ingested_at"),
            event_time,
            max_payload_bytes,
            future_horizon_seconds,
        )
    )
    columns = (
        *((event_time if name == source.time else named[name]).alias(source.column(name)) for name in source.fields),
        F.to_date(event_time).alias("event_date"),
        *(F.col(c) for c in (*_KAFKA_KEPT, "raw")),
        _opaque(reason).alias("reason"),
    )
    return _Selection(*fields), _Selection(*texts), _Selection(*columns)


def _opaque(column: Column) -> Column:
    """``column``, made non-deterministic (at the cost of one comparison per row), so that Spark neither
    folds it into a constant nor pushes a filter on it into the parse. (Spark 4.1 would inline the JSON
    parse into a filter on ``reason`` once per reference: 96 times; SPARK-47672, fixed in 4.2 by
    ``spark.sql.optimizer.avoidDoubleFilterEval``.)"""
    return F.when(F.spark_partition_id() >= 0, column)


def moment(at: datetime | None) -> Column:
    """``at`` as a timestamp column that Spark reads at run time: a time literal is written into the
    generated code and makes Spark compile it again each micro-batch, where text is passed to it."""
    text = None if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return F.to_timestamp(_opaque(F.lit(text)), "yyyy-MM-dd HH:mm:ss.SSSSSS")


def parse(
    records: DataFrame,
    source: Source,
    max_payload_bytes: int,
    future_horizon_seconds: int,
    ingested_at: datetime | None = None,
) -> DataFrame:
    """Kafka records -> one row per record with ``source``'s event columns and ``reason`` (null if valid).

    ``records`` has Kafka's columns (topic, partition, offset, timestamp, key, value as binary); they
    are ``ingested_at`` (default: now). The same records parsed at the same time get the same reasons.
    """
    records = records.withColumn("ingested_at", moment(ingested_at or datetime.now(UTC)))
    for step in _parse_steps(source, max_payload_bytes, future_horizon_seconds):
        records = step.of(records)
    return records


def landed(parsed: DataFrame, source: Source) -> DataFrame:
    """The valid records of ``parse``'s output, as raw_events rows."""
    return parsed.where(F.col("reason").isNull()).select(
        *source.columns,
        "event_date",
        *(F.col("raw").cast("string").alias(c) if c == "payload" else c for c in KAFKA_COLUMNS),
    )


def collected(parsed: DataFrame, source: Source, dead_bytes: int) -> DataFrame:
    """Every record of ``parse``'s output as a raw_events row (its payload null if it is invalid), with
    its ``reason``, ``size`` in bytes and, if it is invalid and at most ``dead_bytes`` long, its ``raw``
    bytes: what the speed layer collects of a micro-batch to fold it."""
    return _collected(source, dead_bytes).of(parsed)


@lru_cache(maxsize=8)
def _collected(source: Source, dead_bytes: int) -> _Selection:
    """What :func:`collected` selects, built once per source and limit."""
    fine, size = F.col("reason").isNull(), F.length("raw")
    return _Selection(
        *map(F.col, (*source.columns, "event_date")),
        *(F.when(fine, F.col("raw").cast("string")).alias(c) if c == "payload" else F.col(c) for c in KAFKA_COLUMNS),
        F.col("reason"),
        size.alias("size"),
        F.when(~fine & (size <= dead_bytes), F.col("raw")).alias("raw"),
    )


def dead_letters(parsed: DataFrame) -> DataFrame:
    """The invalid records of ``parse``'s output, as dead_letters rows (raw bytes kept)."""
    return parsed.where(F.col("reason").isNotNull()).select(
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        "key",
        "raw",
        "reason",
        F.col("ingested_at").alias("dead_lettered_at"),
        F.to_date("ingested_at").alias("dead_letter_date"),
    )
