"""The correction report: a known speed error (events the speed layer never saw) shows up, when batch
makes the day final, with its size."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from batch_layer.recompute import recompute_view
from domains.clickstream.generator import generate
from domains.sample import Mix
from speed_layer import queries
from speed_layer.fold import Fold
from tests import oracle
from tests.integration.records import land
from views import all_views, timebase
from views.events import kafka_frame

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 20, tzinfo=timebase.UTC)
CLEAN = Mix(late=0, duplicate=0, malformed=0)


def test_events_the_speed_layer_missed_show_up_as_a_correction_of_their_size(spark, tables):
    view = all_views()["page_views_per_minute"]
    start = DAY + timedelta(hours=10)
    seen = generate(start, start + timedelta(hours=1), 400, seed=7, mix=CLEAN)
    missed = generate(start, start + timedelta(hours=1), 60, seed=8, mix=CLEAN)
    queries.ensure_tables(spark, tables)
    Fold(spark, tables, [view], "corrections")(kafka_frame(spark, seen), 0)
    land(spark, tables, missed)

    recompute_view(spark, tables, view, DAY, DAY + timedelta(days=1))

    report = {r.measure: r for r in spark.read.format("delta").load(tables.table("corrections")).collect()}
    speed, batch = oracle.views(seen)[view.name], oracle.views(seen + missed)[view.name]
    missed_views = sum(json.loads(r.value)["event_type"] == "page_view" for r in missed)
    views = report["views"]
    assert (views.speed_windows, views.batch_windows) == (len(speed), len(batch))
    assert (views.added, views.removed) == (len(batch.keys() - speed.keys()), 0)
    # a window changed exactly when it gained a missed page view: the others saw the same users, and a
    # sketch of the same users estimates the same in both layers
    assert views.changed == sum(batch[k][0] != speed[k][0] for k in speed)
    assert views.difference == missed_views
    assert views.relative_difference == pytest.approx(missed_views / sum(v[0] for v in batch.values()))
    assert (str(views.first_day), str(views.last_day)) == ("2026-11-20", "2026-11-20")
