"""The driver of test_spark_standalone, a process of its own (its JVM never shares the test session's):
against a Spark standalone master, it checks where the Python workers run, then reads a group with a
batch query and with a streaming query (trigger availableNow, memory sink), both with readFrom=followers.

    python standalone_job.py MASTER_URL ENDPOINTS GROUP WORK_DIR

Prints one line `RESULT {json}`: the workers seen, and the count, crc32 sum and byte length of the
bodies each query read.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quorumlog.spark import register

PARTITIONS = 6


def _jvm_of(pid: int) -> tuple[int, list[str]]:
    """The nearest ancestor of `pid` that is a JVM, and its command line."""
    while pid > 1:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if Path(cmd[0].decode()).name == "java":
            return pid, [c.decode() for c in cmd]
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no JVM among the ancestors of this Python worker")


def _arg(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def where(_rows: Iterable[int]) -> Iterator[dict[str, Any]]:
    """Runs in a Python worker: its pid, the JVM that started it, and that JVM's executor id and worker."""
    jvm, cmd = _jvm_of(os.getpid())
    ctx = TaskContext.get()
    assert ctx is not None
    yield {"python_pid": os.getpid(), "jvm_pid": jvm, "executor_id": _arg(cmd, "--executor-id"),
           "worker_url": _arg(cmd, "--worker-url"), "partition": ctx.partitionId()}


def digest(df: DataFrame) -> dict[str, int]:
    row = df.agg(F.count("*").alias("n"), F.sum(F.crc32("body")).alias("crc"),
                 F.sum(F.length("body")).alias("size")).collect()[0]
    return {"count": int(row["n"]), "crc32_sum": int(row["crc"] or 0), "bytes": int(row["size"] or 0)}


def main() -> None:
    master, endpoints, group, work = sys.argv[1:5]
    spark = (SparkSession.builder.master(master).appName("quorumlog-standalone-test")
             .config("spark.executor.cores", "1")
             .config("spark.executor.memory", "512m")
             .config("spark.driver.memory", "512m")
             .config("spark.cores.max", "2")
             # The first job waits (bounded) for both executors, so that both take tasks.
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", f"-XX:-UsePerfData -Djava.io.tmpdir={work}")
             .config("spark.executor.extraJavaOptions", f"-XX:-UsePerfData -Djava.io.tmpdir={work}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    sc = spark.sparkContext
    gateway: Any = sc._gateway
    result: dict[str, Any] = {"driver_jvm_pid": gateway.proc.pid, "app_id": sc.applicationId}
    result["workers"] = sc.parallelize(range(PARTITIONS), PARTITIONS).mapPartitions(where).collect()

    opts = {"endpoints": endpoints, "groups": group, "readFrom": "followers"}
    result["batch"] = digest(spark.read.format("quorumlog").options(**opts)
                             .option("minPartitions", str(PARTITIONS)).load())

    q = (spark.readStream.format("quorumlog").options(**opts).load()
         .writeStream.format("memory").queryName("events")
         .option("checkpointLocation", os.path.join(work, "checkpoint"))
         .trigger(availableNow=True).start())
    try:
        finished = q.awaitTermination(90)
    finally:
        q.stop()
    if not finished or q.exception() is not None:
        raise RuntimeError(f"streaming query did not finish: {q.exception()}")
    result["stream"] = digest(spark.table("events"))
    result["stream_batches"] = len(q.recentProgress)
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
