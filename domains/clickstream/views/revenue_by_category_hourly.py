"""Orders, items and revenue per product category and hour. The category is the product's as of the
purchase in batch, and the latest known in speed; ``unknown`` for a product without one."""

from datetime import timedelta

from views.model import Dimension, Tumbling, View, count, total

VIEW = View(
    name="revenue_by_category_hourly",
    description=__doc__,
    event_types=("purchase",),
    window=Tumbling(timedelta(hours=1)),
    keys=("category",),
    measures=(count("orders"), total("items", "quantity"), total("revenue", "amount")),
    joins=(Dimension("products", key="product_id", column="category", default="unknown"),),
    expectations=("orders > 0", "items >= orders", "revenue >= 0"),
)
