"""The speed layer's processed offsets, read from its landing checkpoint, its health report read back typed,
and the watchdog's stall verdict."""

import json
import time
from datetime import UTC, datetime

from infra import processes, services, speed_report
from infra.deployment import load
from speed_layer import lag


def _batch(checkpoint, batch_id: int, offsets: dict, committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(
        "v1\n"
        + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
        + "\n"
        + json.dumps({"events": offsets})
    )
    (checkpoint / "offsets" / f".{batch_id}.crc").write_text("")
    if committed:
        (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_processed_offsets_are_the_last_committed_micro_batchs(tmp_path):
    assert lag.committed(tmp_path) is None
    _batch(tmp_path, 9, {"0": 100, "1": 70}, committed=True)
    _batch(tmp_path, 10, {"0": 150, "1": 90}, committed=True)
    _batch(tmp_path, 11, {"0": 400, "1": 95}, committed=False)  # planned, not done: not processed
    assert lag.committed(tmp_path) == {"0": 150, "1": 90}


def test_the_health_report_reads_back_typed_as_it_was_written(tmp_path):
    path = tmp_path / "run" / "speed-health.json"
    assert speed_report.read(path) is None
    written = speed_report.Health(
        7,
        "2026-11-28T03:00:00Z",
        None,
        lag=12,
        processed_offsets={"0": 40, "1": 2},
        steps={"collect": 0.2},
        startup={"Spark session": 5.1},
        queries={
            "landing": speed_report.QueryHealth(True, 3, durations_ms={"triggerExecution": 500}),
            "products": speed_report.QueryHealth(False),
        },
    )
    speed_report.write(path, written)
    read = speed_report.read(path)
    assert read == written and isinstance(read.queries["landing"], speed_report.QueryHealth)
    assert read.processed == 42 and not read.active  # the products query is not active


def _report(settings, lag_records: int, progressed_seconds_ago: float) -> None:
    moment = datetime.fromtimestamp(time.time() - progressed_seconds_ago, UTC)
    settings.speed_health_file.parent.mkdir(parents=True, exist_ok=True)
    settings.speed_health_file.write_text(
        json.dumps(
            {
                "pid": 1,
                "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "error": None,
                "lag": lag_records,
                "progressed_at": moment.isoformat(),
                "stall_after_seconds": 30.0,
                "queries": {},
            }
        )
    )


def test_the_speed_layer_is_stalled_when_input_waits_past_its_stall_time(tmp_path, monkeypatch):
    settings = load(tmp_path)
    monkeypatch.setattr(processes, "running_pid", lambda *_: 1)
    _report(settings, 5, progressed_seconds_ago=10)
    assert services.speed_problem(settings) is None  # a micro-batch may take that long
    _report(settings, 0, progressed_seconds_ago=300)
    assert services.speed_problem(settings) is None  # nothing waits: idle, not stalled
    _report(settings, 5, progressed_seconds_ago=31)
    assert services.speed_problem(settings).startswith("the speed layer is stalled: lag 5 and no micro-batch finished")
