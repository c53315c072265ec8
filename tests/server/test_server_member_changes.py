"""Membership changes on real processes, each under writers that never stop and checked by the history
checker (every acknowledged append in the log exactly once, in real-time order; the members' committed
logs identical): a group grows from three to five, a dead leader's machine is replaced, a group moves to
three new nodes one member at a time, and a follower moves to a new port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from quorumlog import AsyncClient
from quorumlog.errors import QuorumLogError, ResponseCode
from quorumlog.server.cluster import LocalCluster, LocalNode, free_ports

from .conftest import await_until, committed_entries, node_index
from .history import Op, check_history, record_appends


def _endpoints(nodes: list[LocalNode]) -> str:
    return ",".join(f"{n.node_id}={n.address}" for n in nodes)


async def _status(c: AsyncClient, node: LocalNode) -> dict[str, Any]:
    return dict((await c.node_status(node.address))["groups"]["g0"])


async def _leader(c: AsyncClient, nodes: list[LocalNode]) -> str | None:
    """The node among `nodes` that says it leads (in the highest term), or None."""
    docs = []
    for n in nodes:
        with contextlib.suppress(Exception):
            docs.append(await _status(c, n))
    leaders = sorted((d["term"], d["node"]) for d in docs if d["role"] == "leader")
    return leaders[-1][1] if leaders else None


async def _under_writers(cluster: LocalCluster, first: list[LocalNode], last: Callable[[], list[LocalNode]],
                         change: Callable[[AsyncClient], Awaitable[None]]) -> dict[str, int]:
    """Run `change` while two writers append through the `first` members; then check the history against
    the committed log of every node `last()` names (the members once the change is done)."""
    ops: list[Op] = []
    loop = asyncio.get_running_loop()
    async with AsyncClient(_endpoints(first), group="g0", retry_timeout=30) as c:
        await c.append(b"first")
        stop = [loop.time() + 3600]
        writers = [asyncio.create_task(_write(_endpoints(first), f"w{k}", stop, ops)) for k in range(2)]
        try:
            await change(c)
            await asyncio.sleep(1.0)  # the writers go on after the change
        finally:
            stop[0] = 0
            await asyncio.gather(*writers)
        nodes = last()
        try:
            await await_until(lambda: _same_commit(c, nodes), 30, "the members converged")
        except AssertionError:
            raise AssertionError(f"the members did not converge: {[await _brief(c, n) for n in nodes]}") from None
    logs = {n.node_id: await committed_entries(n.address) for n in nodes}
    shortest = min(len(v) for v in logs.values())
    base = next(iter(logs.values()))[:shortest]
    assert all(v[:shortest] == base for v in logs.values()), "the members' committed logs differ"
    result = check_history(ops, [e for e in max(logs.values(), key=len) if e[1].startswith(b"w")])
    assert result["acked"] > 20, result
    return result


async def _write(endpoints: str, name: str, stop: list[float], ops: list[Op]) -> None:
    async with AsyncClient(endpoints, group="g0", retry_timeout=20) as c:
        while stop[0]:
            await record_appends(c, name, asyncio.get_running_loop().time() + 0.2, ops)
            name += "+"  # (a fresh run of numbers: bodies stay unique)


async def _brief(c: AsyncClient, node: LocalNode) -> dict[str, Any]:
    d = await _status(c, node)
    return {k: d.get(k) for k in ("node", "role", "term", "leader", "end_index", "committed_index", "config",
                                   "peers")}


async def _same_commit(c: AsyncClient, nodes: list[LocalNode]) -> bool:
    commits = {(await _status(c, n))["committed_index"] for n in nodes}
    return len(commits) == 1


async def _follows(c: AsyncClient, node: LocalNode, voters: list[str]) -> bool:
    with contextlib.suppress(Exception):
        return list((await _status(c, node))["config"]["voters"]) == voters
    return False


def test_a_group_grows_from_three_to_five(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=5, spares=2)

    async def grow(c: AsyncClient) -> None:
        for spare in cluster.nodes[3:]:
            m = await c.add_member(spare.node_id, spare.address, learner=True)
            assert spare.node_id in m.learners
        for refused in (c.promote_member("n9"), c.remove_member("n9")):  # (removing it "is done" already)
            with pytest.raises(QuorumLogError, match="not a member") as e:
                await refused
            assert e.value.code == ResponseCode.UNEXPECTED_ARGUMENT
        for spare in cluster.nodes[3:]:
            await c.promote_member(spare.node_id, timeout=60)
        m = await c.members()
        assert m.voters == ["n0", "n1", "n2", "n3", "n4"] and m.learners == []

    asyncio.run(_under_writers(cluster, cluster.members, lambda: cluster.nodes, grow))


def test_a_dead_leaders_machine_is_replaced(cluster_factory: Any) -> None:
    """A spare joins and is promoted, the leader removes itself (it leads until that commits, then hands
    over) and its process is killed; the writers go on with the new leader."""
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1)
    spare = cluster.nodes[3]
    gone: list[str] = []

    async def replace(c: AsyncClient) -> None:
        await c.add_member("n3", spare.address)
        await await_until(lambda: _follows(c, spare, ["n0", "n1", "n2", "n3"]), 20, "n3 follows the change")
        old = await _leader(c, cluster.nodes)
        assert old is not None
        m = await c.remove_member(old)
        assert old not in m.voters and len(m.voters) == 3
        await await_until(lambda: _leader(c, [n for n in cluster.nodes if n.node_id != old]), 20, "a new leader")
        cluster.kill(node_index(cluster, old))
        gone.append(old)

    asyncio.run(_under_writers(cluster, cluster.members, lambda: [n for n in cluster.nodes if n.node_id not in gone],
                               replace))


def test_a_group_moves_to_three_new_nodes_one_member_at_a_time(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=6, spares=3)
    old, new = cluster.nodes[:3], cluster.nodes[3:]

    async def move(c: AsyncClient) -> None:
        for out, into in zip(old, new, strict=True):
            await c.add_member(into.node_id, into.address)
            await c.remove_member(out.node_id)
        m = await c.members()
        assert m.voters == ["n3", "n4", "n5"] and m.learners == []
        await await_until(lambda: _leader(c, new), 20, "a leader among the new nodes")
        for n in old:
            cluster.kill(node_index(cluster, n.node_id))

    asyncio.run(_under_writers(cluster, cluster.nodes, lambda: new, move))


def test_a_follower_moves_to_a_new_port(cluster_factory: Any) -> None:
    """The members are told the follower's new address (set-address, committed while it is down); it
    restarts listening there with its data, and the members reach it and it catches up."""
    cluster: LocalCluster = cluster_factory(nodes=3)

    async def move(c: AsyncClient) -> None:
        leader = await _leader(c, cluster.nodes)
        mover = next(n for n in cluster.nodes if n.node_id != leader)
        cluster.kill(node_index(cluster, mover.node_id))
        mover.port = free_ports(1)[0]
        m = await c.set_member_address(mover.node_id, mover.address)
        assert m.addresses[mover.node_id] == mover.address
        cluster.write_configs()  # (its own node.toml: it listens at the new port)
        cluster.start(node_index(cluster, mover.node_id))
        await await_until(lambda: _follows(c, mover, ["n0", "n1", "n2"]), 30, "the moved node follows")

    asyncio.run(_under_writers(cluster, cluster.nodes, lambda: cluster.nodes, move))
