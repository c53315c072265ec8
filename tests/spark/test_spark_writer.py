"""The sink: Spark -> quorumlog -> Spark, batch and streaming, with and without a group column."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster


def _next(cluster: LocalCluster, group: str) -> int:
    with Client(cluster.endpoints, group) as c:
        return max(int(n["committed_index"]) for n in c.metadata().nodes.values() if n) + 1


def test_writer_round_trip(spark: SparkSession, shared_cluster: LocalCluster, tmp_path: Path) -> None:
    start = {g: _next(shared_cluster, g) for g in ("g0", "g1")}
    rows = [(("g0" if i % 3 else "g1"), f"w-{i}".encode() * (1 + i % 7)) for i in range(5000)]
    df = spark.createDataFrame(rows, "group string, body binary").repartition(3)
    df.write.format("quorumlog").option("endpoints", shared_cluster.endpoints) \
        .option("maxBatchEntries", "300").mode("append").save()
    # Strings are appended as UTF-8; without a group column the `group` option decides.
    spark.createDataFrame([(f"s-{i}",) for i in range(50)], "body string").write.format("quorumlog") \
        .option("endpoints", shared_cluster.endpoints).option("group", "g0").mode("append").save()
    back = spark.read.format("quorumlog").option("endpoints", shared_cluster.endpoints) \
        .option("startingOffsets", json.dumps(start)).load().collect()
    got = sorted((r["group"], bytes(r["body"])) for r in back)
    want = sorted(rows + [("g0", b"s-%d" % i) for i in range(50)])
    assert got == want

    # A streaming query writing to quorumlog (checkpointLocation is passed to the sink and ignored).
    start = {g: _next(shared_cluster, g) for g in ("g0",)}
    spark.createDataFrame([(f"st-{i}".encode(),) for i in range(300)], "body binary") \
        .write.parquet(str(tmp_path / "in"))
    q = spark.readStream.schema("body binary").parquet(str(tmp_path / "in")).writeStream.format("quorumlog") \
        .option("endpoints", shared_cluster.endpoints).option("group", "g0") \
        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start()
    assert q.awaitTermination(120)
    assert q.exception() is None
    back = spark.read.format("quorumlog").option("endpoints", shared_cluster.endpoints).option("groups", "g0") \
        .option("startingOffsets", json.dumps(start)).load().collect()
    assert sorted(bytes(r["body"]) for r in back) == sorted(f"st-{i}".encode() for i in range(300))
