"""The clickstream event: its JSON schema, the validation rules, and the landed (raw_events) columns.

Parsing is defined once here as a pure ``DataFrame -> DataFrame`` function over Kafka records, so the
speed layer's landing and any replay of dead letters apply exactly the same rules.
"""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from views.event_fields import COMMON_FIELDS, EVENT_TYPES, STRING_FIELDS, TYPE_FIELDS

AMOUNT = T.DecimalType(12, 2)
#: The fields as read from the JSON, as text; quantity and amount are then cast to these types.
NUMBERS = {"quantity": T.IntegerType(), "amount": AMOUNT}
#: The JSON as read in one parse: each string field as a variant (its JSON type is checked; its text
#: is a cast), quantity and amount as text.
_JSON = T.StructType([*(T.StructField(name, T.VariantType()) for name in STRING_FIELDS),
                      *(T.StructField(name, T.StringType()) for name in NUMBERS),
                      T.StructField("_corrupt", T.StringType())])
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}

#: A Kafka record as Spark's Kafka source reads it.
KAFKA_RECORD = T.StructType([
    T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
])

RFC3339 = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|z|[+-]\d{2}:\d{2})$"

#: Columns of raw_events, the master dataset (partitioned by event_date).
EVENT_COLUMNS = ("event_id", "event_time", "event_type", "user_id", "session_id",
                 "page", "query", "product_id", "quantity", "amount")
KAFKA_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp", "key", "payload", "ingested_at")
#: What ``parse`` keeps of them: the payload only as ``raw`` bytes, made text when landed.
_KAFKA_KEPT = tuple(c for c in KAFKA_COLUMNS if c != "payload")


def _rules(typed: dict[str, Column], text: Column, json: Column, size: Column, now: Column, max_bytes: int,
           horizon_seconds: int) -> list[tuple[Column, Column]]:
    """(is_bad, reason) pairs, checked in order; the first that holds names the record's problem."""
    rules = [
        (size > max_bytes, F.lit(f"oversized payload: more than {max_bytes} bytes")),
        (text.isNull() | text["_corrupt"].isNotNull(), F.lit("malformed JSON: not a JSON object")),
    ]
    for name in STRING_FIELDS:
        kind = F.schema_of_variant(json[name])  # STRING, BIGINT, ARRAY<...>, VOID for null; null if absent
        rules.append((~kind.isin("STRING", "VOID"),
                      F.format_string(f"field {name} has the wrong type: %s, expected a string", kind)))
    for name in COMMON_FIELDS:
        rules.append((F.coalesce(F.trim(text[name]), F.lit("")) == "", F.lit(f"missing field {name}")))
    rules += [
        (~text["event_type"].isin(*EVENT_TYPES),
         F.format_string("unknown event_type '%s'", text["event_type"])),
        (~text["event_time"].rlike(RFC3339) | F.try_to_timestamp(text["event_time"]).isNull(),
         F.format_string("event_time '%s' is not RFC 3339 with an offset", text["event_time"])),
        (F.try_to_timestamp(text["event_time"]) > now + F.expr(f"INTERVAL {horizon_seconds} SECONDS"),
         F.lit(f"event_time more than {horizon_seconds}s in the future")),
    ]
    for event_type, fields in TYPE_FIELDS.items():
        for name in fields:
            rules.append(((text["event_type"] == event_type) & text[name].isNull(),
                          F.lit(f"missing field {name} for {event_type}")))
    rules.append((text["amount"].isNotNull() & ~text["amount"].rlike(r"^-?\d+(\.\d{1,2})?$"),
                  F.format_string("amount '%s' is not a decimal with at most 2 places", text["amount"])))
    for name in ("quantity", "amount"):
        rules.append((text[name].isNotNull() & typed[name].isNull(),
                      F.format_string(f"field {name} has the wrong type: '%s'", text[name])))
    rules.append(((text["event_type"] == "purchase") & (typed["quantity"] <= 0),
                  F.lit("quantity must be positive")))
    return rules


def first_reason(rules: list[tuple[Column, Column]]) -> Column:
    """The reason of the first (is_bad, reason) rule that holds; null if none does."""
    (is_bad, why), *rest = rules
    reason = F.when(is_bad, why)
    for is_bad, why in rest:
        reason = reason.when(is_bad, why)
    return reason


@lru_cache(maxsize=4)
def _parse_steps(max_payload_bytes: int, future_horizon_seconds: int) -> tuple[tuple[Column, ...], ...]:
    """The column lists :func:`parse` selects, one per step; built once per limits and reused for every
    micro-batch (a few hundred expressions: building them again costs the speed layer's driver more
    than parsing a small micro-batch)."""
    payload = F.col("value").cast("string")
    fields = (
        F.col("topic"), F.col("partition"), F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").cast("string").alias("key"),
        F.col("value").alias("raw"),
        F.current_timestamp().alias("ingested_at"),
        F.from_json(payload, _JSON, _JSON_OPTIONS).alias("json"),
        F.length(F.col("value")).alias("size"),
    )
    json = F.col("json")
    text = F.when(json.isNotNull(), F.struct(*(json[name].cast("string").alias(name) for name in STRING_FIELDS),
                                              *(json[name] for name in (*NUMBERS, "_corrupt"))))
    texts = (*(F.col(c) for c in _KAFKA_KEPT), F.col("raw"), F.col("size"), json, text.alias("text"))
    typed = {name: F.col(f"text.{name}") for name in STRING_FIELDS} | {
        name: F.col(f"text.{name}").try_cast(kind) for name, kind in NUMBERS.items()}
    reason = first_reason(_rules(typed, F.col("text"), json, F.col("size"),
                                 F.col("ingested_at"), max_payload_bytes, future_horizon_seconds))
    event_time = F.try_to_timestamp(F.col("text.event_time"))
    columns = (
        *(typed[c].alias(c) for c in EVENT_COLUMNS if c != "event_time"),
        event_time.alias("event_time"),
        F.to_date(event_time).alias("event_date"),
        *(F.col(c) for c in (*_KAFKA_KEPT, "raw")), reason.alias("reason"),
    )
    return fields, texts, columns, tuple(F.col(c) for c in (*EVENT_COLUMNS, "event_date", *_KAFKA_KEPT, "raw", "reason"))


def parse(records: DataFrame, max_payload_bytes: int, future_horizon_seconds: int) -> DataFrame:
    """Kafka records -> one row per record with the parsed event columns and ``reason`` (null if valid).

    ``records`` has Kafka's columns (topic, partition, offset, timestamp, key, value as binary).
    """
    for step in _parse_steps(max_payload_bytes, future_horizon_seconds):
        records = records.select(*step)
    return records


def landed(parsed: DataFrame) -> DataFrame:
    """The valid records of ``parse``'s output, as raw_events rows."""
    return parsed.where(F.col("reason").isNull()).select(
        *EVENT_COLUMNS, "event_date", *(F.col("raw").cast("string").alias(c) if c == "payload" else c
                                        for c in KAFKA_COLUMNS))


def dead_letters(parsed: DataFrame) -> DataFrame:
    """The invalid records of ``parse``'s output, as dead_letters rows (raw bytes kept)."""
    return parsed.where(F.col("reason").isNotNull()).select(
        "topic", "partition", "offset", "kafka_timestamp", "key", "raw", "reason",
        F.col("ingested_at").alias("dead_lettered_at"),
        F.to_date("ingested_at").alias("dead_letter_date"),
    )
