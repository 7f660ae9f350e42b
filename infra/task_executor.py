"""Airflow's LocalExecutor, with the batch tasks' libraries imported once in the scheduler.

On Linux an Airflow task runs in a process forked from the executor's worker, itself forked from the
scheduler: whatever the scheduler imported before its workers started, every task has without paying
for it again. A batch task spends more time importing (Great Expectations, pandas, Spark Connect's
client, Airflow's own DAG parsing) than sending a demo day's work to the batch engine, so the
scheduler imports them when the executor starts (``AIRFLOW__CORE__EXECUTOR`` names this class).
Nothing else changes: the workers, the queues and the task processes are LocalExecutor's own.
"""

from __future__ import annotations

import importlib

from airflow.executors.local_executor import LocalExecutor

from infra.dag_processor import preload

#: What a batch or maintenance task imports before its first line of work.
PRELOADED = (
    "airflow.dag_processing.dagbag",
    "airflow.sdk.execution_time.task_runner",
    "great_expectations",
    "great_expectations.expectations",
    "pyspark.sql.connect.session",
    "batch_layer.recompute",
    "batch_layer.quality",
    "batch_layer.maintenance",
)


class PreloadedLocalExecutor(LocalExecutor):
    """LocalExecutor whose task processes start with :data:`PRELOADED`, and what the DAG files import
    (:func:`infra.dag_processor.preload`), already imported."""

    def start(self) -> None:
        from airflow.sdk.listener import get_listener_manager

        for module in PRELOADED:
            importlib.import_module(module)
        preload()  # what the DAG files import, which a task parses first: the task decorator's libcst among it
        get_listener_manager()  # a task's first call scans the installed packages' plugins: done once here
        super().start()
