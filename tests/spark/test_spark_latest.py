"""Latest offsets are each group's linearizable end (END, committed + 1), not the highest commit index the
replicas report through STATUS; the stream reader reports that true end to Spark (reportLatestOffset), which
shows it as the source's latestOffset in the query's progress."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster
from quorumlog.spark import view as view_mod
from quorumlog.spark.options import parse_source_options
from quorumlog.spark.reader import QuorumLogBatchReader
from quorumlog.spark.stream import QuorumLogStreamReader
from quorumlog.spark.view import GroupView, cluster_ends, cluster_view

from .conftest import append_bodies


def _true_end(cluster: LocalCluster, groups: list[str]) -> dict[str, int]:
    """{group: committed + 1} of a linearizable END (what was acknowledged so far is below it)."""
    with Client(cluster.endpoints, groups[0]) as c:
        return {g: c.end(g).committed + 1 for g in groups}


def _offset(value: Any) -> dict[str, int]:
    doc = json.loads(value) if isinstance(value, str) else value
    return {g: int(i) for g, i in (doc or {}).items()}


@pytest.fixture
def stale_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every STATUS answer says nothing was committed past each replica's first index (as when the leader
    did not answer and the followers lag): whatever is latest beyond that must come from END."""
    real = view_mod._view

    async def stale(opts: Any, auth: Any) -> dict[str, GroupView]:
        view = await real(opts, auth)
        return {name: dataclasses.replace(g, replicas=tuple(dataclasses.replace(r, committed=r.begin - 1)
                                                            for r in g.replicas))
                for name, g in view.items()}

    monkeypatch.setattr(view_mod, "_view", stale)


def test_latest_comes_from_the_linearizable_end_not_status(shared_cluster: LocalCluster, stale_status: None) -> None:
    """The readers run in this process (no Spark) against a real cluster whose STATUS answers are made
    stale: the batch reader's endingOffsets=latest and the stream reader's latest offsets still reach the
    last acknowledged entry."""
    last = {"g0": append_bodies(shared_cluster, "g0", [b"L%d" % i for i in range(50)])[-1],
            "g1": append_bodies(shared_cluster, "g1", [b"M%d" % i for i in range(30)])[-1]}
    opts = parse_source_options({"endpoints": shared_cluster.endpoints, "groups": "g0,g1"})
    view = cluster_view(opts)
    assert all(g.latest == g.earliest for g in view.values())  # STATUS alone would read nothing

    parts = QuorumLogBatchReader(opts).partitions()
    ends = {g: max(p.task.end for p in parts if p.task.group == g) for g in ("g0", "g1")}  # type: ignore[attr-defined]
    true_end = _true_end(shared_cluster, ["g0", "g1"])  # nothing is appended meanwhile: the same end
    assert ends == true_end and all(ends[g] > last[g] for g in ends), (ends, last)

    reader = QuorumLogStreamReader(opts)
    start = reader.initialOffset()
    assert list(start) == ["g0", "g1"]
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert sum(end[g] - start[g] for g in end) == 10  # cut by the limit...
    assert reader.reportLatestOffset() == true_end  # ...the true end is reported whole
    assert list(reader.reportLatestOffset() or {}) == ["g0", "g1"]  # (one key order, always)
    assert reader.latestOffset(end, ReadAllAvailable()) == true_end
    latest_spec = QuorumLogStreamReader(parse_source_options({"endpoints": shared_cluster.endpoints,
                                                              "groups": "g0,g1", "startingOffsets": "latest"}))
    assert latest_spec.initialOffset() == true_end
    latest_spec.prepareForTriggerAvailableNow()
    assert latest_spec.latestOffset(true_end, ReadAllAvailable()) == true_end


def test_stream_progress_shows_the_true_end_while_the_query_lags(spark: SparkSession,
                                                                  shared_cluster: LocalCluster) -> None:
    start = _true_end(shared_cluster, ["g0", "g1"])
    append_bodies(shared_cluster, "g0", [b"p%d" % i for i in range(900)])
    append_bodies(shared_cluster, "g1", [b"q%d" % i for i in range(300)])
    true_end = _true_end(shared_cluster, ["g0", "g1"])
    df = (spark.readStream.format("quorumlog").option("endpoints", shared_cluster.endpoints)
          .option("groups", "g0,g1").option("startingOffsets", json.dumps(start))
          .option("maxEntriesPerTrigger", 300).load())
    q = df.writeStream.format("noop").trigger(availableNow=True).start()
    try:
        assert q.awaitTermination(120)
    finally:
        q.stop()
    assert q.exception() is None
    sources = [p["sources"][0] for p in q.recentProgress if p["sources"] and p["numInputRows"]]
    ends = [_offset(s["endOffset"]) for s in sources]
    total = sum(true_end[g] - start[g] for g in true_end)
    assert len(sources) == -(-total // 300), ends  # at most 300 indexes per micro-batch
    for s in sources:
        assert _offset(s["latestOffset"]) == true_end, s  # every batch shows the whole way to go...
    assert all(sum(true_end[g] - e[g] for g in e) > 0 for e in ends[:-1]), ends  # ...while it lags
    assert ends[-1] == true_end


def test_primary_backup_without_a_controller_falls_back_to_status(spark: SparkSession, new_cluster: Any,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Such a group refuses a linearizable END (UNSUPPORTED): its latest is the STATUS view's, with a
    warning (once per process)."""
    cluster: LocalCluster = new_cluster(1, replication="primary-backup",
                                        ha={"ack": "sync", "ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 1000})
    last = append_bodies(cluster, "g0", [b"pb%d" % i for i in range(40)])[-1]
    opts = parse_source_options({"endpoints": cluster.endpoints})
    monkeypatch.setattr(view_mod, "_FELL_BACK", set())
    with caplog.at_level(logging.WARNING, logger="quorumlog.spark"):
        view, groups, latest = cluster_ends(opts)
    assert groups == ["g0"] and latest == {"g0": view["g0"].latest} and latest["g0"] > last, (view, latest)
    assert any("no linearizable end" in r.getMessage() for r in caplog.records), caplog.records
    # Through Spark, a batch query reads every acknowledged entry (the primary reports them committed).
    assert spark.read.format("quorumlog").option("endpoints", cluster.endpoints).load().count() == 40
