"""Maintenance deletes Airflow's logs older than the retention, and only those."""

import os
import time

from batch_layer.maintenance import trim_logs
from infra.airflow import parsing_logs, task_logs
from infra.deployment import load


def test_old_task_and_parsing_logs_go_recent_ones_stay(tmp_path):
    settings = load(tmp_path)
    old_task = task_logs(settings) / "dag_id=x" / "run_id=1" / "attempt=1.log"
    new_task = task_logs(settings) / "dag_id=x" / "run_id=2" / "attempt=1.log"
    old_parse = parsing_logs(settings) / "maintenance.py.log"
    for path in (old_task, new_task, old_parse):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("log")
    weeks_ago = time.time() - (settings.log_retention_days + 1) * 86_400
    for path in (old_task, old_parse):
        os.utime(path, (weeks_ago, weeks_ago))
    assert trim_logs(settings) == 2
    assert new_task.exists() and not old_task.exists() and not old_parse.exists()
