"""A view declared only in the test suite (setting ``view_modules``): purchases per product and hour,
with the fewest and the most items a purchase took.

It is this one declaration and nothing else: batch, speed, serving and ``lambdalake views`` must all
pick it up. Its smallest and largest quantities are the only ``minimum`` and ``maximum`` measures under
test (no bundled view declares one).
"""

from datetime import timedelta

from views.model import Tumbling, View, count, distinct, maximum, minimum

VIEW = View(
    name="purchases_per_product_hourly",
    description=__doc__.splitlines()[0],
    event_types=("purchase",),
    window=Tumbling(timedelta(hours=1)),
    keys=("product_id",),
    measures=(
        count("purchases"),
        distinct("buyers", "user_id"),
        minimum("fewest_items", "quantity"),
        maximum("most_items", "quantity"),
    ),
    expectations=("buyers BETWEEN 1 AND purchases", "fewest_items BETWEEN 1 AND most_items"),
)
