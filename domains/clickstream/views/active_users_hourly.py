"""Distinct users per hour, over events of every type (exact in batch, a sketch in speed)."""

from datetime import timedelta

from domains.clickstream import EVENTS
from views.model import Tumbling, View, distinct

VIEW = View(
    name="active_users_hourly",
    description=__doc__,
    event_types=tuple(EVENTS.types),
    window=Tumbling(timedelta(hours=1)),
    keys=(),
    measures=(distinct("active_users", "user_id"),),
    expectations=("active_users > 0",),
)
