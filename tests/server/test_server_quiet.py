"""Quiet groups on real processes (raft/quiesce.py, server/liveness.py): idle Raft groups stop heartbeating
and the nodes send no group message at all, only NODE_PINGs; when the node leading them is killed, the
survivors hear its silence and elect new leaders; an append wakes a group and commits; the restarted node
finds its leaders and every group goes quiet again."""

from __future__ import annotations

import asyncio
from typing import Any

from quorumlog import AsyncClient
from quorumlog.server.cluster import LocalCluster

from .conftest import await_until, metric_value, scrape, statuses, wait_leader

GROUPS = ["g0", "g1"]


def sent(cluster: LocalCluster) -> dict[str, float]:
    return {n.node_id: metric_value(scrape(n.admin_url), "quorumlog_peer_messages_sent_total")
            for n in cluster.nodes if n.alive}


async def all_quiet(clients: dict[str, AsyncClient], cluster: LocalCluster, nodes: int) -> bool:
    for g, c in clients.items():
        st = await statuses(c, cluster, g)
        if len(st) < nodes or not all(s["quiet"] for s in st.values()):
            return False
    return True


def test_idle_groups_go_quiet_and_a_killed_leader_is_replaced(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(groups=len(GROUPS))

    async def main() -> None:
        clients = {g: AsyncClient(cluster.endpoints, group=g, retry_timeout=30) for g in GROUPS}
        try:
            for g, c in clients.items():
                await wait_leader(c, cluster, group=g)
                await c.append_many([f"{g}-{k}".encode() for k in range(5)])
            c0 = clients["g0"]
            await await_until(lambda: all_quiet(clients, cluster, 3), 20, "every group quiet on every node")
            before = sent(cluster)
            await asyncio.sleep(2.0)
            after = sent(cluster)
            assert all(after[n] - before[n] <= 2 for n in before), (before, after)  # (pings are not group messages)

            leader = await wait_leader(c0, cluster, group="g0")
            victim = next(n for n in cluster.nodes if n.node_id == leader)
            cluster.kill(cluster.nodes.index(victim))
            for g in GROUPS:  # the survivors hear the node's silence and elect (and a quiet leader elsewhere holds)
                new = await wait_leader(clients[g], cluster, timeout=15, group=g)
                assert new != leader
            woken = sum(metric_value(scrape(n.admin_url), "quorumlog_raft_events_total",
                                     event="quiet_ended_leader_silent") for n in cluster.nodes if n.alive)
            assert woken >= 1
            for g, c in clients.items():
                (r,) = await c.append_many([f"{g}-after".encode()])
                assert r.index > 5, (g, r)  # (after the first five, and a new leader's NOOP where one was elected)

            cluster.start(cluster.nodes.index(victim))
            await await_until(lambda: all_quiet(clients, cluster, 3), 30, "every group quiet again, the node back")
            for g in GROUPS:
                st = await statuses(clients[g], cluster, g)
                assert len({s["leader"] for s in st.values()}) == 1
                assert len({s["committed_index"] for s in st.values()}) == 1, st
        finally:
            for c in clients.values():
                await c.close()

    asyncio.run(main())


def test_a_quiet_group_woken_by_reads_keeps_its_leader(cluster_factory: Any) -> None:
    """Found by the standalone Spark test: a linearizable END woke a quiet leader, whose node then ticked it
    at the quiet cadence (once a second) instead of every 10 ms; it sent no heartbeat and stepped down for
    check-quorum, and its woken followers elected another. A read now costs no election, however often."""
    cluster: LocalCluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, group="g0", retry_timeout=30) as c:
            await wait_leader(c, cluster)
            await c.append_many([b"x"] * 10)
            leader = await wait_leader(c, cluster)
            term = (await statuses(c, cluster))[leader]["term"]
            for _ in range(4):
                await await_until(lambda: all_quiet({"g0": c}, cluster, 3), 20, "g0 quiet on every node")
                await asyncio.sleep(1.2)  # past the quiet cadence's next tick
                end = await c.end("g0", "linearizable")
                assert end.committed >= 10
            await asyncio.sleep(1.0)
            st = await statuses(c, cluster)
            assert {s["term"] for s in st.values()} == {term}, st
            assert [n for n, s in st.items() if s["role"] == "leader"] == [leader]  # (no step-down, no election)

    asyncio.run(main())
