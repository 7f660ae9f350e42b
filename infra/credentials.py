"""A deployment's secrets: set in the settings, or generated once and kept in ``<home>/secrets``,
readable by its owner only. Secrets are never printed or logged: :func:`where` says where one is."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.deployment import Deployment


def _path(settings: Deployment, name: str) -> Path:
    return settings.home / "secrets" / name


def kept(settings: Deployment, name: str) -> str:
    """The secret ``name`` kept in ``<home>/secrets/<name>`` (mode 600), generated on first use."""
    path = _path(settings, name)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(secrets.token_urlsafe(24))
    except FileExistsError:
        pass  # made before, maybe by another process at the same moment
    return path.read_text().strip()


def where(settings: Deployment, setting: str, name: str) -> str:
    """Where to find a secret without printing it: the setting ``setting`` if set, else the file that
    :func:`kept` keeps it in as ``name``."""
    if getattr(settings, setting):
        return f"the setting {setting} in {settings.home / 'settings.json'}"
    return str(_path(settings, name))


def airflow_password(settings: Deployment) -> str:
    """The Airflow admin's password: the ``airflow_password`` setting, else generated for this deployment."""
    return settings.airflow_password or kept(settings, "airflow-password")


def airflow_password_location(settings: Deployment) -> str:
    """Where the Airflow admin's password is (:func:`where`)."""
    return where(settings, "airflow_password", "airflow-password")
