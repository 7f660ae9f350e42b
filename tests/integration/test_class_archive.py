"""Spark's drivers start from the class archive that setup keeps (infra.class_archive)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.spark import CLASS_ARCHIVE

pytestmark = pytest.mark.integration


def test_a_spark_driver_maps_the_class_archive_kept_at_setup(spark):
    jvm = spark.sparkContext._gateway.proc.pid  # spark-submit's script execs the driver JVM in its place
    assert str(CLASS_ARCHIVE) in Path(f"/proc/{jvm}/maps").read_text()
