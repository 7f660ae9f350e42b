"""Secrets are set in the settings or generated once per deployment, for its owner only."""

import json
import os

from infra import credentials, private_files
from infra.deployment import load


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


def test_where_names_the_secret_s_place_never_the_secret(tmp_path):
    settings = load(tmp_path)
    assert credentials.where(settings, "serve_token", "serve-token") == str(tmp_path / "secrets" / "serve-token")
    chosen = settings.with_overrides(airflow_password="chosen")
    assert (
        credentials.airflow_password_location(chosen) == f"the setting airflow_password in {tmp_path / 'settings.json'}"
    )


def test_files_that_may_hold_secrets_are_created_for_the_owner_only(tmp_path):
    """Whatever the umask, and over a file that others could read."""
    old = os.umask(0)
    try:
        (tmp_path / "settings.json").write_text('{"serve_token": "s3cret"}')
        assert (tmp_path / "settings.json").stat().st_mode & 0o777 == 0o666
        load(tmp_path).save(batch_start_date="2026-01-01")
        private_files.write_private(tmp_path / "new" / "keys", "k")
    finally:
        os.umask(old)
    assert json.loads((tmp_path / "settings.json").read_text()) == {
        "serve_token": "s3cret",
        "batch_start_date": "2026-01-01",
    }
    for path in (tmp_path / "settings.json", tmp_path / "new" / "keys"):
        assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keys", "new", "settings.json"]  # no temporary file left


def test_spark_gets_the_object_store_keys_from_a_file_of_the_owner_s_never_on_its_command_line(tmp_path):
    from infra import batch_engine

    settings = load(tmp_path).with_overrides(
        spark_conf={
            "spark.hadoop.fs.s3a.access.key": "AKIA-visible?",
            "spark.hadoop.fs.s3a.secret.key": "s3cret\\with\nlines",
            "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        }
    )
    argv = batch_engine.command(settings)
    assert not any("AKIA" in arg or "s3cret" in arg for arg in argv)
    assert "spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:9000" in argv
    path = tmp_path / "run" / f"{batch_engine.NAME}.properties"
    assert argv[argv.index("--properties-file") + 1] == str(path) and path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().splitlines() == [
        "spark.hadoop.fs.s3a.access.key=AKIA-visible?",
        "spark.hadoop.fs.s3a.secret.key=s3cret\\\\with\\nlines",
    ]
