"""Files that may hold a secret (settings, passwords, keys), written readable by their owner only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only: into a new file created with mode 600, then
    renamed over ``path`` (never readable by others, not for a moment, and never seen half written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temp, path)
