"""Nodes configured with different member lists for a group refuse each other at HELLO (they would
count different majorities): each side logs the reason once, the rest of the group goes on, and the
misconfigured node never follows its leader."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
from functools import partial
from typing import Any

from quorumlog.client import AsyncClient
from quorumlog.raft.member import members_digest
from quorumlog.server.cluster import LocalCluster, free_ports
from quorumlog.store.file_store import store_dir

from .conftest import await_until, node_index, wait_leader


def _warnings(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if " WARNING " in line and re.search(pattern, line)]


async def _refused_often(client: AsyncClient, cluster: LocalCluster) -> bool:
    """Each side has refused the other's HELLO several times (the links keep retrying)."""
    try:
        docs = [await client.node_status(n.address) for n in cluster.nodes]
    except Exception:
        return False  # n2 is still starting
    return (all(d["peer_refusals"]["n2"] >= 3 and d["hello_refusals"] >= 3 for d in docs[:2])
            and docs[2]["peer_refusals"]["n0"] >= 3 and docs[2]["peer_refusals"]["n1"] >= 3
            and docs[2]["hello_refusals"] >= 6)


def test_a_node_with_another_member_list_is_refused_and_never_follows(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()
    n2 = cluster.nodes[2]
    good = members_digest("g0", ["n0", "n1", "n2"])
    bad = members_digest("g0", ["n0", "n1", "n2", "n3"])

    async def main() -> None:
        async with AsyncClient(cluster.endpoints) as client:
            await wait_leader(client, cluster)
            for i in range(20):
                await client.append(f"first-{i}".encode())
            # n2 is rebuilt on an empty disk with a config that lists an extra member n3. (A store
            # remembers its member list, so the old store would refuse the new config on its own.)
            assert cluster.kill(2, signal.SIGTERM) == 0
            shutil.rmtree(store_dir(n2.data_dir, "g0", "n2"))
            peers = ",".join(f"{n.node_id}={n.address}" for n in cluster.nodes)
            text = n2.config_path.read_text()
            assert text.count(f'peers = "{peers}"') == 1
            (spare,) = free_ports(1)
            n2.config_path.write_text(text.replace(f'peers = "{peers}"', f'peers = "{peers},n3=127.0.0.1:{spare}"'))
            logged_before = {n.node_id: n.log_path.stat().st_size for n in cluster.nodes}
            cluster.start(2)

            await await_until(partial(_refused_often, client, cluster), 60, "repeated HELLO refusals")
            # n0 and n1 are a majority of the real group: they keep a leader and take appends.
            leader = await wait_leader(client, cluster)
            assert leader in ("n0", "n1")
            acked = [await client.append(f"second-{i}".encode()) for i in range(50)]
            assert (await client.get(acked[-1].index)).body == b"second-49"
            leader_doc = await client.node_status(cluster.nodes[node_index(cluster, leader)].address)
            st2 = (await client.node_status(n2.address))["groups"]["g0"]
            assert st2["leader"] is None and st2["role"] != "leader"
            assert st2["end_index"] == -1 and st2["committed_index"] == -1  # nothing ever reached it
            assert leader_doc["groups"]["g0"]["committed_index"] >= acked[-1].index

        logs = {n.node_id: n.log_path.read_bytes()[logged_before[n.node_id]:].decode() for n in cluster.nodes}
        # n2 never learnt of a leader in its new life.
        assert not re.search(r"group g0: \w+ in term \d+, leader n[01]\b", logs["n2"]), logs["n2"]
        # Every refusal, on both sides, is one WARNING line naming the group and both digests.
        for me in ("n0", "n1"):
            refused = _warnings(logs[me], rf"refused peer n2 \(127\.0\.0\.1:\d+\): group g0 member list differs "
                                          rf"\(n2 has {bad}, {me} has {good}\); check the peers of every node's config")
            assert len(refused) == 1, logs[me]
            told = _warnings(logs[me], rf"peer n2 \(127\.0\.0\.1:{n2.port}\) refused us: .*METADATA_ERROR.*"
                                       rf"group g0 member list differs \({me} has {good}, n2 has {bad}\)")
            assert len(told) == 1, logs[me]
            refused = _warnings(logs["n2"], rf"refused peer {me} \(127\.0\.0\.1:\d+\): group g0 member list "
                                            rf"differs \({me} has {good}, n2 has {bad}\)")
            assert len(refused) == 1, logs["n2"]
            port = cluster.nodes[node_index(cluster, me)].port
            told = _warnings(logs["n2"], rf"peer {me} \(127\.0\.0\.1:{port}\) refused us: .*group g0 member list "
                                         rf"differs \(n2 has {bad}, {me} has {good}\)")
            assert len(told) == 1, logs["n2"]

    asyncio.run(main())
