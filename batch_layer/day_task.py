"""A day's recompute on the batch engine as the nightly task runs it, in a process of its own
(``python -m batch_layer.day_task 2026-11-20T00:00:00+00:00``, for the deployment of ``LAMBDALAKE_HOME``):
what the tests and the reliability benchmark kill and rerun."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta

from infra.deployment import REPO, Deployment


def start(settings: Deployment, day: datetime) -> subprocess.Popen:
    """The task for the day from ``day``, started (its stderr piped: an error's last line is its message)."""
    return subprocess.Popen(
        [sys.executable, "-m", __name__, day.isoformat()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LAMBDALAKE_HOME": str(settings.home), "PYTHONPATH": str(REPO)},
    )


if __name__ == "__main__":
    from batch_layer.recompute import recompute_day
    from infra import deployment as config
    from infra import spark

    first, deployment = datetime.fromisoformat(sys.argv[1]), config.load()
    with spark.engine(deployment) as session:
        recompute_day(session, deployment, first, first + timedelta(days=1))
