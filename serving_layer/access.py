"""Who may use the HTTP API: bound to a loopback address it is open; bound to any other, a request
carries ``Authorization: Bearer <token>`` (serving_layer.api; serving_layer.client sends it)."""

from __future__ import annotations

import ipaddress

from infra import credentials
from infra.deployment import Deployment


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token(settings: Deployment, host: str) -> str | None:
    """The token requests must carry: ``serve_token`` if set; else, off loopback, one generated once and
    kept in ``<home>/secrets/serve-token`` (mode 600); else none."""
    if settings.serve_token or is_loopback(host):
        return settings.serve_token
    return credentials.kept(settings, "serve-token")
