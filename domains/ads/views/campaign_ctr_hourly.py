"""Ad views per campaign and hour, how many were followed by a click on the same ad by the same user
within 30 minutes, and the click-through rate. The campaign is the ad's as of the view in batch, and
the latest known in speed; ``unknown`` for an ad without one."""

from datetime import timedelta

from views.model import Dimension, FollowedBy, Tumbling, View, count, ratio

VIEW = View(
    name="campaign_ctr_hourly",
    description=__doc__,
    event_types=("view",),
    window=Tumbling(timedelta(hours=1)),
    keys=("campaign_id",),
    measures=(count("views"), count("clicks", flagged="clicked"), ratio("ctr", "clicks", "views")),
    joins=(
        FollowedBy("click", on=("user_id", "ad_id"), within=timedelta(minutes=30), flag="clicked"),
        Dimension("campaigns", key="ad_id", column="campaign_id", default="unknown"),
    ),
    expectations=("views > 0", "clicks BETWEEN 0 AND views", "ctr BETWEEN 0 AND 1"),
)
