"""Reprocess, blue/green, on real Spark and Delta: new versions are built aside while readers see the old
ones whole, switched together in one commit, switched back, and retired after their retention."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest
from deltalake import DeltaTable

from batch_layer import reprocess
from batch_layer.quality import QualityFailed
from batch_layer.recompute import recompute_view
from domains.clickstream.generator import generate
from domains.sample import Mix
from infra import storage
from lake import versions
from serving_layer import engine
from tests import oracle
from tests.integration.records import land
from views import get, timebase
from views import tables as catalog

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 20, tzinfo=timebase.UTC)
VIEWS = ("page_views_per_minute", "active_users_hourly")
PAGE_VIEWS = get(VIEWS[0])
NEXT_DAY = DAY + timebase.DAY


@pytest.fixture
def seen(spark, tables) -> list:
    """Two days of events landed (the 19th and 20th)."""
    records = generate(DAY - timebase.DAY, NEXT_DAY, 600, seed=5)
    land(spark, tables, records)
    return records


def _batch(spark, settings, names) -> None:
    for name in names:
        recompute_view(spark, settings, get(name), DAY - timebase.DAY, NEXT_DAY)


def _merged(settings, name: str) -> dict:
    """The merged view's rows by window and key: its measures and source."""
    view = get(name)
    columns, rows = engine.query(settings, f'SELECT * FROM "{name}"')
    found = [dict(zip(columns, row, strict=True)) for row in rows]
    return {
        (timebase.utc(r["window_start"]), *(r[k] for k in view.keys)): (
            *(r[m.name] for m in view.measures),
            r["source"],
        )
        for r in found
    }


def _exact(records, before: datetime) -> dict:
    """page_views_per_minute per the oracle, as :func:`_merged` shows batch rows, for windows before ``before``."""
    return {key: (*value, "batch") for key, value in oracle.views(records)[PAGE_VIEWS.name].items() if key[0] < before}


def _pointer_commits(settings) -> int:
    path = catalog.SERVING_VERSIONS.path(settings)
    return len(DeltaTable(path).history()) if DeltaTable.is_deltatable(path) else 0


def test_reprocess_builds_aside_switches_both_views_in_one_commit_and_switches_back(spark, tables, seen):
    _batch(spark, tables, VIEWS)
    before = {name: _merged(tables, name) for name in VIEWS}
    assert before[PAGE_VIEWS.name] == _exact(seen, NEXT_DAY)
    # events batch has not seen: for the 20th (which the reprocess recomputes) and the 21st (for the nightly run)
    more = generate(DAY, NEXT_DAY + timebase.DAY, 300, seed=6, mix=Mix(late=0, duplicate=0, malformed=0))
    land(spark, tables, more)

    plan = reprocess.plan(tables, "v2", VIEWS, DAY.date(), DAY.date())
    based_on = versions.snapshot(tables, VIEWS)
    built = reprocess.build(spark, tables, [get(name) for name in VIEWS], plan, based_on)
    assert {name: _merged(tables, name) for name in VIEWS} == before  # readers see the old versions, whole
    assert _pointer_commits(tables) == 0

    summary = reprocess.publish(tables, plan, built, based_on)
    assert _pointer_commits(tables) == 1  # both views switched in one commit
    assert {name: version.label for name, version in versions.describe(tables, VIEWS).items()} == {
        name: "v2" for name in VIEWS
    }
    assert (summary[PAGE_VIEWS.name].label, summary[PAGE_VIEWS.name].previous) == ("v2", versions.INITIAL)
    after = _merged(tables, PAGE_VIEWS.name)
    assert after == _exact(seen + more, NEXT_DAY) != before[PAGE_VIEWS.name]  # the 20th recomputed, the 19th copied
    for name in VIEWS:
        assert versions.current(tables, name).endswith(f"batch/{name}@v2")
        rows = _merged(tables, name)
        assert {source for *_, source in rows.values()} == {"batch"}
        assert len(rows) == spark.read.format("delta").load(versions.current(tables, name)).count()
    with pytest.raises(ValueError, match="label 'v2' is in use"):
        reprocess.plan(tables, "v2", VIEWS, DAY.date(), DAY.date())

    recompute_view(spark, tables, PAGE_VIEWS, NEXT_DAY, NEXT_DAY + timebase.DAY)  # the nightly run, into v2
    nightly = {k: v for k, v in _merged(tables, PAGE_VIEWS.name).items() if k[0] >= NEXT_DAY}
    assert nightly and nightly == {
        k: v for k, v in _exact(seen + more, NEXT_DAY + timebase.DAY).items() if k[0] >= NEXT_DAY
    }

    switched = versions.switch_back(tables, VIEWS)
    assert {name: done.label for name, done in switched.items()} == {name: versions.INITIAL for name in VIEWS}
    assert switched[PAGE_VIEWS.name].carried_days == str(NEXT_DAY.date())  # so the 21st stays whole
    assert _merged(tables, PAGE_VIEWS.name) == {**before[PAGE_VIEWS.name], **nightly}
    assert _merged(tables, VIEWS[1]) == before[VIEWS[1]]

    assert versions.retire(tables) == []  # v2 can be switched back to for a week
    retired = versions.retire(dataclasses.replace(tables, version_retention_days=0))
    assert retired == sorted(catalog.batch(name, "v2").name for name in VIEWS)
    assert _merged(tables, VIEWS[1]) == before[VIEWS[1]]  # never the serving version
    with pytest.raises(ValueError, match="no previous version"):
        versions.switch_back(tables, VIEWS)


def test_a_view_failing_its_checks_mid_way_switches_nothing(spark, tables, seen):
    _batch(spark, tables, VIEWS[:1])
    before = _merged(tables, PAGE_VIEWS.name)
    strict = dataclasses.replace(PAGE_VIEWS, expectations=("views > 1000",))
    plan = reprocess.plan(tables, "v2", VIEWS[::-1], DAY.date(), DAY.date())
    with pytest.raises(QualityFailed, match="views > 1000"):
        reprocess.build(spark, tables, [get(VIEWS[1]), strict], plan, versions.snapshot(tables, VIEWS))
    assert not [t for t in storage.folders(tables.table("batch")) if t.endswith("@v2")]  # the one built first too
    assert _pointer_commits(tables) == 0 and _merged(tables, PAGE_VIEWS.name) == before
