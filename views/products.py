"""The products changelog (CDC on the compacted topic ``products``, key product_id) and the dimension
the views join: one row per product and validity interval ``[valid_from, valid_to)``.

A record's value is ``{product_id, category, price, updated_at}``; a null value (a tombstone) deletes
the key's product at the record's Kafka timestamp.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from views.events import KAFKA_COLUMNS, RFC3339, first_reason

FIELDS = ("product_id", "category", "price", "updated_at")
PRICE = T.DecimalType(12, 2)
_TEXT = T.StructType([*(T.StructField(f, T.StringType()) for f in FIELDS), T.StructField("_corrupt", T.StringType())])
CHANGE_COLUMNS = ("product_id", "category", "price", "updated_at", "deleted")


def parse(records: DataFrame) -> DataFrame:
    """Kafka records -> one changelog row per record, with ``reason`` (null if valid)."""
    key, deleted = F.col("key").cast("string"), F.col("value").isNull()
    text = F.from_json(F.col("value").cast("string"), _TEXT, {"columnNameOfCorruptRecord": "_corrupt"})
    df = records.select("*", text.alias("text"), deleted.alias("deleted"), key.alias("key_text"))
    text, key = F.col("text"), F.col("key_text")
    price = text["price"].try_cast(PRICE)
    updated_at = F.try_to_timestamp(text["updated_at"])
    rules = [(deleted & key.isNull(), F.lit("tombstone without a key: no product to delete"))]
    live = [(text.isNull() | text["_corrupt"].isNotNull(), F.lit("malformed JSON: not a JSON object"))]
    live += [(F.coalesce(F.trim(text[f]), F.lit("")) == "", F.lit(f"missing field {f}")) for f in FIELDS]
    live += [
        (key.isNotNull() & (key != text["product_id"]),
         F.format_string("product_id '%s' differs from the record key '%s'", text["product_id"], key)),
        (price.isNull() | (price < 0) | ~text["price"].rlike(r"^\d+(\.\d{1,2})?$"),
         F.format_string("price '%s' is not a non-negative decimal with at most 2 places", text["price"])),
        (~text["updated_at"].rlike(RFC3339) | updated_at.isNull(),
         F.format_string("updated_at '%s' is not RFC 3339 with an offset", text["updated_at"])),
    ]
    rules += [(~deleted & is_bad, why) for is_bad, why in live]
    return df.select(
        F.coalesce(text["product_id"], key).alias("product_id"),
        F.when(~deleted, text["category"]).alias("category"),
        F.when(~deleted, price).alias("price"),
        F.when(deleted, F.col("timestamp")).otherwise(updated_at).alias("updated_at"),
        "deleted", "topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"),
        key.alias("key"), F.col("value").cast("string").alias("payload"),
        F.current_timestamp().alias("ingested_at"), F.col("value").alias("raw"),
        first_reason(rules).alias("reason"),
    )


def changes(parsed: DataFrame) -> DataFrame:
    """The valid rows of ``parse``'s output, as product_changes rows."""
    return parsed.where(F.col("reason").isNull()).select(*CHANGE_COLUMNS, *KAFKA_COLUMNS)


def dimension(changelog: DataFrame) -> DataFrame:
    """The products dimension from the whole changelog (each Kafka record once): a change is valid from
    its updated_at until the product's next change (ties: the later record wins); a deletion's
    interval has no category or price. The current row of a product has a null valid_to."""
    once = changelog.dropDuplicates(["topic", "partition", "offset"])
    order = Window.partitionBy("product_id").orderBy("updated_at", "partition", "offset")
    return once.select("product_id", "category", "price", F.col("updated_at").alias("valid_from"),
                       F.lead("updated_at").over(order).alias("valid_to"), "deleted")
