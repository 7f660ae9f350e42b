"""The clickstream's event types and the fields each carries, without Spark, for declarations and checks."""

EVENT_TYPES = ("page_view", "search", "click", "add_to_cart", "purchase")

#: Fields every event has, and the fields each type adds.
COMMON_FIELDS = ("event_id", "event_time", "event_type", "user_id", "session_id")
TYPE_FIELDS = {
    "page_view": ("page",),
    "search": ("query",),
    "click": ("query", "product_id"),
    "add_to_cart": ("product_id",),
    "purchase": ("product_id", "quantity", "amount"),
}

STRING_FIELDS = (*COMMON_FIELDS, "page", "query", "product_id")
