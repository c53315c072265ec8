"""The faults of a real deployment, on real node processes: a wiped disk that would vote, expiry followed by
a wiped follower, and a flipped bit in a follower's log. Nothing acknowledged is lost, and no node exits."""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.errors import DiskFullError, QuorumLogError
from quorumlog.server.cluster import LocalCluster

from .conftest import (
    SMALL_STORE,
    await_until,
    committed_entries,
    disk_full_past,
    fill_disk,
    fill_to_the_brim,
    flip_bit,
    make_leader,
    node_index,
    statuses,
    tmpfs,
    tmpfs_unavailable,
    wait_leader,
)


async def _append_all(c: AsyncClient, prefix: str, count: int, batch: int = 200) -> dict[int, bytes]:
    acked: dict[int, bytes] = {}
    for k in range(0, count, batch):
        bodies = [f"{prefix}-{i}".encode() + b"." * 100 for i in range(k, min(count, k + batch))]
        for r, body in zip(await c.append_many(bodies), bodies, strict=True):
            acked[r.index] = body
    return acked


async def _log_of(addr: str, start: int = 0) -> dict[int, bytes]:
    return dict(await committed_entries(addr, start))


def _store_dir(cluster: LocalCluster, node_id: str) -> Any:
    return cluster.nodes[node_index(cluster, node_id)].data_dir / "g0" / node_id


def test_wiped_voter_cannot_elect_a_leader_that_lacks_acknowledged_writes(cluster_factory: Any) -> None:
    """C is down while L and B acknowledge 2,000 appends; B's disk is wiped and B restarts reaching only C
    (L is down). B must not vote, so C cannot lead; once L returns, every acknowledged append is there."""
    cluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            leader = await wait_leader(c, cluster)
            b, cc = [n.node_id for n in cluster.nodes if n.node_id != leader]
            li, bi, ci = (node_index(cluster, x) for x in (leader, b, cc))

            async def all_hold_the_noop() -> bool:
                st = await statuses(c, cluster)
                return len(st) == 3 and all(s["committed_index"] >= 0 for s in st.values())

            # C took part in the group (it holds the first leader's NOOP) before it is cut off.
            await await_until(all_hold_the_noop, 20, "every node to hold the leader's first entry")
            cluster.kill(ci, signal.SIGKILL)
            acked = await _append_all(c, "acked", 2000)
            cluster.kill(bi, signal.SIGKILL)
            shutil.rmtree(_store_dir(cluster, b))
            cluster.kill(li, signal.SIGKILL)
            cluster.start(bi)
            cluster.start(ci)
            # B and C talk for several election timeouts: no leader may appear.
            # B probes C, learns that the group has a log, and joins in recovery: it never votes. Watch
            # until it has joined and for 30 more election timeouts: no leader may appear meanwhile.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            joined_at: float | None = None
            while joined_at is None or loop.time() < joined_at + 3:
                st = await statuses(c, cluster)
                assert not any(s["role"] == "leader" for s in st.values()), st
                if joined_at is None and b in st and not st[b]["joining"] and st[b]["recovering"]:
                    joined_at = loop.time()
                assert joined_at is not None or loop.time() < deadline, f"{b} never joined: {st.get(b)}"
                await asyncio.sleep(0.1)
            cluster.start(li)
            new_leader = await wait_leader(c, cluster, timeout=30)

            async def committed_past_acked() -> bool:
                st = await statuses(c, cluster)
                return st.get(new_leader, {}).get("committed_index", -1) >= max(acked)

            await await_until(committed_past_acked, 30, "the new leader to commit its term's first entry")
            log = await _log_of(cluster.nodes[node_index(cluster, new_leader)].address)
            missing = [i for i, body in acked.items() if log.get(i) != body]
            assert not missing, f"{len(missing)} acknowledged appends lost, first {missing[:5]}"
            # B recovers and counts again.
            await await_until(lambda: _recovered(c, cluster, b), 30, "the wiped node to recover")

    asyncio.run(main())


