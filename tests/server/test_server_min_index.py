"""READ, GET and TAIL at a `min_index` on real processes (issue 32, "read-your-writes and monotonic reads"): a
node that has not committed that far waits (server/waits.py: MIN_INDEX_WAIT_S), then answers as it would have,
or FALL_BEHIND_TOO_MUCH naming the leader; never with less. The clients send the highest index they appended,
read or learned committed through end() (client/seen.py), so their own appends are visible to their next read
on any node, and their reads never go backwards. A follower that really lags is one cut off from its peers in
network namespaces (tests/server/netns.py), its reads sent while it is cut off and answered after it is healed.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.errors import ReadBehindError, RequestError, ResponseCode
from quorumlog.net.bodies import Schema, decode_response
from quorumlog.net.errors import ConnectionClosedError, ResponseError
from quorumlog.net.ops import Op
from quorumlog.net.schemas import (
    GET_REQUEST,
    GET_RESPONSE,
    READ_REQUEST,
    READ_RESPONSE,
    TAIL_REQUEST,
    TAIL_RESPONSE,
)
from quorumlog.server.cluster import LocalCluster
from quorumlog.server.waits import MIN_INDEX_WAIT_S

from .conftest import FAST_RAFT, await_until, statuses, wait_leader
from .netns import NODES, NetnsCluster, Network

FALL_BEHIND = ResponseCode.FALL_BEHIND_TOO_MUCH
# A follower cut off for a few seconds keeps its leader (and names it) rather than campaigning: a longer
# election timeout than FAST_RAFT's (100 heartbeats, 5 s), which the cuts here stay well within.
PATIENT_RAFT = {**FAST_RAFT, "max_heartbeat_leak": 100}


async def raw(client: AsyncClient, addr: str, op: Op, request: Schema, response: Schema, *values: Any) -> Any:
    """One request to the node at `addr` with exactly `values` (a trailing min_index or not), decoded
    (ResponseError for a refusal): what the node itself answers."""
    return await client._call(addr, op, request.encode(*values), response)


async def refused(what: Any) -> tuple[ResponseError, float]:
    """The ResponseError `what` (an awaitable) ends with, and how long it took."""
    t0 = time.monotonic()
    with pytest.raises(ResponseError) as e:
        got = await what
        pytest.fail(f"answered {got}")
    return e.value, time.monotonic() - t0


def bodies(entries: list[Any]) -> list[bytes]:
    return [e.body for e in entries]


async def stats(client: AsyncClient, addr: str, group: str = "g0") -> dict[str, Any]:
    return dict((await client.node_status(addr))["groups"][group]["stats"])


# --- without network namespaces --------------------------------------------------------------------------
def test_version_2_bodies_and_caught_up_nodes_answer_at_once(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints) as c:
            leader = await wait_leader(c, cluster)
            assert c.seen_index() == -1
            last = (await c.append_many([f"e{i}".encode() for i in range(10)]))[-1].index
            assert c.seen_index() == last  # appended: seen

            async def all_caught_up() -> bool:
                return all(s["committed_index"] >= last for s in (await statuses(c, cluster)).values())

            await await_until(all_caught_up, 20, "every node to commit the appends")
            for node in cluster.nodes:
                a = node.address
                t0 = time.monotonic()
                # A version-2 body (no min_index): -1, served at once, as before.
                r = await raw(c, a, Op.READ, READ_REQUEST, READ_RESPONSE, "g0", 0, 100, 1 << 20, False)
                assert r.next_index == last + 1 and r.committed_index >= last
                g = await raw(c, a, Op.GET, GET_REQUEST, GET_RESPONSE, "g0", last)
                assert len(g.entry) == 48 + 2  # (the header, then b"e9")
                # min_index at or below the node's commit index: at once too.
                for m in (-1, 0, last):
                    r = await raw(c, a, Op.READ, READ_REQUEST, READ_RESPONSE, "g0", last, 1, 1 << 20, False, m)
                    assert r.next_index == last + 1, (node.node_id, m, r)
                    await raw(c, a, Op.GET, GET_REQUEST, GET_RESPONSE, "g0", last, m)
                tail = await raw(c, a, Op.TAIL, TAIL_REQUEST, TAIL_RESPONSE, "g0", last, False, last)
                assert tail.committed_index >= last
                old = await raw(c, a, Op.TAIL, TAIL_REQUEST, TAIL_RESPONSE, "g0", last, False)
                assert old.committed_index >= last
                assert time.monotonic() - t0 < MIN_INDEX_WAIT_S, node.node_id  # nothing waited
                st = await stats(c, a)
                assert st["min_index_waits"] == 0 and st["min_index_behind"] == 0, (node.node_id, st)
                # The refusals of the synchronous path are unchanged: a GET past the commit index.
                e, _took = await refused(raw(c, a, Op.GET, GET_REQUEST, GET_RESPONSE, "g0", last + 5))
                assert e.code == ResponseCode.INDEX_OUT_OF_RANGE, e
            # The client notes what it reads, gets and learns through end().
            entries = [e async for e in c.read(0, last + 1)]
            assert bodies(entries) == [f"e{i}".encode() for i in range(10)]
            assert (await c.get(last)).body == b"e9" and c.seen_index() == last
            info = await c.end(node=leader)
            assert c.seen_index() == info.committed >= last

    asyncio.run(main())


def test_a_min_index_no_node_reaches_is_refused_within_a_bound_naming_the_leader(cluster_factory: Any) -> None:
    """Asked for an index no node has committed, every node waits MIN_INDEX_WAIT_S, then answers
    FALL_BEHIND_TOO_MUCH: a follower names its leader, the leader none. The client goes round the nodes until
    its retry timeout, then raises ReadBehindError: never an answer with less."""
    cluster: LocalCluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=2.5) as c:
            leader = await wait_leader(c, cluster)
            last = (await c.append_many([b"x", b"y"]))[-1].index
            ahead = last + 1000
            for node in cluster.nodes:
                calls = [raw(c, node.address, Op.READ, READ_REQUEST, READ_RESPONSE, "g0", 0, 10, 1 << 20, False,
                             ahead),
                         raw(c, node.address, Op.GET, GET_REQUEST, GET_RESPONSE, "g0", last, ahead),
                         raw(c, node.address, Op.TAIL, TAIL_REQUEST, TAIL_RESPONSE, "g0", 0, False, ahead)]
                # All three at once on one connection: the waits run side by side, and block nothing else.
                t0 = time.monotonic()
                waiting = [asyncio.ensure_future(refused(call)) for call in calls]
                await asyncio.sleep(0.2)
                r = await raw(c, node.address, Op.READ, READ_REQUEST, READ_RESPONSE, "g0", 0, 10, 1 << 20, False,
                              last)
                assert r.next_index == last + 1 and time.monotonic() - t0 < MIN_INDEX_WAIT_S
                for e, took in await asyncio.gather(*waiting):
                    assert e.code == FALL_BEHIND, e
                    assert MIN_INDEX_WAIT_S * 0.9 <= took < MIN_INDEX_WAIT_S + 2, took
                    assert e.leader == (None if node.node_id == leader else leader), (node.node_id, e)
                    assert f"node {node.node_id} has committed up to" in e.reason and "group g0" in e.reason, e
                    assert f"below the min_index {ahead} asked" in e.reason and "waited" in e.reason, e
                    where = "read from another node" if node.node_id == leader else f"read from the leader {leader}"
                    assert where in e.reason, e
                st = await stats(c, node.address)
                assert st["min_index_waits"] == 3 and st["min_index_behind"] == 3, st

            c._saw(ahead)  # as if this client had seen that far (a node that lost its data would do it)
            assert c.seen_index() == ahead
            t0 = time.monotonic()
            with pytest.raises(ReadBehindError) as behind:
                await c.read_batch(0, 10)
            took = time.monotonic() - t0
            assert 2.5 <= took < 10, took
            assert behind.value.code == FALL_BEHIND and isinstance(behind.value, RequestError)
            assert f"read at index {ahead}" in str(behind.value) and "g0" in str(behind.value), behind.value
            with pytest.raises(ReadBehindError):
                await c.get(last)

        # Opting out: no min_index sent, the node answers with what it has.
        async with AsyncClient(cluster.endpoints, read_your_writes=False) as c:
            c._saw(ahead)
            entries, nxt, _committed = await c.read_batch(0, 10)
            assert bodies(entries)[-2:] == [b"x", b"y"] and nxt == last + 1

    asyncio.run(main())


def test_a_waiting_read_ends_cleanly_when_its_connection_closes_or_the_node_stops(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints) as c:
            await wait_leader(c, cluster)
            last = (await c.append(b"z")).index
        body = READ_REQUEST.encode("g0", 0, 10, 1 << 20, False, last + 100)
        # The connection goes while the read waits: nothing to answer, nothing raised on the node.
        async with AsyncClient(cluster.nodes[1].address) as c:
            conn = await c._conn(cluster.nodes[1].address)
            pending = asyncio.ensure_future(conn.request(Op.READ, body, timeout=5))
            tail = asyncio.ensure_future(conn.request(Op.TAIL, TAIL_REQUEST.encode("g0", 0, False, last + 100),
                                                      timeout=5))
            await asyncio.sleep(0.3)
            conn.close("test closes it")
            for f in (pending, tail):
                with pytest.raises(ConnectionClosedError):
                    await f
        async with AsyncClient(cluster.nodes[1].address) as c:  # the node serves on
            r = await raw(c, cluster.nodes[1].address, Op.READ, READ_REQUEST, READ_RESPONSE, "g0", 0, 10, 1 << 20,
                          False, last)
            assert r.next_index == last + 1
        # The node stops while a read waits: answered NETWORK_ERROR (ask another node) as its group closes,
        # before its connections do; the node exits 0 at once.
        async with AsyncClient(cluster.nodes[2].address) as c:
            conn = await c._conn(cluster.nodes[2].address)
            pending = asyncio.ensure_future(conn.request(Op.READ, body, timeout=5))
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            assert cluster.kill(2, signal.SIGTERM) == 0
            f = await pending
            with pytest.raises(ResponseError) as e:
                decode_response(READ_RESPONSE, f.body)
            assert e.value.code == ResponseCode.NETWORK_ERROR and "shutting down" in e.value.reason, e.value
            assert time.monotonic() - t0 < 10

    asyncio.run(main())
    cluster.stop()
    for node in cluster.nodes[1:]:
        text = node.log_path.read_text()
        for bad in ("Traceback", "never retrieved", "handler failed", "Task was destroyed"):
            assert bad not in text, f"{node.node_id}: {bad}\n{text[-3000:]}"


# --- a follower that lags: cut off in network namespaces --------------------------------------------------


def cut_off(net: Network, i: int, cut: bool = True) -> None:
    """Cut node i off from every other node, both ways (or heal it)."""
    for j in range(NODES):
        if j != i:
            net.set_route(i, j, blocked=cut)
            net.set_route(j, i, blocked=cut)


async def _roles(c: NetnsCluster, probe: AsyncClient) -> tuple[int, int, int]:
    """(leader, follower, other follower) once every node names the same leader."""
    async def found() -> tuple[int, int, int] | None:
        docs = {}
        for i, n in enumerate(c.nodes):
            try:
                docs[i] = (await probe.node_status(n.address))["groups"]["g0"]
            except (RequestError, OSError, ConnectionClosedError):
                return None
        leaders = [i for i, d in docs.items() if d["role"] == "leader"]
        if len(leaders) != 1 or any(d["leader"] != c.nodes[leaders[0]].node_id for d in docs.values()):
            return None
        rest = [i for i in range(NODES) if i != leaders[0]]
        return leaders[0], rest[0], rest[1]

    return await await_until(found, 60, "a leader every node follows", 0.1)


def test_a_follower_cut_off_answers_fall_behind_with_the_leader_hint(netns_cluster: Callable[..., Any]) -> None:
    c, net = netns_cluster(raft=PATIENT_RAFT)

    async def main() -> None:
        async with AsyncClient(c.endpoints, secret=c.secret, retry_timeout=30) as probe:
            lead, f, other = await _roles(c, probe)
            leader, follower = c.nodes[lead], c.nodes[f]
            before = (await probe.append(b"before")).index

            async def follower_has(index: int) -> bool:
                return (await probe.end(consistency="local", node=follower.address)).committed >= index

            await await_until(lambda: follower_has(before), 20, "the follower to commit the first append")
            cut_off(net, f)
            # The writer lists the follower first: once it no longer knows the leader, it asks there first.
            eps = ",".join(c.nodes[i].address for i in (f, lead, other))
            async with AsyncClient(eps, secret=c.secret, retry_timeout=30) as w:
                last = (await w.append_many([f"cut {i}".encode() for i in range(5)]))[-1].index
                assert w.seen_index() == last
                a = follower.address
                # Raw requests at the writer's index, side by side: each waits, then is refused naming the leader.
                calls = [raw(w, a, Op.READ, READ_REQUEST, READ_RESPONSE, "g0", last, 10, 1 << 20, False, last),
                         raw(w, a, Op.GET, GET_REQUEST, GET_RESPONSE, "g0", last, last),
                         raw(w, a, Op.TAIL, TAIL_REQUEST, TAIL_RESPONSE, "g0", last, False, last)]
                for e, took in await asyncio.gather(*map(refused, calls)):
                    assert e.code == FALL_BEHIND and e.leader == leader.node_id, e
                    assert MIN_INDEX_WAIT_S * 0.9 <= took < MIN_INDEX_WAIT_S + 2, took
                    assert f"node {follower.node_id} has committed up to {before}" in e.reason, e
                    assert f"min_index {last}" in e.reason and f"read from the leader {leader.node_id}" in e.reason
                # Without a min_index (a client of version 2, or -1), the old answers at once: less.
                r = await raw(w, a, Op.READ, READ_REQUEST, READ_RESPONSE, "g0", last, 10, 1 << 20, False)
                assert r.entries == b"" and r.next_index == last and r.committed_index == before, r
                e, took = await refused(raw(w, a, Op.GET, GET_REQUEST, GET_RESPONSE, "g0", last, -1))
                assert e.code == ResponseCode.INDEX_OUT_OF_RANGE and took < MIN_INDEX_WAIT_S, e
                # The writer's own read: asked of the follower first (it lost track of its leader, as after
                # a leader change), which waits and names the leader; the client asks the leader.
                w._leader_addr = None
                t0 = time.monotonic()
                entries, nxt, _committed = await w.read_batch(before + 1, 10)
                assert time.monotonic() - t0 >= MIN_INDEX_WAIT_S * 0.9  # (the follower was asked first)
                assert bodies(entries) == [f"cut {i}".encode() for i in range(5)] and nxt == last + 1
                st = await stats(w, a)
                assert st["min_index_waits"] == 4 and st["min_index_behind"] == 4, st
            # A client that opts out reads what the follower has: less.
            async with AsyncClient(follower.address, secret=c.secret, read_your_writes=False) as lone:
                lone._saw(last)
                entries, nxt, committed = await lone.read_batch(before + 1, 10)
                assert entries == [] and nxt == before + 1 and committed == before
            cut_off(net, f, cut=False)
            await await_until(lambda: follower_has(last), 30, "the healed follower to catch up", 0.1)

    asyncio.run(main())


def test_reads_on_a_lagging_follower_wait_for_what_the_client_saw(netns_cluster: Callable[..., Any]) -> None:
    """The follower is cut off while the client appends (or learns the group's end); the client's read goes to it
    (the client lost track of its leader) while it is still cut off, and the follower is healed a moment
    later: the read waits, and answers the client's own entries, never less."""
    c, net = netns_cluster(raft=PATIENT_RAFT)

    async def main() -> None:
        async with AsyncClient(c.endpoints, secret=c.secret, retry_timeout=30) as probe:
            lead, f, other = await _roles(c, probe)
            follower = c.nodes[f]
            eps = ",".join(c.nodes[i].address for i in (f, lead, other))

            async def lagging(client: AsyncClient, read: Any, writer: AsyncClient | None = None) -> tuple[Any, int]:
                """Cut the follower off, append through `writer` (else `client`), start `read()` on the client
                (the follower first), heal the follower a moment later; what the read answers, and the index."""
                cut_off(net, f)
                try:
                    last = (await (writer or client).append_many([b"a", b"b", b"c"]))[-1].index
                    if writer is not None:
                        assert (await client.end(node=c.nodes[lead].node_id)).committed >= last
                    client._leader_addr = None  # (as after a leader change: the endpoints in turn, the follower first)
                    task = asyncio.ensure_future(read(last))
                    await asyncio.sleep(0.1)
                finally:
                    cut_off(net, f, cut=False)
                return await task, last

            async with AsyncClient(eps, secret=c.secret, retry_timeout=30) as me:
                # READ: its own appends, from the follower once it caught up (or the leader it names).
                (entries, nxt, _committed), last = await lagging(me, lambda i: me.read_batch(i - 2, 10))
                assert bodies(entries) == [b"a", b"b", b"c"] and nxt == last + 1
                # GET.
                entry, last = await lagging(me, me.get)
                assert entry.index == last and entry.body == b"c"

                # TAIL: subscribed once the follower committed the client's index, so it starts with it.
                async def first_of_tail(i: int) -> Any:
                    agen = me.tail(i)
                    try:
                        return await agen.__anext__()
                    finally:
                        await agen.aclose()

                entry, last = await lagging(me, first_of_tail)
                assert entry.index == last and entry.body == b"c"

            # Monotonic reads: this client appended nothing; the end it learned from the leader is its floor.
            async with AsyncClient(eps, secret=c.secret, retry_timeout=30) as reader, \
                    AsyncClient(c.nodes[lead].address, secret=c.secret, retry_timeout=30) as writer:
                (entries, nxt, _c), last = await lagging(reader, lambda i: reader.read_batch(i - 2, 10), writer)
                assert bodies(entries) == [b"a", b"b", b"c"] and nxt == last + 1
                assert reader.seen_index() >= last

            st = await stats(probe, follower.address)
            # Every read reached the follower while it was cut off and waited there, and the follower answered
            # each itself once healed (it catches up within tens of milliseconds; the wait is 1 s).
            assert st["min_index_waits"] == 4 and st["min_index_behind"] == 0, st

    asyncio.run(main())


def test_the_checker_catches_a_read_that_ignores_min_index(netns_cluster: Callable[..., Any]) -> None:
    """The planted bug of a follower that ignores min_index, played by a read that sends none: on a follower
    cut off from its leader it misses an append acknowledged before it was sent, and the linearizability
    checker (quorumlog.lincheck) says so. The same read with the writer's min_index waits, and once the
    follower is healed answers a history the checker accepts."""
    from quorumlog import lincheck as lc
    from quorumlog.entry import decode_entries

    c, net = netns_cluster(raft=PATIENT_RAFT)

    async def main() -> None:
        async with AsyncClient(c.endpoints, secret=c.secret, retry_timeout=30) as probe:
            lead, f, _other = await _roles(c, probe)
            addr = c.nodes[f].address
            cut_off(net, f)
            try:
                async with AsyncClient(c.nodes[lead].address, secret=c.secret, retry_timeout=30) as w:
                    t0 = time.monotonic()
                    last = (await w.append_many([b"x0", b"x1"]))[-1].index
                    t1 = time.monotonic()
                    values = ("g0", 0, 1000, 1 << 20, False)  # (group, from, max entries, max bytes, control)
                    t2 = time.monotonic()
                    stale = await raw(probe, addr, Op.READ, READ_REQUEST, READ_RESPONSE, *values)
                    t3 = time.monotonic()
                    waiting = asyncio.ensure_future(raw(probe, addr, Op.READ, READ_REQUEST, READ_RESPONSE,
                                                        *values, w.seen_index()))
                    t4 = time.monotonic()
                    await asyncio.sleep(0.1)
            finally:
                cut_off(net, f, cut=False)
            fresh = await waiting
            t5 = time.monotonic()
        assert w.seen_index() == last

        def history(data: Any, call: float, ret: float) -> list[lc.Operation]:
            read = [bytes(e.body) for e in decode_entries(data, 1 << 20)]
            return [lc.append("w", t0, t1, [b"x0", b"x1"], 0), lc.read("r", call, ret, 0, read, limit=1000)]

        caught = lc.check(history(stale.entries, t2, t3))
        assert not caught.ok and "read" in caught.report, caught.report
        assert lc.check(history(fresh.entries, t4, t5)).ok

    asyncio.run(main())
