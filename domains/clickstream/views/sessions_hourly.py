"""Sessions per hour they start (a user's events less than 30 minutes apart), with their average
duration in seconds and average number of events."""

from datetime import timedelta

from domains.clickstream import EVENTS
from views.model import Session, Tumbling, View, count, mean

VIEW = View(
    name="sessions_hourly",
    description=__doc__,
    event_types=tuple(EVENTS.types),
    window=Session(gap=timedelta(minutes=30), per="user_id", bucket=Tumbling(timedelta(hours=1))),
    keys=(),
    measures=(count("sessions"), mean("avg_duration_s", "duration_s"), mean("avg_events", "events")),
    expectations=("sessions > 0", "avg_duration_s >= 0", "avg_events >= 1"),
)
