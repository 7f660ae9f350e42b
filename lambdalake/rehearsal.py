"""The batch engine's warm-up job (``python -m lambdalake.rehearsal``, run by ``infra.batch_engine.warm_up``
in a process of its own, for the deployment of ``LAMBDALAKE_HOME``): a generated day of the deployment's
domain landed and recomputed on the engine (``recompute_day``: its checks, every view, the ledger), in a
scratch deployment of the engine's own, then removed. It reads and writes none of the deployment's data."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

from batch_layer.recompute import recompute_day
from infra import deployment as config
from infra import spark as sparks
from infra.deployment import Deployment
from speed_layer.queries import ensure_tables
from views import events, generator, tables

#: The day the rehearsal generates and recomputes, and its events.
DAY = datetime(2000, 1, 3, tzinfo=UTC)
EVENTS = 2000


def rehearse(settings: Deployment) -> None:
    """Land and recompute the rehearsed day on ``settings``' batch engine, in a scratch deployment."""
    scratch = settings.with_overrides(home=settings.run / "engine-warm-up", storage=None)
    shutil.rmtree(scratch.home, ignore_errors=True)
    end = DAY + timedelta(days=1)
    records = generator(settings.domain).generate(DAY, end, EVENTS, seed=1)
    source = settings.source
    try:
        with sparks.engine(settings) as spark:
            ensure_tables(spark, scratch)
            parsed = events.parse(
                events.kafka_frame(spark, records), source, scratch.max_payload_bytes, scratch.future_horizon_seconds
            )
            events.landed(parsed, source).write.format("delta").mode("append").partitionBy(
                *tables.RAW_EVENTS.partition_by
            ).save(tables.RAW_EVENTS.path(scratch))
            recompute_day(spark, scratch, DAY, end)
    finally:
        shutil.rmtree(scratch.home, ignore_errors=True)


if __name__ == "__main__":
    rehearse(config.load())