async def _a_follower_after(c: AsyncClient, cluster: LocalCluster, count: int) -> tuple[str, dict[int, bytes]]:
    """Append `count` entries; a follower of the leader, and what was acknowledged."""
    leader = await wait_leader(c, cluster)
    acked = await _append_all(c, "x", count)
    return next(n.node_id for n in cluster.nodes if n.node_id != leader), acked


async def _recovered(c: AsyncClient, cluster: LocalCluster, node: str) -> bool:
    st = await statuses(c, cluster)
    lead = [s for s in st.values() if s["role"] == "leader"]
    me = st.get(node)
    return bool(lead and me and not me["recovering"] and me["committed_index"] == lead[0]["committed_index"])


@pytest.mark.slow
def test_expiry_then_a_wiped_follower_is_reset_and_the_leader_stays_up(cluster_factory: Any) -> None:
    store = dict(SMALL_STORE, file_reserved_hours=0)
    cluster = cluster_factory(store=store)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            leader = await wait_leader(c, cluster)
            await _append_all(c, "old", 12_000)  # ~1.8 MiB: past one 1 MiB segment

            async def expired_everywhere() -> bool:
                st = await statuses(c, cluster)
                return len(st) == 3 and all(s["begin_index"] > 0 for s in st.values())

            await await_until(expired_everywhere, 40, "segments to expire on every node", interval=0.5)
            follower = next(n.node_id for n in cluster.nodes if n.node_id != leader)
            fi = node_index(cluster, follower)
            cluster.kill(fi, signal.SIGKILL)
            shutil.rmtree(_store_dir(cluster, follower))
            cluster.start(fi)
            acked = await _append_all(c, "new", 500)

            async def reset_and_caught_up() -> bool:
                st = await statuses(c, cluster)
                f, lead = st.get(follower), st.get(leader)
                return bool(f and lead and f["begin_index"] == lead["begin_index"] and not f["recovering"]
                            and f["committed_index"] == lead["committed_index"])

            await await_until(reset_and_caught_up, 40, "the wiped follower to be reset and catch up")
            assert cluster.nodes[node_index(cluster, leader)].alive
            log = await _log_of(cluster.nodes[fi].address, min(acked))
            assert all(log.get(i) == body for i, body in acked.items())

    asyncio.run(main())


def test_bit_flip_in_a_followers_entry_is_repaired_from_its_peers(cluster_factory: Any) -> None:
    cluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            follower, acked = await _a_follower_after(c, cluster, 1000)
            fnode = cluster.nodes[node_index(cluster, follower)]
            await await_until(lambda: _recovered(c, cluster, follower), 20, "the follower to catch up")
            index = max(acked) - 10
            entry = await c.get(index)
            flip_bit(_store_dir(cluster, follower), entry.pos, 48 + 3, 0x10)  # a body bit of a recent, committed entry
            async with AsyncClient(fnode.address) as direct:
                with pytest.raises(QuorumLogError):
                    await direct.get(index)
            await await_until(lambda: _recovered(c, cluster, follower), 30, "the follower to re-fetch")
            async with AsyncClient(fnode.address) as direct:
                assert (await direct.get(index)).body == acked[index]
            assert fnode.alive
            st = await statuses(c, cluster)
            assert st[follower]["end_index"] >= max(acked)

    asyncio.run(main())


