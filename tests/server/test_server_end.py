"""END on real processes (issue 32, "reads you can trust"): a group's end, committed index and term, linearizable
or local. Linearizable answers are never behind an append acknowledged before the request: on every member
of a Raft group (followers ask their leader), never from a leader cut off from its peers (it times out, or
learns it was deposed, while `local` shows its stale view), and on a primary/backup group only from its
confirmed primary, proven current by its controller's record (refused without a controller)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.client.results import EndInfo
from quorumlog.errors import InvalidArgumentError, QuorumLogError, RequestError, ResponseCode
from quorumlog.net.errors import ResponseError
from quorumlog.net.ops import Op
from quorumlog.net.schemas import END_REQUEST, END_RESPONSE
from quorumlog.server.cluster import LocalCluster

from .conftest import FAST_RAFT, await_until, statuses, wait_leader
from .netns import NODES, NetnsCluster, Network

QL = [sys.executable, "-m", "quorumlog"]
HA = {"ack": "sync", "controller": "ctl", "ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 800,
      "failover_timeout_ms": 800}


async def raw_end(client: AsyncClient, addr: str, consistency: str, group: str = "g0") -> Any:
    """One END to the node at `addr`, decoded (ResponseError for a refusal): what the node itself answers."""
    return await client._call(addr, Op.END, END_REQUEST.encode(group, consistency), END_RESPONSE)


@pytest.mark.smoke
def test_end_on_every_member_of_a_raft_group(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints) as c:
            leader = await wait_leader(c, cluster)
            results = await c.append_many([f"e{i}".encode() for i in range(25)])
            last = results[-1].index
            term = (await statuses(c, cluster))[leader]["term"]
            for node in cluster.nodes:
                lin = await c.end(node=node.node_id)
                assert lin.node == node.node_id, lin  # a follower answers itself (it asked its leader)
                assert lin.committed >= last and lin.end >= lin.committed and lin.term == term, (node.node_id, lin)
                local = await c.end(consistency="local", node=node.address)
                assert local.node == node.node_id and local.committed <= lin.committed, (local, lin)
                assert local.end >= local.committed and local.term == term, local
                answered = await raw_end(c, node.address, "linearizable")
                assert answered.committed >= last and answered.term == term
            anywhere = await c.end()  # no node named: the leader (or whichever answers)
            assert isinstance(anywhere, EndInfo) and anywhere.committed >= last and anywhere.term == term

            # A consistency other than the two is refused, by the client and by the node itself.
            with pytest.raises(InvalidArgumentError, match="linearizable.*local"):
                await c.end(consistency="strong")
            with pytest.raises(ResponseError) as refused:
                await raw_end(c, cluster.nodes[1].address, "sequential")
            assert refused.value.code == ResponseCode.UNEXPECTED_ARGUMENT, refused.value
            assert "'sequential'" in refused.value.reason and "linearizable" in refused.value.reason
            with pytest.raises(RequestError) as unknown:
                await c.end(node="n9")
            assert unknown.value.code == ResponseCode.UNKNOWN_MEMBER and "n9" in str(unknown.value)

    asyncio.run(main())

    eps = ["--endpoints", cluster.endpoints, "--group", "g0", "--timeout", "10"]
    r = subprocess.run([*QL, "end", *eps], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    end, committed, term = (int(x) for x in r.stdout.split())
    assert end >= committed >= 24 and term >= 1, r.stdout
    r = subprocess.run([*QL, "end", *eps, "--local", "--node", "n2", "--json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"end", "committed", "term", "node"} and doc["node"] == "n2", doc
    assert doc["committed"] <= committed and doc["term"] == term, (doc, r.stdout)
    r = subprocess.run([*QL, "end", "--endpoints", cluster.endpoints, "--group", "nope", "--timeout", "5"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and not r.stdout, r.stdout
    assert len(r.stderr.splitlines()) == 1 and "UNKNOWN_GROUP" in r.stderr and "nope" in r.stderr, r.stderr


# --- a leader cut off from its peers -------------------------------------------------------------------


def cut_off(net: Network, i: int, cut: bool = True) -> list[int]:
    """Cut node i off from every other node, both ways (or heal it); the others."""
    others = [j for j in range(NODES) if j != i]
    for j in others:
        net.set_route(i, j, blocked=cut)
        net.set_route(j, i, blocked=cut)
    return others


async def _group_docs(c: NetnsCluster, nodes: list[int], group: str = "g0") -> dict[int, dict[str, Any]]:
    """The `group` status of each of `nodes` that answers within 3 s (a cut-off node still answers the test)."""
    out: dict[int, dict[str, Any]] = {}
    for i in nodes:
        try:
            async with asyncio.timeout(3.0):
                async with AsyncClient(c.nodes[i].address, secret=c.secret, connect_timeout=1.0,
                                       request_timeout=1.0) as probe:
                    out[i] = (await probe.node_status(c.nodes[i].address))["groups"][group]
        except (QuorumLogError, OSError, TimeoutError):
            continue
    return out


def _lone(address: str, secret: str | None) -> AsyncClient:
    """A client of one node only, quick to give up: for a node cut off from its peers."""
    return AsyncClient(address, secret=secret, retry_timeout=1.0, request_timeout=8.0, connect_timeout=2.0)


async def _no_linearizable_end(lone: AsyncClient, address: str, who: str) -> RequestError:
    """The refusal a cut-off node answers a linearizable END with, within 15 s (never an answer)."""
    t0 = time.monotonic()
    with pytest.raises(RequestError) as refused:
        got = await asyncio.wait_for(lone.end(node=address), 20)
        pytest.fail(f"the cut-off {who} answered a linearizable end: {got}")
    assert time.monotonic() - t0 < 15
    return refused.value


def test_a_cut_off_leader_gives_no_stale_linearizable_end(netns_cluster: Callable[..., Any]) -> None:
    # check_quorum off: the cut-off leader keeps believing it leads (the case ReadIndex must catch).
    c, net = netns_cluster(raft={**FAST_RAFT, "check_quorum": False})

    async def main() -> None:
        async def one_leader(nodes: list[int]) -> tuple[int, int] | None:
            docs = await _group_docs(c, nodes)
            leaders = [(i, d["term"]) for i, d in docs.items() if d["role"] == "leader"]
            if len(docs) != len(nodes) or len(leaders) != 1:
                return None
            i, term = leaders[0]
            return (i, term) if all(d["leader"] == c.nodes[i].node_id for d in docs.values()) else None

        old, old_term = await await_until(lambda: one_leader(list(range(NODES))), 60, "a first leader", 0.1)
        async with AsyncClient(c.endpoints, secret=c.secret, retry_timeout=30) as w:
            before = (await w.append_many([f"before {i}".encode() for i in range(10)]))[-1].index

        # Cut the leader off from both peers, both ways; the test still reaches every node over the bridge.
        others = cut_off(net, old)
        new, new_term = await await_until(lambda: one_leader(others), 30, "the other two to elect a leader", 0.1)
        assert new_term > old_term
        still = (await _group_docs(c, [old]))[old]
        assert still["role"] == "leader" and still["term"] == old_term, still  # check_quorum off: it believes it leads

        async with AsyncClient(",".join(c.nodes[i].address for i in others), secret=c.secret,
                               retry_timeout=30) as w:
            after = (await w.append_many([f"after {i}".encode() for i in range(10)]))[-1].index
            assert after > before
            for i in others:  # the majority's answers hold the appends, whoever is asked
                info = await w.end(node=c.nodes[i].node_id)
                assert info.committed >= after and info.term == new_term, info

        # The old leader, asked itself: never an end below the new leader's commit; an error within a bound.
        isolated = c.nodes[old]
        async with _lone(isolated.address, c.secret) as lone:
            refused = await _no_linearizable_end(lone, isolated.address, "leader")
            assert refused.code in (ResponseCode.TIMEOUT, ResponseCode.NOT_LEADER), refused
            assert "g0" in str(refused) and isolated.node_id in str(refused), refused
            # Its local view is the stale one: below what the new leader committed, in the old term.
            local = await lone.end(consistency="local", node=isolated.address)
            assert local.node == isolated.node_id and local.committed < after and local.term == old_term, local

        # Healed: it learns the new term and answers a linearizable end that holds the appends.
        cut_off(net, old, cut=False)
        async with AsyncClient(isolated.address, secret=c.secret, retry_timeout=3.0) as lone:
            async def current() -> EndInfo | None:
                try:
                    info = await lone.end(node=isolated.address)
                except RequestError:
                    return None
                return info if info.node == isolated.node_id else None

            info = await await_until(current, 30, "the old leader to answer a linearizable end again", 0.2)
            assert info.committed >= after and info.term >= new_term, info

    asyncio.run(main())


# --- primary/backup -------------------------------------------------------------------------------------
async def _confirmed_primary(c: AsyncClient, cluster: LocalCluster) -> str:
    async def found() -> str | None:
        st = await statuses(c, cluster)
        p = [n for n, s in st.items() if s["role"] == "leader" and s["confirmed"]]
        return p[0] if len(st) == 3 and len(p) == 1 else None

    return await await_until(found, 30, "a confirmed primary", 0.05)


def test_end_of_a_primary_backup_group_with_a_controller(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(replication="primary-backup", ha=HA)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            primary = await _confirmed_primary(c, cluster)
            last = (await c.append_many([f"p{i}".encode() for i in range(20)]))[-1].index
            epoch = (await statuses(c, cluster))[primary]["epoch"]
            info = await c.end(node=primary)
            assert info.node == primary and info.committed >= last and info.end >= info.committed, info
            assert info.term == epoch, (info, epoch)
            for n in cluster.nodes:
                if n.node_id == primary:
                    continue
                # The backup itself refuses, naming the primary...
                with pytest.raises(ResponseError) as refused:
                    await raw_end(c, n.address, "linearizable")
                assert refused.value.code == ResponseCode.NOT_LEADER and refused.value.leader == primary, \
                    refused.value
                # ...and the client follows that hint: the primary's answer.
                followed = await c.end(node=n.node_id)
                assert followed.node == primary and followed.committed >= last and followed.term == epoch, followed
                local = await c.end(consistency="local", node=n.node_id)
                assert local.node == n.node_id and local.committed <= followed.committed, local
            # The controller group is a Raft group: any member answers it.
            ctl = await c.end("ctl", node=cluster.nodes[2].node_id)
            assert ctl.node == "n2" and ctl.committed >= 0, ctl

    asyncio.run(main())


def test_end_of_a_primary_backup_group_without_a_controller(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(replication="primary-backup",
                                            ha={"ack": "sync", "ha_heartbeat_interval_ms": 200,
                                                "ha_ack_timeout_ms": 1000})

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            primary = await _confirmed_primary(c, cluster)
            last = (await c.append_many([f"q{i}".encode() for i in range(10)]))[-1].index
            for n in cluster.nodes:  # every member refuses at once, the primary as its backups
                with pytest.raises(RequestError) as refused:
                    await c.end(node=n.node_id)
                assert refused.value.code == ResponseCode.UNSUPPORTED, refused.value
                assert "controller" in str(refused.value) and "local" in str(refused.value), refused.value
            info = await c.end(consistency="local", node=primary)
            assert info.node == primary and info.committed >= last, info

            async def backups_caught_up() -> bool:
                for n in cluster.nodes:
                    if n.node_id != primary and (await c.end(consistency="local", node=n.node_id)).end < last:
                        return False
                return True

            await await_until(backups_caught_up, 20, "every backup to hold the appends", 0.05)

    asyncio.run(main())


def test_a_cut_off_primary_gives_no_stale_linearizable_end(netns_cluster: Callable[..., Any]) -> None:
    """A primary cut off from its backups and its controller group's other members still takes itself for the
    primary of its epoch, until it hears otherwise; the controller elects a backup meanwhile. Asked itself,
    it cannot prove its epoch current (its controller replica confirms no read point): an error within a
    bound, never its stale end; its local view is the stale one."""
    c, net = netns_cluster(replication="primary-backup", ha=HA)

    async def main() -> None:
        async def one_primary(nodes: list[int]) -> tuple[int, int] | None:
            docs = await _group_docs(c, nodes)
            p = [(i, d["epoch"]) for i, d in docs.items() if d["role"] == "leader" and d["confirmed"]]
            return p[0] if len(docs) == len(nodes) and len(p) == 1 else None

        old, old_epoch = await await_until(lambda: one_primary(list(range(NODES))), 60, "a confirmed primary", 0.1)
        async with AsyncClient(c.endpoints, secret=c.secret, retry_timeout=30) as w:
            before = (await w.append_many([f"before {i}".encode() for i in range(10)]))[-1].index
            info = await w.end(node=c.nodes[old].node_id)
            assert info.committed >= before and info.term == old_epoch, info

        others = cut_off(net, old)
        new, new_epoch = await await_until(lambda: one_primary(others), 30, "the controller to elect a backup", 0.1)
        assert new_epoch > old_epoch
        async with AsyncClient(",".join(c.nodes[i].address for i in others), secret=c.secret,
                               retry_timeout=30) as w:
            after = (await w.append_many([f"after {i}".encode() for i in range(10)]))[-1].index
            assert after > before
            info = await w.end(node=c.nodes[new].node_id)
            assert info.node == c.nodes[new].node_id and info.committed >= after and info.term == new_epoch, info

        isolated = c.nodes[old]
        async with _lone(isolated.address, c.secret) as lone:
            refused = await _no_linearizable_end(lone, isolated.address, "primary")
            assert refused.code in (ResponseCode.TIMEOUT, ResponseCode.NOT_LEADER,
                                    ResponseCode.LEADER_NOT_READY), refused
            local = await lone.end(consistency="local", node=isolated.address)
            assert local.node == isolated.node_id and local.committed < after and local.term == old_epoch, local

    asyncio.run(main())
