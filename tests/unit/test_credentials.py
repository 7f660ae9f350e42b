"""Secrets are set in the settings or generated once per deployment, for its owner only."""

from infra import credentials
from infra.settings import load


def test_the_airflow_password_is_generated_once_for_the_owner_only(tmp_path):
    settings = load(tmp_path)
    made = credentials.airflow_password(settings)
    path = tmp_path / "secrets" / "airflow-password"
    assert len(made) >= 24 and path.read_text() == made
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert credentials.airflow_password(load(tmp_path)) == made
    assert credentials.airflow_password(load(tmp_path / "other")) != made  # each deployment its own


def test_a_password_set_in_the_settings_is_used_and_nothing_is_generated(tmp_path):
    settings = load(tmp_path).with_overrides(airflow_password="chosen")
    assert credentials.airflow_password(settings) == "chosen"
    assert not (tmp_path / "secrets").exists()
