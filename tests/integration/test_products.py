"""The products changelog on real Spark: bad records get a reason, the dimension's validity intervals
follow updated_at, with deletions and ties, and a changelog file lands as its lines say."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from pyspark.sql import functions as F

from domains.clickstream import PRODUCTS
from infra.producer import Record, read_file
from views import changelog, timebase
from views.events import kafka_frame

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 20, 12, tzinfo=timebase.UTC)


def change(product: str, category: str, minutes: int, price="9.99", key: str | None = None, **extra) -> Record:
    value = {
        "product_id": product,
        "category": category,
        "price": price,
        "updated_at": (T0 + timedelta(minutes=minutes)).isoformat(),
        **extra,
    }
    return Record(T0, (key or product).encode(), json.dumps(value).encode(), "product")


def deletion(product: str | None, minutes: int) -> Record:
    return Record(T0 + timedelta(minutes=minutes), None if product is None else product.encode(), None, "deletion")


def test_bad_changelog_records_get_a_reason(spark):
    records = [
        change("p1", "shoes", 0),
        deletion("p1", 5),
        Record(T0, b"p2", b'{"product_id": "p2", "categ', "product"),
        change("p3", "", 0),
        change("p4", "shoes", 0, key="p5"),
        change("p6", "shoes", 0, price="-1"),
        change("p7", "shoes", 0, price="1.234"),
        Record(
            T0,
            b"p8",
            json.dumps({"product_id": "p8", "category": "shoes", "price": 1, "updated_at": "noon"}).encode(),
            "product",
        ),
        deletion(None, 5),
    ]
    parsed = changelog.parse(kafka_frame(spark, records, topic="products", partitions=1), PRODUCTS)
    reasons = [r.reason for r in parsed.orderBy("offset").collect()]
    assert reasons == [
        None,
        None,
        "malformed JSON: not a JSON object",
        "missing field category",
        "product_id 'p4' differs from the record key 'p5'",
        "price '-1' is not a non-negative decimal with at most 2 places",
        "price '1.234' is not a non-negative decimal with at most 2 places",
        "updated_at 'noon' is not RFC 3339 with an offset",
        "tombstone without a key: no product_id to delete",
    ]
    tombstone = parsed.where("offset = 1").first()
    assert (tombstone.product_id, tombstone.deleted, tombstone.category) == ("p1", True, None)
    assert timebase.utc(tombstone.updated_at) == T0 + timedelta(minutes=5)


def test_dimension_intervals_follow_updated_at_not_arrival(spark):
    records = [
        change("p1", "shoes", 10),
        change("p1", "sale", 0),  # arrives later, but is the older change
        deletion("p1", 20),
        change("p1", "boots", 30),  # back after the deletion
        change("p2", "hats", 0),
        change("p2", "caps", 0),  # same updated_at: the later record wins
    ]
    parsed = changelog.parse(kafka_frame(spark, records, topic="products", partitions=1), PRODUCTS)
    rows = (
        changelog.dimension(changelog.changes(parsed, PRODUCTS), PRODUCTS)
        .orderBy("product_id", "valid_from", F.asc_nulls_last("valid_to"))
        .collect()
    )

    def minutes(moment):
        return None if moment is None else int((timebase.utc(moment) - T0).total_seconds() // 60)

    assert [(r.product_id, r.category, minutes(r.valid_from), minutes(r.valid_to), r.deleted) for r in rows] == [
        ("p1", "sale", 0, 10, False),
        ("p1", "shoes", 10, 20, False),
        ("p1", None, 20, 30, True),
        ("p1", "boots", 30, None, False),
        ("p2", "hats", 0, 0, False),
        ("p2", "caps", 0, None, False),
    ]


def test_a_changelog_file_lands_as_the_dimension_its_lines_describe(spark, tmp_path):
    """``lambdalake produce --changelog products --from-file``'s records, as the products query parses them."""
    path = tmp_path / "changes.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(line)
            for line in [
                {"product_id": "p1", "category": "shoes", "price": 9.99, "updated_at": T0.isoformat()},
                {"product_id": "p1", "deleted": True},
                {"deleted": True},
                {"product_id": "p2", "category": "hats"},
            ]
        )
    )
    read = read_file(path, T0 + timedelta(minutes=5), key="product_id", changelog=True)
    parsed = changelog.parse(kafka_frame(spark, read.records, topic="products", partitions=1), PRODUCTS)
    assert [r.reason for r in parsed.orderBy("offset").collect()] == [
        None,
        None,
        "tombstone without a key: no product_id to delete",
        "missing field price",
    ]
    rows = changelog.dimension(changelog.changes(parsed, PRODUCTS), PRODUCTS).orderBy("valid_from").collect()
    assert [(r.product_id, r.category, r.deleted, r.valid_to is None) for r in rows] == [
        ("p1", "shoes", False, False),
        ("p1", None, True, True),
    ]
