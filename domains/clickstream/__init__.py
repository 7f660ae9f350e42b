"""The clickstream of a web shop: page views, searches, clicks, adds to cart and purchases, with the
products they name (a dimension fed by the products changelog)."""

from views.source import DECIMAL, INTEGER, STRING, UNSIGNED_DECIMAL, Changelog, Check, Domain, Source

EVENTS = Source(
    name="clickstream",
    description="What users of the shop do, one event per action.",
    topic="events",
    fields={
        "event_id": STRING,
        "event_time": STRING,
        "event_type": STRING,
        "user_id": STRING,
        "session_id": STRING,
        "page": STRING,
        "query": STRING,
        "product_id": STRING,
        "quantity": INTEGER,
        "amount": DECIMAL,
    },
    required=("event_id", "event_time", "event_type", "user_id", "session_id"),
    types={
        "page_view": ("page",),
        "search": ("query",),
        "click": ("query", "product_id"),
        "add_to_cart": ("product_id",),
        "purchase": ("product_id", "quantity", "amount"),
    },
    checks=(Check("event_type = 'purchase' AND quantity <= 0", "quantity must be positive"),),
)

PRODUCTS = Changelog(
    name="products",
    description="The shop's products: category and price, as they change.",
    topic="products",
    changes="product_changes",
    key="product_id",
    fields={"product_id": STRING, "category": STRING, "price": UNSIGNED_DECIMAL, "updated_at": STRING},
)

DOMAIN = Domain(name="clickstream", description=__doc__, source=EVENTS, dimensions=(PRODUCTS,))