@pytest.mark.parametrize("who", ["leader", "follower"])
def test_the_scrub_finds_bit_rot_in_an_entry_nobody_reads_and_the_node_fetches_it_again(cluster_factory: Any,
                                                                                       who: str) -> None:
    """One body bit of an old committed entry flips under a running node. Nothing reads that entry: the
    background scrub (a pass every second here) finds it, the node cuts its log there (a leader first
    steps down) and fetches the rest from its peers, and then holds the acknowledged body again."""
    cluster = cluster_factory(node={"scrub_interval_hours": 1 / 3600})

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            follower, acked = await _a_follower_after(c, cluster, 1000)
            node_id = follower if who == "follower" else await wait_leader(c, cluster)
            node = cluster.nodes[node_index(cluster, node_id)]
            await await_until(lambda: _recovered(c, cluster, node_id), 20, f"the {who} to hold every entry")
            index = min(acked) + 100
            pos = (await c.get(index)).pos  # (the leader's answer: its own copy is read by the scrub alone)
            flip_bit(_store_dir(cluster, node_id), pos, 48 + 5, 0x08)

            async def found_and_fetched_again() -> bool:
                s = (await statuses(c, cluster)).get(node_id)
                return bool(s and s["scrub"]["damaged"] >= 1 and await _recovered(c, cluster, node_id))

            await await_until(found_and_fetched_again, 40, f"the {who}'s scrub to find the damage and re-fetch")
            async with AsyncClient(node.address) as direct:
                assert (await direct.get(index)).body == acked[index]
            log = await _log_of(node.address, min(acked))
            assert all(log.get(i) == body for i, body in acked.items())
            acked.update(await _append_all(c, "after", 100))  # the group goes on
            assert node.alive and all(n.alive for n in cluster.nodes)

    asyncio.run(main())


@pytest.mark.slow
def test_followers_with_full_disks_get_appends_refused_at_once_and_the_nodes_stay_up(cluster_factory: Any) -> None:
    """n1 and n2 count their disks full (disk_full_ratio far below their use): they refuse the leader's
    pushes. A client's appends are then answered DISK_FULL at once, with the followers named, instead
    of each waiting out max_wait_ack_ms, and a transfer to one of them is refused; no node exits."""
    cluster = cluster_factory(start=False)
    for node in cluster.nodes[1:]:
        disk_full_past(node, 0.0001)
    cluster.start()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await make_leader(c, cluster, "n0")
            refusals = 0
            for i in range(5):
                t0 = time.monotonic()
                try:
                    await c.append(f"x{i}".encode())
                except DiskFullError as e:
                    assert "n1" in str(e) and "n2" in str(e), e
                    assert time.monotonic() - t0 < 1.0
                    refusals += 1
                except QuorumLogError:
                    pass  # written before the leader heard of the full disks: it cannot commit
            assert refusals >= 4
            # Nor may leadership go to a node whose disk is full: it could not write its NOOP.
            with pytest.raises(DiskFullError, match="the disk of n1 is full"):
                await c.transfer_leader("n1")
            assert await _is_leader(c, cluster, "n0")
            st = await statuses(c, cluster)  # and the status says so, on the leader and on each of them
            assert list(st["n0"]["peers_disk_full"]) == ["n1", "n2"] and not st["n0"]["disk_full"]
            assert st["n1"]["disk_full"] and st["n2"]["disk_full"]
        assert all(n.alive for n in cluster.nodes)

    asyncio.run(main())


@pytest.mark.slow
def test_a_leader_whose_disk_fills_hands_leadership_to_a_follower_and_writes_go_on(
        cluster_factory: Any, tmp_path: Any) -> None:
    """n0 leads and its followers store its entries; then its disk fills (a file allocated past n0's
    disk_full_ratio, set just above the use of the file system now). The next append is not refused:
    n0 answers LEADER_TRANSFERRING (nothing written), hands leadership to a follower, and the client's
    retry lands there; the group keeps committing with the two nodes that have space."""
    cluster = cluster_factory(start=False)
    usage = shutil.disk_usage(tmp_path)
    ratio = (usage.used + (256 << 20)) / usage.total
    if ratio >= 0.85:
        pytest.skip("the file system is too full to raise its use by 512 MiB")
    disk_full_past(cluster.nodes[0], ratio)
    cluster.start()
    filler = tmp_path / "filler"

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await make_leader(c, cluster, "n0")
            acked = await _append_all(c, "before", 20)
            await fill_disk(filler)
            r = await c.append(b"after the disk filled")  # retried at the new leader, not refused
            acked[r.index] = b"after the disk filled"
            st = await statuses(c, cluster)
            new = next(n for n, doc in st.items() if doc["role"] == "leader")
            assert new in ("n1", "n2") and r.index > max(acked.keys() - {r.index})
            assert st["n0"]["disk_full"] and not st[new]["disk_full"]
            acked.update(await _append_all(c, "at the new leader", 20))
            for i, body in acked.items():
                assert (await c.get(i)).body == body
        assert all(n.alive for n in cluster.nodes)

    try:
        asyncio.run(main())
    finally:
        filler.unlink(missing_ok=True)


