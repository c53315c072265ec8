"""A node saves its producer table beside its log when it stops cleanly, and starts from it
(core/producer_snapshot.py): on real processes, every node of a group restarted after a clean stop takes the
saved table (quorumlog_raft_events_total{event="producers_from_snapshot"}), and an idempotent client that
was writing goes on with its next sequences through the restart, every append in the log exactly once."""

from __future__ import annotations

import asyncio
from typing import Any

from quorumlog import AsyncClient
from quorumlog.server.cluster import LocalCluster

from .conftest import await_until, committed_entries, metric_value, scrape, wait_leader


def test_a_cluster_stopped_and_started_takes_its_saved_producer_tables_and_the_producer_goes_on(
        cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            await wait_leader(c, cluster)
            first = [(await c.append_many([f"a{i}-{k}".encode() for k in range(1 + i % 3)])) for i in range(40)]
            assert cluster.stop() == {n.node_id: 0 for n in cluster.nodes}
            cluster.start()
            await wait_leader(c, cluster)
            for node in cluster.nodes:  # each took its table from the file, not from a read of the whole log
                assert metric_value(scrape(node.admin_url), "quorumlog_raft_events_total",
                                    event="producers_from_snapshot") == 1, node.node_id
            # The same client, the same producer: its next sequence is judged against the restored table.
            then = [(await c.append_many([f"b{i}".encode()])) for i in range(10)]
            acked = [r.index for rs in first + then for r in rs]
            leader = (await c.metadata(with_nodes=False)).leader
            assert leader is not None
            address = cluster.nodes[int(leader[1:])].address

            async def all_there() -> list[tuple[int, bytes]] | None:
                entries = await committed_entries(address)
                return entries if len([b for _, b in entries if b]) >= len(acked) else None

            entries = await await_until(all_there, 10, "every append committed on the leader")
            bodies = [b for _, b in entries if b]
            assert len(bodies) == len(set(bodies)) == len(acked), "an append lost or written twice"
            assert {i for i, _ in entries} >= set(acked)

    asyncio.run(main())
