"""A deployment's secrets: set in the settings, or generated once and kept in ``<home>/secrets``,
readable by its owner only."""

from __future__ import annotations

import os
import secrets

from infra.settings import Settings


def kept(settings: Settings, name: str) -> str:
    """The secret ``name`` kept in ``<home>/secrets/<name>`` (mode 600), generated on first use."""
    path = settings.home / "secrets" / name
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(secrets.token_urlsafe(24))
    except FileExistsError:
        pass  # made before, maybe by another process at the same moment
    return path.read_text().strip()


def airflow_password(settings: Settings) -> str:
    """The Airflow admin's password: the ``airflow_password`` setting, else generated for this deployment."""
    return settings.airflow_password or kept(settings, "airflow-password")
