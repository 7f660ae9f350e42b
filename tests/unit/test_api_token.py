"""The serving API's token: none on loopback; off loopback one is generated once, for the owner only; it is
never printed or logged, only where it is."""

import json

import pytest
import requests

from infra import processes, services
from infra.deployment import load
from serving_layer import access
from tests.ports import free_port


def test_off_loopback_a_token_is_generated_for_the_owner_only(tmp_path):
    settings = load(tmp_path)
    assert access.token(settings, "127.0.0.1") is None
    made = access.token(settings, "0.0.0.0")
    path = tmp_path / "secrets" / "serve-token"
    assert len(made) >= 32 and path.read_text() == made and path.stat().st_mode & 0o777 == 0o600
    assert access.token(settings, "10.0.0.5") == made


@pytest.mark.processes
def test_the_api_s_log_says_where_the_token_is_never_the_token(tmp_path):
    """As `lambdalake up` starts it: its output goes to logs/serving-api.log."""
    (tmp_path / "settings.json").write_text(json.dumps({"serve_port": free_port(), "serve_token": "s3cret-token"}))
    settings = load(tmp_path)
    services.start_serving(settings)
    try:
        assert requests.get(f"{settings.serve_url}views", timeout=30).status_code == 401
    finally:
        processes.stop(settings, services.SERVING)
    log = processes.log_file(settings, services.SERVING).read_text()
    assert "s3cret-token" not in log
    assert f"requests need the token in the setting serve_token in {tmp_path / 'settings.json'}" in log
