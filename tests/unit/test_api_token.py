"""The serving API's token: none on loopback; off loopback one is generated once, for the owner only."""

from infra.settings import load
from serving_layer import api


def test_off_loopback_a_token_is_generated_for_the_owner_only(tmp_path):
    settings = load(tmp_path)
    assert api.token(settings, "127.0.0.1") is None
    made = api.token(settings, "0.0.0.0")
    path = tmp_path / "secrets" / "serve-token"
    assert len(made) >= 32 and path.read_text() == made and path.stat().st_mode & 0o777 == 0o600
    assert api.token(settings, "10.0.0.5") == made
