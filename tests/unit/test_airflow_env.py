"""The environment lambdalake gives every Airflow process (infra.airflow.env): each option it sets is one
the pinned Airflow knows, its secrets are kept for their owner only, and nothing is left to send usage
data off the machine."""

import pytest

from infra import airflow
from infra.deployment import load


def _described() -> dict:
    from airflow.configuration import conf

    return conf.configuration_description


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_every_option_set_is_one_airflow_knows(tmp_path, database):
    described = _described()
    options = [
        name.removeprefix("AIRFLOW__").lower().split("__")
        for name in airflow.env(load(tmp_path).with_overrides(airflow_database=database))
        if name.startswith("AIRFLOW__")
    ]
    assert len(options) > 20
    assert [
        (section, option) for section, option in options if option not in described.get(section, {}).get("options", {})
    ] == []
    assert (airflow.airflow_home(load(tmp_path)) / "secrets.json").stat().st_mode & 0o777 == 0o600


def test_the_pinned_airflow_collects_no_usage_data():
    """Airflow 2.10's usage data collection (Scarf, ``[usage_data_collection] enabled``) was removed
    (apache/airflow#45865): the pinned Airflow has no such option, so there is nothing to turn off (GX's
    analytics are, in batch_layer/quality.py). If an upgrade brings it back, turn it off in env()."""
    assert "usage_data_collection" not in _described()


def test_postgresql_serves_both_engines_through_psycopg_and_other_databases_are_refused(tmp_path):
    environment = airflow.env(load(tmp_path).with_overrides(airflow_database="postgresql", airflow_database_port=6543))
    sync = environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert sync == environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"]
    assert sync.startswith("postgresql+psycopg://airflow:") and sync.endswith("@127.0.0.1:6543/airflow")
    assert (tmp_path / "secrets" / "airflow-db-password").stat().st_mode & 0o777 == 0o600
    (tmp_path / "settings.json").write_text('{"airflow_database": "mysql"}')
    with pytest.raises(ValueError, match='airflow_database \'mysql\': expected "sqlite" or "postgresql"'):
        load(tmp_path)
