"""Source and changelog declarations: the columns they land, the domain a deployment finds, and the
mistakes they refuse."""

import pytest

from domains.clickstream import EVENTS, PRODUCTS
from lambdalake import new_domain
from views import all_views, domain, generator, has_generator
from views.source import DECIMAL, STRING, Changelog, Source


def _source(**changes) -> Source:
    declared = {
        "name": "s",
        "description": "",
        "topic": "t",
        "fields": {"id": STRING, "at": STRING, "kind": STRING, "n": DECIMAL},
        "required": ("id", "at", "kind"),
        "types": {"a": ("n",)},
        "key": "id",
        "time": "at",
        "kind": "kind",
    }
    return Source(**{**declared, **changes})


def test_the_key_time_and_kind_fields_land_as_the_columns_every_layer_reads():
    assert _source().columns == ("event_id", "event_time", "event_type", "n")
    assert EVENTS.columns == tuple(EVENTS.fields)  # the clickstream names them so already
    assert EVENTS.strings[:5] == EVENTS.required and EVENTS.numbers == {"quantity": "integer", "amount": DECIMAL}
    assert PRODUCTS.attributes == ("category", "price")


def test_a_deployment_finds_its_domain_and_the_domain_its_views():
    assert domain("clickstream").source is EVENTS and domain().dimensions == (PRODUCTS,)
    assert set(all_views(domain_name="clickstream")) >= {"page_views_per_minute", "sessions_hourly"}
    with pytest.raises(ValueError, match=r"unknown domain 'shop' .*a bundled one \(ads, clickstream\)"):
        domain("shop")


def test_a_domain_in_a_folder_of_its_own_is_found_by_its_path(tmp_path):
    written = new_domain.write(tmp_path / "acme_unit")
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "acme_unit/__init__.py",
        "acme_unit/views/__init__.py",
        "acme_unit/views/orders_per_hour.py",
        "acme_unit/tests/test_orders_per_hour.py",
    ]
    folder = str(tmp_path / "acme_unit")
    assert domain(folder).source.topic == "acme_unit-events" and domain(folder) is domain(folder)
    assert list(all_views(domain_name=folder)) == ["orders_per_hour"]
    assert not has_generator(folder) and has_generator("clickstream")
    with pytest.raises(ValueError, match=r"domain .*acme_unit has no sample-data generator.*--from-file"):
        generator(folder)


@pytest.mark.parametrize(
    "name,problem",
    [
        ("json", "its name 'json' must be a Python identifier that no installed module has"),
        ("bare", "has no __init__.py declaring DOMAIN"),
        ("./relative", "name it by its absolute path"),
    ],
)
def test_a_folder_that_cannot_be_a_domain_is_refused_with_its_reason(tmp_path, name, problem):
    (tmp_path / name).mkdir(parents=True)
    if name == "json":
        (tmp_path / name / "__init__.py").write_text("")
    with pytest.raises(ValueError, match=problem):
        domain(name if name.startswith(".") else str(tmp_path / name))


def test_new_domain_writes_only_into_a_new_or_empty_folder_with_a_python_name(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="exists and is not empty"):
        new_domain.write(tmp_path / "taken")
    with pytest.raises(ValueError, match="'9lives' must be a Python identifier"):
        new_domain.write(tmp_path / "9lives")


@pytest.mark.parametrize(
    "changes,problem",
    [
        ({"fields": {"id": STRING, "at": STRING, "kind": STRING, "n": "float"}}, "field n has unknown type 'float'"),
        ({"types": {"a": ("m",)}}, "m is not one of the fields"),
        ({"fields": {"id": "integer", "at": STRING, "kind": STRING, "n": DECIMAL}}, "key field id must be a string"),
        ({"required": ("id", "kind")}, "time field at must be required"),
        (
            {"fields": {"id": STRING, "at": STRING, "kind": STRING, "n": DECIMAL, "offset": STRING}},
            "field offset has a name the landing keeps for itself",
        ),
        (
            {"fields": {"id": STRING, "at": STRING, "kind": STRING, "event_id": STRING}},
            "two fields land as column event_id",
        ),
    ],
)
def test_a_wrong_source_is_refused_with_its_reason(changes, problem):
    with pytest.raises(ValueError, match=f"source s: .*{problem}"):
        _source(**changes)


def test_a_wrong_changelog_is_refused_with_its_reason():
    with pytest.raises(ValueError, match=r"changelog c: .*valid_from field updated_at must be a string field"):
        Changelog("c", "", "c", "c_changes", "k", {"k": STRING, "v": DECIMAL})