async def _is_leader(c: AsyncClient, cluster: LocalCluster, node_id: str) -> bool:
    st = await statuses(c, cluster)
    return st.get(node_id, {}).get("role") == "leader"


def test_a_follower_whose_disk_is_full_to_the_brim_lives_through_an_election(cluster_factory: Any,
                                                                            tmp_path: Any) -> None:
    """n0's data is on a small file system of its own, filled to its last block; then its leader dies. n0's
    new term and vote cannot be written (ENOSPC): it holds what depends on them and tries again, instead of
    failing its store and exiting as it did. With no vote durable nowhere but at n2, no leader can be
    elected; once n0 has room, one is, and every acknowledged append is there."""
    reason = tmpfs_unavailable(tmp_path / "probe")
    if reason:
        pytest.skip(reason)
    cluster = cluster_factory(start=False)
    n0 = cluster.nodes[0]
    with tmpfs(n0.data_dir / "g0", 64):
        filler = n0.data_dir / "g0" / ".filler"
        try:
            cluster.start()

            async def main() -> None:
                async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
                    await make_leader(c, cluster, "n1")
                    acked = await _append_all(c, "before", 20)
                    await await_until(lambda: _holds(c, cluster, "n0", max(acked)), 20, "n0 to hold every entry")
                    fill_to_the_brim(filler)
                    cluster.kill(1)
                    await asyncio.sleep(2.0)  # elections: n0 takes a new term it cannot write
                    assert n0.alive, "n0 exited on its full disk"
                    assert "cannot write the term and vote yet" in n0.log_path.read_text()
                    st = await statuses(c, cluster)
                    assert not any(doc["role"] == "leader" for doc in st.values()), st
                    filler.unlink()
                    acked.update(await _append_all(c, "after", 20))  # retried until a leader is elected
                    cluster.start(1)
                    for i, body in acked.items():
                        assert (await c.get(i)).body == body
                assert all(n.alive for n in cluster.nodes)
                assert "the term and vote are written" in n0.log_path.read_text()

            asyncio.run(main())
        finally:
            cluster.stop(timeout=10)
            filler.unlink(missing_ok=True)


async def _holds(c: AsyncClient, cluster: LocalCluster, node_id: str, index: int) -> bool:
    return (await statuses(c, cluster)).get(node_id, {}).get("end_index", -1) >= index


def test_a_follower_with_a_damaged_header_below_its_checkpoint_starts_and_fetches_it_again(
        cluster_factory: Any) -> None:
    """Bit rot at rest: one bit of an old, committed entry's header flipped while the node was down. Recovery
    checks only what follows the checkpoint, so the node met it rebuilding its producer table and failed to
    start (found by the chaos run with --corrupt). It now cuts its log there, starts, and fetches the rest
    again from its peers."""
    cluster = cluster_factory()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            follower, acked = await _a_follower_after(c, cluster, 3000)
            await await_until(lambda: _recovered(c, cluster, follower), 20, "the follower to catch up")
            index = sorted(acked)[200]  # a request's first entry (the table's read jumps over the others), far
            assert index < 1000  # below the checkpoint, in the first data segment
            entry = await c.get(index)
            i = node_index(cluster, follower)
            assert cluster.kill(i, signal.SIGTERM) == 0
            flip_bit(_store_dir(cluster, follower), entry.pos, 7, 0x40)  # the low byte of the header's entry size
            cluster.start(i)
            await await_until(lambda: _recovered(c, cluster, follower), 30, "the follower to start and re-fetch")
            fnode = cluster.nodes[i]
            async with AsyncClient(fnode.address) as direct:
                for k in (index - 1, index, index + 1, max(acked)):
                    assert (await direct.get(k)).body == acked[k]
            assert fnode.alive and "Traceback" not in fnode.log_path.read_text()

    asyncio.run(main())
