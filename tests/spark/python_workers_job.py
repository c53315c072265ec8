"""The driver of test_spark_python_workers, run by an interpreter whose directory is not on PATH and
without PYSPARK_PYTHON, as `venv/bin/python job.py` is without an activated venv:

    python python_workers_job.py ENDPOINTS GROUP CHECKPOINT_DIR

It first registers the data source with Spark's own call, and reads: Spark's Python workers run
`python3` from PATH. Then with quorumlog's register(), and reads with a batch and a streaming query.
Prints one line `RESULT {json}`.
"""

from __future__ import annotations

import json
import sys
import tempfile

from pyspark.sql import SparkSession

from quorumlog.spark import register
from quorumlog.spark.source import QuorumLogDataSource


def main() -> None:
    endpoints, group, checkpoint = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[2]").appName("quorumlog-python-workers-test")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", f"-XX:-UsePerfData -Djava.io.tmpdir={tempfile.gettempdir()}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    def count() -> int:
        return int(spark.read.format("quorumlog").option("endpoints", endpoints).option("groups", group).load().count())

    result: dict[str, object] = {"python_exec_before": spark.sparkContext.pythonExec}
    spark.dataSource.register(QuorumLogDataSource)
    try:
        result["unregistered_count"] = count()
    except Exception as e:  # what a user sees without register()
        result["unregistered_error"] = str(e)[:2000]

    register(spark)
    result["python_exec_after"] = spark.sparkContext.pythonExec
    result["count"] = count()
    q = (spark.readStream.format("quorumlog").option("endpoints", endpoints).option("groups", group).load()
         .writeStream.format("memory").queryName("events").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(90)
    finally:
        q.stop()
    result["stream_count"] = spark.table("events").count()
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
