"""A view declared only in the test suite (setting ``view_modules``): carts per product and hour.

It is this one declaration and nothing else: batch, speed, serving and ``lambdalake views`` must all
pick it up.
"""

from datetime import timedelta

from views.model import Tumbling, View, count, distinct

VIEW = View(
    name="carts_per_product_hourly",
    description=__doc__.splitlines()[0],
    event_types=("add_to_cart",),
    window=Tumbling(timedelta(hours=1)),
    keys=("product_id",),
    measures=(count("carts"), distinct("shoppers", "user_id")),
    expectations=("shoppers BETWEEN 1 AND carts",),
)
