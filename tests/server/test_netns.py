"""A 3-node cluster across three Linux network namespaces, as on three machines: each node in a
namespace of its own, bound to its own address (not loopback, so with the cluster secret), linked by a
veth to a bridge in a fourth "switch" namespace. The test process reaches them through a veth of its own
into the switch. Taking a node's link down is a real partition: the others' connections to it go silent
instead of being closed, as when a cable or a switch port dies.

Needs root and iproute2 (`ip`); elsewhere the tests skip and say why.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.client.results import AppendResult
from quorumlog.net.errors import ConnectionClosedError, RequestTimeoutError
from quorumlog.server.cluster import LocalCluster, LocalNode

from .conftest import FAST_RAFT, SMALL_STORE, committed_entries, wait_until
from .netns import NODES, NetnsCluster, Network, unavailable


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NetnsCluster, Network]]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    net = Network()
    c: NetnsCluster | None = None
    try:
        try:
            net.create()
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot build the namespaces: `{' '.join(e.cmd)}` failed: {e.stderr.strip()}")
        c = NetnsCluster(tmp_path / "c", NODES, 1, secret=os.urandom(18).hex(), log_level="INFO", raft=FAST_RAFT,
                         store=SMALL_STORE, hosts=[net.host(i) for i in range(NODES)], namespaces=net.nodes)
        c.start()
        yield c, net
    finally:
        if c is not None:
            c.stop(timeout=15)
        net.destroy()


def status(c: LocalCluster, node: LocalNode) -> dict[str, Any] | None:
    """The node's STATUS document, asked over its own port, or None when it does not answer in time."""
    async def ask() -> dict[str, Any]:
        async with AsyncClient(node.address, secret=c.secret, connect_timeout=1.0) as client:
            return await client.node_status(node.address)

    try:
        return asyncio.run(ask())
    except (ConnectionClosedError, RequestTimeoutError, OSError):
        return None


def group_status(c: LocalCluster, node: LocalNode) -> dict[str, Any] | None:
    doc = status(c, node)
    return None if doc is None else dict(doc["groups"]["g0"])


def single_leader(c: LocalCluster, nodes: Sequence[LocalNode]) -> tuple[int, int] | None:
    """(position in `nodes`, term) of the one leader they all answer with, or None."""
    docs = [group_status(c, n) for n in nodes]
    leaders = [(i, d["term"]) for i, d in enumerate(docs) if d is not None and d["role"] == "leader"]
    if len(leaders) != 1:
        return None
    i, term = leaders[0]
    agree = all(d is not None and d["leader"] == nodes[i].node_id and d["term"] == term for d in docs)
    return (i, term) if agree else None


def wait_leader(c: LocalCluster, nodes: Sequence[LocalNode], timeout: float, what: str) -> tuple[int, int]:
    found = wait_until(lambda: single_leader(c, nodes), timeout, what, interval=0.1)
    assert found is not None
    return found


def append(c: LocalCluster, bodies: list[bytes]) -> list[AppendResult]:
    async def go() -> list[AppendResult]:
        async with AsyncClient(c.endpoints, secret=c.secret, retry_timeout=40.0) as client:
            out = await client.append_many(bodies[: len(bodies) // 2])
            for b in bodies[len(bodies) // 2:]:
                out.append(await client.append(b))
            return out

    return asyncio.run(go())


def bodies_on(c: LocalCluster, node: LocalNode) -> list[bytes]:
    """The committed bodies node holds, read from that node only."""
    return [b for _i, b in asyncio.run(committed_entries(node.address, secret=c.secret))]


def caught_up(c: LocalCluster, nodes: Sequence[LocalNode], last: int) -> bool:
    docs = [group_status(c, n) for n in nodes]
    return all(d is not None and d["committed_index"] >= last and d["end_index"] >= last for d in docs)


def test_nodes_in_three_namespaces_replicate_to_each_other(cluster: tuple[NetnsCluster, Network]) -> None:
    c, net = cluster
    wait_leader(c, c.nodes, 60, "a leader the three namespaces agree on")
    # Each node runs in a namespace of its own (looked at once they serve: `ip netns exec` enters the
    # namespace before it execs the node), on its own address.
    spaces = [os.readlink(f"/proc/{n.proc.pid}/ns/net") for n in c.nodes if n.proc is not None]
    assert len({os.readlink("/proc/self/ns/net"), *spaces}) == NODES + 1, spaces
    assert [n.host for n in c.nodes] == [net.host(i) for i in range(NODES)]
    docs = [status(c, n) for n in c.nodes]
    assert [d["listen"] if d else None for d in docs] == [n.address for n in c.nodes]
    bodies = [f"across namespaces {i}".encode() for i in range(40)]
    results = append(c, bodies)
    last = results[-1].index
    wait_until(lambda: caught_up(c, c.nodes, last), 30, f"every node to hold and commit index {last}", interval=0.1)
    for node in c.nodes:
        assert bodies_on(c, node) == bodies, f"{node.node_id} holds other entries"
        # The admin port answers from across the bridge too: what a load balancer or a probe asks.
        ask = urllib.request.Request(f"{node.admin_url}/status", headers={"Authorization": f"Bearer {c.admin_token}"})
        with urllib.request.urlopen(ask, timeout=10) as r:
            doc = json.load(r)
        assert doc["node"] == node.node_id and doc["groups"]["g0"]["committed_index"] >= last


def test_a_partitioned_leader_is_replaced_and_catches_up_after_the_link_returns(
        cluster: tuple[NetnsCluster, Network]) -> None:
    c, net = cluster
    leader, term = wait_leader(c, c.nodes, 60, "a first leader")
    before = [f"before {i}".encode() for i in range(20)]
    last = append(c, before)[-1].index
    wait_until(lambda: caught_up(c, c.nodes, last), 30, f"every node to commit index {last}", interval=0.1)

    net.set_link(leader, up=False)
    others = [n for i, n in enumerate(c.nodes) if i != leader]
    isolated = c.nodes[leader]
    assert status(c, isolated) is None, "the isolated node still answers from across the partition"
    _new, new_term = wait_leader(c, others, 30, "the other two to elect a leader")
    assert new_term > term
    during = [f"during {i}".encode() for i in range(20)]
    results = append(c, during)
    assert all(r.term >= new_term for r in results)
    last = results[-1].index
    wait_until(lambda: caught_up(c, others, last), 30, f"the majority to commit index {last}", interval=0.1)
    assert isolated.alive and status(c, isolated) is None

    net.set_link(leader, up=True)

    def rejoined() -> bool:
        """The returning node follows a leader of the majority (it did not unseat it) and commits."""
        d = group_status(c, isolated)
        return (d is not None and d["role"] == "follower" and d["leader"] in {n.node_id for n in others}
                and d["committed_index"] >= last)

    wait_until(rejoined, 30, f"{isolated.node_id} to follow the new leader and commit index {last}", interval=0.1)
    wait_until(lambda: len({(group_status(c, n) or {}).get("end_index") for n in c.nodes}) == 1, 30,
               "the same end index on every node", interval=0.1)
    for node in c.nodes:
        assert bodies_on(c, node) == before + during, f"{node.node_id} holds other entries"
