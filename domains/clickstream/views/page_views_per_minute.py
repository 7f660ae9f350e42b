"""Page views per page and minute, with distinct users (exact in batch, a sketch in speed)."""

from datetime import timedelta

from views.model import Tumbling, View, count, distinct

VIEW = View(
    name="page_views_per_minute",
    description=__doc__,
    event_types=("page_view",),
    window=Tumbling(timedelta(minutes=1)),
    keys=("page",),
    measures=(count("views"), distinct("unique_users", "user_id")),
    expectations=("views > 0", "unique_users BETWEEN 1 AND views"),
)
