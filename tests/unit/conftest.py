"""Unit tests never touch a real Airflow home: AIRFLOW_HOME points at a throwaway folder before anything
imports airflow (airflow reads, and may write, its home at import time)."""

import os
import sys
import tempfile

if "airflow" in sys.modules:
    raise RuntimeError(
        "airflow was imported before tests/unit/conftest.py could point AIRFLOW_HOME at a tmp "
        "dir; import airflow inside tests or fixtures, not at the top of a test module"
    )

_AIRFLOW_HOME = tempfile.TemporaryDirectory(prefix="lambdalake-unit-airflow-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME.name
