"""Ad views per campaign in 10-second windows (the Yahoo Streaming Benchmark's count). The campaign is
the ad's as of the view in batch, and the latest known in speed; ``unknown`` for an ad without one."""

from datetime import timedelta

from views.model import Dimension, Tumbling, View, count

VIEW = View(
    name="campaign_views_10s",
    description=__doc__,
    event_types=("view",),
    window=Tumbling(timedelta(seconds=10)),
    keys=("campaign_id",),
    measures=(count("views"),),
    joins=(Dimension("campaigns", key="ad_id", column="campaign_id", default="unknown"),),
    expectations=("views > 0",),
)
