"""A dimension's changelog (:class:`~views.source.Changelog`, CDC on a compacted topic keyed by the
dimension's key) parsed into changes, and the dimension the views join: one row per key and validity
interval ``[valid_from, valid_to)``.

A record's value is the row as JSON; a null value (a tombstone) deletes the key's row at the record's
Kafka timestamp.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from views.events import KAFKA_COLUMNS, RFC3339, SPARK_TYPES, decimal_rule, first_reason
from views.source import DECIMAL, STRING, UNSIGNED_DECIMAL, Changelog


def parse(records: DataFrame, changelog: Changelog) -> DataFrame:
    """Kafka records -> one change row per record, with ``reason`` (null if valid)."""
    schema = T.StructType(
        [*(T.StructField(f, T.StringType()) for f in changelog.fields), T.StructField("_corrupt", T.StringType())]
    )
    key, deleted = F.col("key").cast("string"), F.col("value").isNull()
    text = F.from_json(F.col("value").cast("string"), schema, {"columnNameOfCorruptRecord": "_corrupt"})
    df = records.select("*", text.alias("text"), deleted.alias("deleted"), key.alias("key_text"))
    text, key = F.col("text"), F.col("key_text")
    typed = {name: text[name].try_cast(SPARK_TYPES[kind]) for name, kind in changelog.fields.items()}
    valid_from = F.try_to_timestamp(text[changelog.valid_from])
    rules = [(deleted & key.isNull(), F.lit(f"tombstone without a key: no {changelog.key} to delete"))]
    live = [(text.isNull() | text["_corrupt"].isNotNull(), F.lit("malformed JSON: not a JSON object"))]
    live += [(F.coalesce(F.trim(text[f]), F.lit("")) == "", F.lit(f"missing field {f}")) for f in changelog.fields]
    live.append(
        (
            key.isNotNull() & (key != text[changelog.key]),
            F.format_string(f"{changelog.key} '%s' differs from the record key '%s'", text[changelog.key], key),
        )
    )
    for name, kind in changelog.fields.items():
        if kind in (DECIMAL, UNSIGNED_DECIMAL):
            is_bad, why = decimal_rule(name, kind, text[name])
            live.append((is_bad | typed[name].isNull(), why))
        elif kind != STRING:
            live.append((typed[name].isNull(), F.format_string(f"field {name} has the wrong type: '%s'", text[name])))
    live.append(
        (
            ~text[changelog.valid_from].rlike(RFC3339) | valid_from.isNull(),
            F.format_string(f"{changelog.valid_from} '%s' is not RFC 3339 with an offset", text[changelog.valid_from]),
        )
    )
    rules += [(~deleted & is_bad, why) for is_bad, why in live]
    return df.select(
        F.coalesce(text[changelog.key], key).alias(changelog.key),
        *(F.when(~deleted, typed[name]).alias(name) for name in changelog.attributes),
        F.when(deleted, F.col("timestamp")).otherwise(valid_from).alias(changelog.valid_from),
        "deleted",
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        key.alias("key"),
        F.col("value").cast("string").alias("payload"),
        F.current_timestamp().alias("ingested_at"),
        F.col("value").alias("raw"),
        first_reason(rules).alias("reason"),
    )


def changes(parsed: DataFrame, changelog: Changelog) -> DataFrame:
    """The valid rows of ``parse``'s output, as rows of the changes table."""
    return parsed.where(F.col("reason").isNull()).select(
        changelog.key, *changelog.attributes, changelog.valid_from, "deleted", *KAFKA_COLUMNS
    )


def dimension(changes: DataFrame, changelog: Changelog) -> DataFrame:
    """The dimension from all its changes (each Kafka record once): a change is valid from its
    valid_from until the key's next change (ties: the later record wins); a deletion's interval has no
    attributes. The current row of a key has a null valid_to."""
    once = changes.dropDuplicates(["topic", "partition", "offset"])
    order = Window.partitionBy(changelog.key).orderBy(changelog.valid_from, "partition", "offset")
    return once.select(
        changelog.key,
        *changelog.attributes,
        F.col(changelog.valid_from).alias("valid_from"),
        F.lead(changelog.valid_from).over(order).alias("valid_to"),
        "deleted",
    )
