"""``lambdalake new-domain PATH``: a domain of a deployment's own in a folder outside this repository,
laid out as the bundled ones are (``views.package``): its source in ``__init__.py``, one view in
``views/``, and a test of that view in ``tests/``, for the data engineer to make their own. The
``domain`` setting then names the folder. It has no sample-data generator: its events come from its
producers, or from ``lambdalake produce --from-file``."""

from __future__ import annotations

from pathlib import Path

SOURCE = '''"""{name}: what its events say (written by `lambdalake new-domain`: describe your own)."""

from views.source import INTEGER, STRING, Domain, Source

EVENTS = Source(
    name="{name}",
    description="One event per sign-up or order.",
    topic="{name}-events",
    fields={{"event_id": STRING, "event_time": STRING, "event_type": STRING, "user_id": STRING,
             "amount": INTEGER}},
    required=("event_id", "event_time", "event_type", "user_id"),
    types={{"signup": (), "order": ("amount",)}},
)

DOMAIN = Domain(name="{name}", description=__doc__, source=EVENTS)
'''

VIEWS = '''"""The views of {name}, one module each declaring VIEW."""
'''

VIEW = '''"""Orders per hour: how many, and their amounts' total."""

from datetime import timedelta

from views.model import Tumbling, View, count, total

VIEW = View(
    name="orders_per_hour",
    description=__doc__,
    event_types=("order",),
    window=Tumbling(timedelta(hours=1)),
    keys=(),
    measures=(count("orders"), total("amount", "amount")),
    expectations=("orders > 0",),
)
'''

TEST = '''"""orders_per_hour over a few events, computed as the batch layer computes it (run: pytest {folder}/tests)."""

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from infra import deployment as config
from infra import spark as sparks
from infra.producer import Record
from views import compile, events

FOLDER = Path(__file__).resolve().parents[1]


def _event(number: int, kind: str, hour: int, **fields) -> Record:
    at = datetime(2026, 1, 1, hour, 15, tzinfo=timezone.utc)
    body = {{"event_id": f"e{{number}}", "event_time": at.isoformat(), "event_type": kind, "user_id": "u1", **fields}}
    return Record(at, b"u1", json.dumps(body).encode(), "valid")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    deployment = config.load(tmp_path_factory.mktemp("home")).with_overrides(domain=str(FOLDER))
    session = sparks.session(deployment, "{name}-test")
    yield deployment, session
    session.stop()


def test_orders_per_hour_counts_and_totals_each_hours_orders_once(deployment):
    deployment, spark = deployment
    records = [_event(1, "order", 10, amount=5), _event(2, "order", 10, amount=7), _event(2, "order", 10, amount=7),
               _event(3, "signup", 10), _event(4, "order", 11, amount=3)]
    parsed = events.parse(events.kafka_frame(spark, records), deployment.source, deployment.max_payload_bytes,
                          deployment.future_horizon_seconds)
    first_copies = compile.first_copies(events.landed(parsed, deployment.source))
    rows = compile.batch(deployment.views["orders_per_hour"], first_copies, {{}}).collect()
    assert {{row.window_start.hour: (row.orders, row.amount) for row in rows}} == {{10: (2, 12), 11: (1, 3)}}
'''


def write(folder: Path) -> list[Path]:
    """Write a new domain into ``folder`` (new, or empty); the files written."""
    folder = folder.expanduser().resolve()
    if not folder.name.isidentifier():
        raise ValueError(f"new-domain: {folder.name!r} must be a Python identifier (the folder's name is the domain's)")
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"new-domain: {folder} exists and is not empty")
    files = {
        folder / "__init__.py": SOURCE,
        folder / "views" / "__init__.py": VIEWS,
        folder / "views" / "orders_per_hour.py": VIEW,
        folder / "tests" / "test_orders_per_hour.py": TEST,
    }
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(name=folder.name, folder=folder))
    return list(files)
