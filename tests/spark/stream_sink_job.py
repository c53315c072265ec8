"""A streaming query for test_spark_exactly_once: JSON files of `body` strings, two files per micro-batch,
written to a group by the quorumlog sink with trigger availableNow. Run as a script, it is a driver
process of its own (to be killed), with rows paced by a Python UDF (about 1000 per second per task) so
that a micro-batch takes seconds:

    python stream_sink_job.py ENDPOINTS GROUP INPUT_DIR CHECKPOINT_DIR
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.streaming import StreamingQuery

from quorumlog.spark import register


def paced(body: str) -> str:
    time.sleep(0.001)
    return body


def start(spark: SparkSession, endpoints: str, group: str, source: str, checkpoint: str) -> StreamingQuery:
    return (spark.readStream.schema("body string").option("maxFilesPerTrigger", 2).json(source)
            .select(udf(paced, "string", useArrow=False)("body").alias("body"))
            .writeStream.format("quorumlog").option("endpoints", endpoints).option("group", group)
            .option("maxBatchEntries", "50").option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start())


def main() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("quorumlog-stream-job")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")  # the sink sees rows as they come
             # (its temporary files where the test keeps its own: it is killed, so nothing else removes them)
             .config("spark.driver.extraJavaOptions", "-Dlog4j.rootLogger=ERROR -XX:-UsePerfData "
                     f"-Djava.io.tmpdir={os.environ.get('SPARK_LOCAL_DIRS', '/tmp')}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    q = start(spark, *sys.argv[1:5])
    q.awaitTermination()
    sys.exit(1 if q.exception() else 0)


if __name__ == "__main__":
    main()
