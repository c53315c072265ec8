"""The group id on real processes: after a member is added (and the group changed), every member, the one
added too, records and names at HELLO the id the group was created with, and a node of another cluster
configured with the same group name and the new member list is refused at HELLO, while the real members
keep working (and talk to each other again after a restart)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import urllib.request
from typing import Any

from quorumlog.client import AsyncClient
from quorumlog.raft.member import members_digest
from quorumlog.server.cluster import LocalCluster, LocalNode
from quorumlog.store.checkpoint import read_identity
from quorumlog.store.file_store import store_dir

from .conftest import await_until, node_index

GROUP_ID = members_digest("g0", ["n0", "n1", "n2"])  # g0 as n0..n2 bootstrapped it
NEW_LIST = members_digest("g0", ["n0", "n1", "n2", "n3"])  # the id a node listing the new members makes


def _identity(node: LocalNode) -> str | None:
    return read_identity(store_dir(str(node.data_dir), "g0", node.node_id))


async def _doc(c: AsyncClient, node: LocalNode) -> dict[str, Any] | None:
    with contextlib.suppress(Exception):
        return await c.node_status(node.address)
    return None


def _admin_status(node: LocalNode) -> dict[str, Any] | None:
    """The node's /status document (its admin port), with the node's own events (refusals among them)."""
    with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(f"{node.admin_url}/status", timeout=5) as r:
        return dict(json.loads(r.read()))
    return None


def _refusals(doc: dict[str, Any] | None, me: str) -> list[str]:
    """The refusing node's events: the other cluster's n3 refused for g0's id, naming both ids."""
    pattern = (rf"refused HELLO of n3 from 127\.0\.0\.1: group g0 member list differs "
               rf"\(n3 has {NEW_LIST}, {me} has {GROUP_ID}\)")
    return [e["text"] for e in (doc or {}).get("events", []) if re.search(pattern, e["text"])]


def test_a_node_configured_with_the_new_member_list_is_refused_after_the_group_changed(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1)
    n3 = cluster.nodes[3]
    # Another cluster's n3: the same group name, the group's members as they are now (n0..n3, at these
    # addresses), on an empty disk. It names the digest of that list at HELLO.
    other: LocalCluster = cluster_factory(nodes=4, start=False)
    stranger = other.nodes[3]
    text = stranger.config_path.read_text()
    old_peers = ",".join(f"{n.node_id}={n.address}" for n in other.nodes)
    new_peers = ",".join(f"{n.node_id}={n.address}" for n in cluster.members) + f",n3={stranger.address}"
    assert text.count(f'peers = "{old_peers}"') == 1
    stranger.config_path.write_text(text.replace(f'peers = "{old_peers}"', f'peers = "{new_peers}"'))

    async def main() -> None:
        members = ",".join(n.address for n in cluster.members)
        async with AsyncClient(members, group="g0", retry_timeout=30) as c:
            await c.append(b"before")
            await c.add_member("n3", n3.address, timeout=60)  # added as a learner, then promoted
            m = await c.members()
            assert m.voters == ["n0", "n1", "n2", "n3"] and m.learners == []
            # n3 took the group's id from the CONFIG entry that added it; nobody's changed.
            async def recorded() -> bool:
                return _identity(n3) == GROUP_ID

            await await_until(recorded, 20, "n3 records the group id")
            assert [_identity(n) for n in cluster.nodes] == [GROUP_ID] * 4

            other.start(3)
            refusers = cluster.members  # (the stranger dials n0..n2: its own n3 is itself)

            async def refused() -> bool:
                docs = [await asyncio.to_thread(_admin_status, n) for n in refusers]
                return all(_refusals(d, n.node_id) for n, d in zip(refusers, docs, strict=True))

            await await_until(refused, 60, "each member refused the stranger's HELLO")
            # The stranger was told why (it logs the refusal a moment after the member counts it), and never
            # took part: no leader, nothing in its log.
            told = rf"refused us: .*METADATA_ERROR.*group g0 member list differs \(n3 has {NEW_LIST}, " \
                   rf"n[012] has {GROUP_ID}\)"

            async def logged() -> bool:
                return re.search(told, stranger.log_path.read_text()) is not None

            await await_until(logged, 20, "the stranger to log why it was refused")
            st = (await c.node_status(stranger.address))["groups"]["g0"]
            assert st["leader"] is None and st["end_index"] == -1 and st["committed_index"] == -1

            # The real members go on, n3 included.
            acked = [await c.append(f"after-{i}".encode()) for i in range(20)]
            await await_until(lambda: _caught_up(c, cluster.nodes, acked[-1].index), 20, "every member commits")
            # A member started again names the same id at HELLO: the others take it back.
            docs = [await _doc(c, n) for n in cluster.members]
            follower = next(n for n, d in zip(cluster.members, docs, strict=True)
                            if d is not None and d["groups"]["g0"]["role"] != "leader")
            cluster.kill(node_index(cluster, follower.node_id))
            cluster.start(node_index(cluster, follower.node_id))
            acked = [await c.append(f"restarted-{i}".encode()) for i in range(5)]
            await await_until(lambda: _caught_up(c, [follower, n3], acked[-1].index), 30,
                              "the restarted member commits")

    asyncio.run(main())


async def _caught_up(c: AsyncClient, nodes: list[LocalNode], index: int) -> bool:
    for n in nodes:
        doc = await _doc(c, n)
        if doc is None or doc["groups"]["g0"]["committed_index"] < index:
            return False
    return True
