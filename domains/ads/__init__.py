"""Advertising, in the shape of the Yahoo Streaming Benchmark: users view ads, click them and buy
through them; each ad belongs to a campaign (a dimension fed by the campaigns changelog)."""

from views.source import STRING, Changelog, Domain, Source

AD_EVENTS = Source(
    name="ads",
    description="What users do with the ads they are shown, one event per view, click or purchase.",
    topic="ad_events",
    fields={"event_id": STRING, "event_time": STRING, "event_type": STRING, "user_id": STRING, "ad_id": STRING},
    required=("event_id", "event_time", "event_type", "user_id", "ad_id"),
    types={"view": (), "click": (), "purchase": ()},
)

CAMPAIGNS = Changelog(
    name="campaigns",
    description="Which campaign each ad belongs to, as ads move between campaigns.",
    topic="campaigns",
    changes="campaign_changes",
    key="ad_id",
    fields={"ad_id": STRING, "campaign_id": STRING, "updated_at": STRING},
)

DOMAIN = Domain(name="ads", description=__doc__, source=AD_EVENTS, dimensions=(CAMPAIGNS,))
