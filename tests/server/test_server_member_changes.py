"""Membership changes on real processes, under a writer that never stops: a spare node joins as a
learner and is promoted, the leader removes itself and is stopped, and every acknowledged append is in
the committed log exactly once, the same on every remaining member."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from quorumlog import Client
from quorumlog.errors import QuorumLogError, ResponseCode
from quorumlog.server.cluster import LocalCluster

from .conftest import committed_entries, node_index


class Writer(threading.Thread):
    """Appends numbered bodies until stopped; keeps what was acknowledged."""

    def __init__(self, endpoints: str) -> None:
        super().__init__(daemon=True)
        self.endpoints = endpoints
        self.acked: dict[bytes, int] = {}
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with Client(self.endpoints, group="g0", retry_timeout=20) as c:
            k = 0
            while not self.stop.is_set():
                body = f"w{k}".encode()
                k += 1
                try:
                    self.acked[body] = c.append(body).index
                except QuorumLogError:
                    self.failed += 1


def _status(c: Client, node: Any) -> dict[str, Any]:
    return dict(c.node_status(node.address)["groups"]["g0"])


def _leader(c: Client, nodes: list[Any]) -> str | None:
    """The node among `nodes` that says it leads (in the highest term), or None."""
    docs = [_status(c, n) for n in nodes]
    leaders = sorted((d["term"], d["node"]) for d in docs if d["role"] == "leader")
    return leaders[-1][1] if leaders else None


def test_a_spare_joins_is_promoted_and_the_leader_leaves_under_a_writer(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1)
    spare = cluster.nodes[3]
    writer = Writer(",".join(n.address for n in cluster.members))
    with Client(",".join(n.address for n in cluster.members), group="g0", retry_timeout=30) as c:
        c.append(b"first")
        writer.start()
        try:
            learner = c.add_member("n3", spare.address, learner=True)
            assert learner.learners == ["n3"] and learner.voters == ["n0", "n1", "n2"] and learner.index > 0
            with pytest.raises(QuorumLogError, match="not a member") as e:
                c.promote_member("n9")
            assert e.value.code == ResponseCode.UNEXPECTED_ARGUMENT
            grown = c.promote_member("n3", timeout=60)
            assert grown.voters == ["n0", "n1", "n2", "n3"] and grown.learners == []
            deadline = time.monotonic() + 20
            while list(_status(c, spare)["config"]["voters"]) != ["n0", "n1", "n2", "n3"]:
                assert time.monotonic() < deadline, f"the new member never followed: {_status(c, spare)}"
                time.sleep(0.1)
            old = _leader(c, cluster.nodes)
            shrunk = c.remove_member(old)
            assert old not in shrunk.voters and len(shrunk.voters) == 3
            deadline = time.monotonic() + 20
            while _leader(c, [n for n in cluster.nodes if n.node_id != old]) is None:
                assert time.monotonic() < deadline, "no other leader after the leader removed itself"
                time.sleep(0.1)
            cluster.kill(node_index(cluster, old))
            time.sleep(1.0)  # the writer goes on with the new leader
        finally:
            writer.stop.set()
            writer.join(60)
        assert len(writer.acked) > 50, f"only {len(writer.acked)} appends acknowledged"
        remaining = [n for n in cluster.nodes if n.node_id != old]
        logs = {n.node_id: asyncio.run(committed_entries(n.address)) for n in remaining}
        commit = min(len(v) for v in logs.values())
        first = next(iter(logs.values()))[:commit]
        assert all(v[:commit] == first for v in logs.values()), "members' committed logs differ"
        bodies = [b for _, b in max(logs.values(), key=len)]
        for body, index in writer.acked.items():
            assert bodies.count(body) == 1, f"{body!r} acknowledged at {index} is in the log {bodies.count(body)} times"
