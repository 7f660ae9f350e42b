"""Searches per query and hour, how many were followed by a click on a result (same session and query,
within 30 minutes), and the click-through rate."""

from datetime import timedelta

from views.model import FollowedBy, Tumbling, View, count, ratio

VIEW = View(
    name="search_ctr_hourly",
    description=__doc__,
    event_types=("search",),
    window=Tumbling(timedelta(hours=1)),
    keys=("query",),
    measures=(count("searches"), count("clicks", flagged="clicked"), ratio("ctr", "clicks", "searches")),
    joins=(FollowedBy("click", on=("session_id", "query"), within=timedelta(minutes=30), flag="clicked"),),
    expectations=("searches > 0", "clicks BETWEEN 0 AND searches", "ctr BETWEEN 0 AND 1"),
)
