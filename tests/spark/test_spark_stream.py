"""Streaming queries through Spark against a real cluster: read limits, availableNow, checkpoint restart,
and a leader SIGKILLed while a query runs."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster

from .conftest import append_bodies, leader_of, wait_until


def _latest(cluster: LocalCluster, group: str) -> int:
    with Client(cluster.endpoints, group) as c:
        leader = c.metadata()
        return max(int(n["committed_index"]) for n in leader.nodes.values() if n) + 1


def _stream(spark: SparkSession, cluster: LocalCluster, **opts: Any) -> DataFrame:
    r = spark.readStream.format("quorumlog").option("endpoints", cluster.endpoints)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def _end_offset(q: Any, group: str) -> int:
    """The end offset of the query's last micro-batch for a group (-1 before any)."""
    p = q.lastProgress
    if not p:
        return -1
    end = p["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return int((end or {}).get(group, -1))


def _batch_sizes(spark: SparkSession, df: DataFrame, **trigger: Any) -> list[dict[str, int]]:
    sizes: list[dict[str, int]] = []

    def record(batch: DataFrame, _batch_id: int) -> None:
        rows = batch.groupBy("group").count().collect()
        if rows:
            sizes.append({r["group"]: r["count"] for r in rows})

    q = df.writeStream.foreachBatch(record).trigger(**trigger).start()
    try:
        if trigger.get("availableNow"):
            assert q.awaitTermination(120)
        else:
            q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    return sizes


def test_max_entries_per_trigger_splits_in_proportion(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    start = {"g0": _latest(shared_cluster, "g0"), "g1": _latest(shared_cluster, "g1")}
    append_bodies(shared_cluster, "g0", [b"a%d" % i for i in range(600)])
    append_bodies(shared_cluster, "g1", [b"b%d" % i for i in range(200)])
    df = _stream(spark, shared_cluster, groups="g0,g1", startingOffsets=json.dumps(start), maxEntriesPerTrigger=400)
    sizes = _batch_sizes(spark, df, processingTime="100 milliseconds")
    # 600 + 200 waiting, 400 per trigger: 300 + 100 (in proportion), then the rest.
    assert sizes == [{"g0": 300, "g1": 100}, {"g0": 300, "g1": 100}]


def test_available_now_honours_the_limit(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    start = _latest(shared_cluster, "g0")
    append_bodies(shared_cluster, "g0", [b"n%d" % i for i in range(1000)])
    df = _stream(spark, shared_cluster, groups="g0", startingOffsets=json.dumps({"g0": start}),
                 maxEntriesPerTrigger=300)
    sizes = _batch_sizes(spark, df, availableNow=True)
    assert [s["g0"] for s in sizes] == [300, 300, 300, 100]


def test_restart_from_checkpoint_reads_each_entry_once(spark: SparkSession, shared_cluster: LocalCluster,
                                                       tmp_path: Path) -> None:
    start = _latest(shared_cluster, "g1")
    first = append_bodies(shared_cluster, "g1", [b"r%d" % i for i in range(700)])
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run() -> None:
        df = _stream(spark, shared_cluster, groups="g1", startingOffsets=json.dumps({"g1": start}),
                     maxEntriesPerTrigger=250)
        q = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert spark.read.parquet(out).count() == 700
    second = append_bodies(shared_cluster, "g1", [b"s%d" % i for i in range(400)])
    run()  # startingOffsets is ignored now: the checkpoint says where to go on
    rows = spark.read.parquet(out).select("index", "body").collect()
    got = sorted((r["index"], bytes(r["body"])) for r in rows)
    want = sorted(zip(first + second, [b"r%d" % i for i in range(700)] + [b"s%d" % i for i in range(400)],
                      strict=True))
    assert got == want


@pytest.mark.parametrize("replication", ["raft", "primary-backup"])
def test_leader_killed_during_a_query_loses_and_repeats_nothing(spark: SparkSession, new_cluster: Any,
                                                                tmp_path: Path, replication: str) -> None:
    """The leader (Raft) or primary (primary/backup, SYNC, failed over by its controller) is SIGKILLed
    while a streaming query reads from any replica: every acknowledged entry is read exactly once."""
    if replication == "raft":
        cluster: LocalCluster = new_cluster(1)
    else:
        cluster = new_cluster(1, replication=replication, ha={"ack": "sync", "controller": "ctl",
                                                               "failover_timeout_ms": 800})
    acked: list[tuple[int, bytes]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with Client(cluster.endpoints, "g0", retry_timeout=30.0) as c:
                n = 0
                while not stop.wait(0.02):  # paced: about 5000 entries/s
                    bodies = [b"p%d" % (n + i) for i in range(100)]
                    for r, b in zip(c.append_many(bodies), bodies, strict=True):
                        acked.append((r.index, b))
                    n += 100
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = _stream(spark, cluster, groups="g0", maxEntriesPerTrigger=2000, readFrom="any")
    q = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(acked) >= 3000 and q.lastProgress is not None, 60, "entries read by the query")
        leader = leader_of(cluster, "g0")
        cluster.kill([n.node_id for n in cluster.nodes].index(leader), signal.SIGKILL)
        mark = len(acked)
        wait_until(lambda: len(acked) >= mark + 3000 or errors, 60, "appends after the leader was killed")
        stop.set()
        producer.join(60)
        assert not errors, errors
        last = max(i for i, _ in acked)
        q.processAllAvailable()
        wait_until(lambda: _end_offset(q, "g0") > last, 60,
                   "the query to pass the last acknowledged entry")
    finally:
        stop.set()
        q.stop()
    assert q.exception() is None
    rows = spark.read.parquet(out).select("index", "body").collect()
    read = [(r["index"], bytes(r["body"])) for r in rows]
    indexes = [i for i, _ in read]
    assert len(indexes) == len(set(indexes)), "an entry was read twice"
    got = dict(read)
    missing = [(i, b) for i, b in acked if got.get(i) != b]
    assert not missing, f"{len(missing)} acknowledged entries not read, e.g. {missing[:3]}"
    # Nothing else: whatever the query read is exactly the log's normal entries in that range.
    log = spark.read.format("quorumlog").option("endpoints", cluster.endpoints).option("groups", "g0") \
        .option("endingOffsets", json.dumps({"g0": max(indexes) + 1})).load().select("index", "body").collect()
    assert sorted(read) == sorted((r["index"], bytes(r["body"])) for r in log)
