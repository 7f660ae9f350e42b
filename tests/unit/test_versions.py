"""Versions of the views' batch tables on tiny delta-rs tables: labels, switches, and what retirement keeps."""

import dataclasses
from datetime import datetime

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from infra.deployment import Deployment
from lake import versions
from views import tables as catalog
from views.timebase import UTC

VIEW = "page_views_per_minute"


@pytest.fixture(params=["folder", "file URI"])
def settings(tmp_path, request):
    """A deployment whose tables are in its home's folder, or at a ``file://`` URI (setting ``storage``)."""
    storage = (tmp_path / "lake").as_uri() if request.param == "file URI" else None
    settings = Deployment(home=tmp_path / "home", storage=storage)
    for label in (None, "v2", "broken"):  # the first version, a second, and a failed attempt's leftover
        write_deltalake(catalog.batch(VIEW, label).path(settings), pa.table({"n": [1]}))
    return settings


def _switch(settings, label):
    versions.switch(
        settings, {VIEW: catalog.batch(VIEW, label).name}, datetime.now(UTC), versions.snapshot(settings, [VIEW])
    )


@pytest.mark.parametrize(
    "label,needle",
    [
        ("V2", "lowercase letters"),
        ("", "lowercase letters"),
        ("a/b", "lowercase letters"),
        ("x" * 41, "1 to 40"),
        ("initial", "not 'initial'"),
        ("v2", "in use by page_views_per_minute"),
    ],
)
def test_a_label_must_be_well_formed_and_not_serving_or_kept(settings, label, needle):
    _switch(settings, "v2")
    with pytest.raises(ValueError, match=needle):
        versions.check_label(settings, [VIEW, "sessions_hourly"], label)
    versions.check_label(settings, [VIEW], "broken")  # a leftover is built again


def test_a_switch_names_the_previous_version_and_retirement_keeps_what_may_serve(settings):
    assert versions.current(settings, VIEW) == settings.table(f"batch/{VIEW}")
    _switch(settings, "v2")
    assert versions.current(settings, VIEW) == settings.table(f"batch/{VIEW}@v2")
    described = versions.describe(settings, [VIEW])[VIEW]
    assert (described.label, described.previous) == ("v2", versions.INITIAL)
    assert described.since is not None and datetime.fromisoformat(described.since) <= datetime.now(UTC)

    assert versions.retire(settings) == []  # written just now, within a week
    assert versions.retire(dataclasses.replace(settings, version_retention_days=0)) == [
        f"batch/{VIEW}",
        f"batch/{VIEW}@broken",
    ]
    assert versions.describe(settings, [VIEW])[VIEW].previous is None
    assert versions.current(settings, VIEW).endswith("@v2")
    with pytest.raises(ValueError, match="no previous version"):
        versions.switch_back(settings, [VIEW])


def test_a_switch_built_on_a_version_written_since_is_refused(settings):
    based_on = versions.snapshot(settings, [VIEW])
    write_deltalake(catalog.batch(VIEW).path(settings), pa.table({"n": [2]}), mode="append")
    with pytest.raises(versions.Conflict, match="nothing was switched"):
        versions.switch(settings, {VIEW: catalog.batch(VIEW, "v2").name}, datetime.now(UTC), based_on)
    assert versions.current(settings, VIEW).endswith(f"batch/{VIEW}")
