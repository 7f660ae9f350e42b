"""Where the landing query starts: its checkpoint, or, only when asked, the offsets already landed.

A landing checkpoint that is gone while raw_events already holds records is never papered over:
starting from Kafka's earliest offsets would land records twice, so the speed layer stops and says
how to go on.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from infra import kafka
from infra.deployment import Deployment
from views import tables

EARLIEST = -2  # Kafka's "earliest" in Spark's startingOffsets JSON
LOST_HINT = (
    "Kafka no longer holds offsets the speed layer still needs (retention deleted them before "
    "they were landed); those records are lost unless producers resend them. Ways out: have them "
    "resent, or move the landing checkpoint aside and run `lambdalake speed start "
    "--resume-from-tables` to go on from the oldest records Kafka still holds"
)


class CheckpointLost(RuntimeError):
    """The landing checkpoint is missing but records were landed before."""


def checkpoint(settings: Deployment) -> Path:
    """The landing query's checkpoint."""
    return settings.checkpoints / tables.RAW_EVENTS.stream_checkpoint


def landed_offsets(settings: Deployment) -> dict[int, int]:
    """The highest Kafka offset landed (in raw_events or dead_letters) per partition of the events topic."""
    highest: dict[int, int] = {}
    for landed in (tables.RAW_EVENTS, tables.DEAD_LETTERS):
        table = landed.rows(settings, ["topic", "partition", "offset"])
        for row in [] if table is None else table.to_pylist():
            if row["topic"] == settings.topic:
                highest[row["partition"]] = max(highest.get(row["partition"], -1), row["offset"])
    return highest


def app_id(checkpoint: Path) -> tuple[str, bool]:
    """The Delta txnAppId of the query checkpointed at ``checkpoint``, and whether it is new.

    It is kept beside the checkpoint, so a new checkpoint (whose batch ids restart at 0) gets a new
    one and Delta's idempotent writes never mistake its batches for old ones.
    """
    app_file = checkpoint.with_name(checkpoint.name + ".app-id")
    if (checkpoint / "offsets").is_dir() and app_file.exists():
        return app_file.read_text().strip(), False
    app_file.parent.mkdir(parents=True, exist_ok=True)
    app_file.write_text(f"{checkpoint.name}-{uuid.uuid4().hex[:12]}\n")
    return app_file.read_text().strip(), True


def plan(settings: Deployment, resume_from_tables: bool = False) -> tuple[str, str]:
    """The landing query's (txnAppId, startingOffsets JSON): each partition resumes after its highest
    landed offset, or at the oldest Kafka still holds if that is later."""
    landing = checkpoint(settings)
    app, fresh = app_id(landing)
    if not fresh:
        return app, "earliest"
    landed = landed_offsets(settings)
    if landed and not resume_from_tables:
        where = ", ".join(f"{settings.topic}-{p} up to offset {o}" for p, o in sorted(landed.items()))
        raise CheckpointLost(
            f"the landing checkpoint {landing} is missing, but records were landed already ({where}); "
            f"restarting from Kafka's earliest offsets would land them twice. Ways out: restore the "
            f"checkpoint folder, or run `lambdalake speed start --resume-from-tables` to go on after the "
            f"highest offset landed in each partition"
        )
    if not landed:
        return app, "earliest"
    oldest = kafka.beginning_offsets(settings, settings.topic)
    offsets = {str(p): max(landed[p] + 1, first) if p in landed else EARLIEST for p, first in oldest.items()}
    return app, json.dumps({settings.topic: offsets})
