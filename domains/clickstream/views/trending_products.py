"""Purchases and revenue per product in 10-minute windows sliding by a minute: what sells right now."""

from datetime import timedelta

from views.model import Hopping, View, count, total

VIEW = View(
    name="trending_products",
    description=__doc__,
    event_types=("purchase",),
    window=Hopping(timedelta(minutes=10), slide=timedelta(minutes=1)),
    keys=("product_id",),
    measures=(count("purchases"), total("revenue", "amount")),
    expectations=("purchases > 0", "revenue >= 0"),
)
