"""failOnDataLoss on a range that has really expired: small segments, no retention, the node's own
expiry pass (every 10 s) drops the old segments on every replica."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import SparkSession

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster
from server.conftest import SMALL_STORE

from .conftest import append_bodies, wait_until


def test_fail_on_data_loss_both_ways(spark: SparkSession, new_cluster: Any) -> None:
    cluster: LocalCluster = new_cluster(1, store={**SMALL_STORE, "file_reserved_hours": 0.0})
    idx = append_bodies(cluster, "g0", [b"%06d" % i + b"x" * 1018 for i in range(3500)])

    def begins() -> list[int] | None:
        with Client(cluster.endpoints, "g0") as c:
            nodes = c.metadata().nodes
        b = [int(n["begin_index"]) for n in nodes.values() if n]
        return b if len(b) == 3 and min(b) > idx[0] else None

    begin = min(wait_until(begins, 40, "old segments to expire on every node", interval=0.2))

    def load(**opts: str) -> Any:
        r = spark.read.format("quorumlog").option("endpoints", cluster.endpoints).option("groups", "g0") \
            .option("startingOffsets", json.dumps({"g0": idx[0]}))
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    with pytest.raises(Exception, match="have expired from every replica"):
        load().collect()
    rows = load(failOnDataLoss="false").orderBy("index").collect()
    assert [r["index"] for r in rows] == [i for i in idx if i >= begin]
    assert bytes(rows[0]["body"]) == b"%06d" % idx.index(begin) + b"x" * 1018
    # The same for a streaming query.
    with pytest.raises(Exception, match="have expired from every replica"):
        q = spark.readStream.format("quorumlog").option("endpoints", cluster.endpoints) \
            .option("startingOffsets", json.dumps({"g0": idx[0]})).load() \
            .writeStream.format("memory").queryName("loss_stream").trigger(availableNow=True).start()
        try:
            q.awaitTermination(120)
        finally:
            q.stop()
