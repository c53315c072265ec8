"""PySpark data source "quorumlog" (install the `spark` extra: pyspark >= 4.2 and pyarrow).

    from quorumlog.spark import register
    register(spark)
    df = spark.read.format("quorumlog").option("endpoints", eps).load()

See docs/spark.md for the options.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the "quorumlog" format with a SparkSession. When Spark would start Python workers with a
    `python3` from PATH that cannot import quorumlog, a local-mode session's workers are given this
    interpreter instead, and another master gets a warning naming PYSPARK_PYTHON (logger quorumlog.spark)."""
    from .source import register as _register

    _register(spark)
