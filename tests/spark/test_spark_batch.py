"""Batch reads through Spark against a real cluster."""

from __future__ import annotations

import json

from pyspark.sql import SparkSession

from quorumlog.server.cluster import LocalCluster

from .conftest import append_bodies


def _load(spark: SparkSession, cluster: LocalCluster, **opts: str):  # type: ignore[no-untyped-def]
    r = spark.read.format("quorumlog").option("endpoints", cluster.endpoints)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_equals_what_was_appended(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    g0 = [f"g0-{i}-".encode() + b"x" * (i % 300) for i in range(3000)]
    g1 = [f"g1-{i}".encode() for i in range(1700)]
    i0 = append_bodies(shared_cluster, "g0", g0)
    i1 = append_bodies(shared_cluster, "g1", g1)
    df = _load(spark, shared_cluster, groups="g0,g1", maxEntriesPerPartition="700")
    assert df.columns == ["group", "index", "term", "pos", "body"]
    rows = df.collect()
    got: dict[str, list[tuple[int, bytes]]] = {"g0": [], "g1": []}
    for r in rows:
        got[r["group"]].append((r["index"], bytes(r["body"])))
    mine0 = {i: b for i, b in zip(i0, g0, strict=True)}
    mine1 = {i: b for i, b in zip(i1, g1, strict=True)}
    # Our entries, in log order, with the right bodies; nothing read twice.
    for g, mine in (("g0", mine0), ("g1", mine1)):
        idx = [i for i, _ in got[g]]
        assert len(idx) == len(set(idx))
        ours = [(i, b) for i, b in sorted(got[g]) if i in mine]
        assert ours == sorted(mine.items())
    # Partitions come back in index order within a group.
    assert [i for i, _ in got["g0"]] == sorted(i for i, _ in got["g0"])
    assert df.rdd.getNumPartitions() >= 5


def test_offsets_json(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    idx = append_bodies(shared_cluster, "g1", [f"range-{i}".encode() for i in range(100)])
    lo, hi = idx[10], idx[60]
    df = _load(spark, shared_cluster, groups="g1", startingOffsets=json.dumps({"g1": lo}),
               endingOffsets=json.dumps({"g1": hi}))
    rows = df.orderBy("index").collect()
    assert [r["index"] for r in rows] == list(range(lo, hi))
    assert [bytes(r["body"]) for r in rows] == [f"range-{i}".encode() for i in range(10, 60)]
    # -2 / -1 mean earliest / latest; groups a JSON spec leaves out read everything.
    n_all = _load(spark, shared_cluster, groups="g1").count()
    assert _load(spark, shared_cluster, groups="g1", startingOffsets='{"g1": -2}',
                 endingOffsets='{"g1": -1}').count() == n_all
    before = _load(spark, shared_cluster, groups="g1").where(f"index < {hi}").count()
    df = _load(spark, shared_cluster, startingOffsets=json.dumps({"g1": hi}))
    assert df.where("group = 'g1'").count() == n_all - before
    assert df.where("group = 'g0'").count() == _load(spark, shared_cluster, groups="g0").count()
