"""Random faults on every node of a real cluster while idempotent writers record a history; then every fault
healed, and the outcome checked: nothing acknowledged lost or moved, nothing written twice or out of real-time
order (history.py), every replica's committed log the same, every store intact (`quorumlog check-store`).

Unlike the leader-only nemesis of the exactly-once and controller tests, a fault here hits any node, in any
role, at any time, and faults overlap (two nodes down: no quorum for a while):
- kill: SIGKILL, restarted a moment later;
- pause: SIGSTOP, then SIGCONT (a paused leader comes back believing it leads);
- wipe: SIGKILL, every store of the node deleted, restarted empty: a replaced disk, only while every
  other node runs and holds the whole committed log, and in primary/backup mode is recorded in sync (one
  lost disk at a time);
- transfer (Raft only): leadership handed to a random node;
- partition (with --net: the nodes in network namespaces, netns.py): a node cut off from both others, two
  nodes cut from each other, or one that can no longer send to another, healed 0.5-3 s later. The clients
  still reach every node, so a cut-off leader goes on receiving appends;
- full (with --disks: each node's data group on a tmpfs of its own): a file takes that file system past
  disk_full_ratio, or to its brim (every block: ENOSPC wherever the store has not allocated ahead), and is
  deleted 0.5-3 s later;
- corrupt (with --corrupt): SIGKILL, one bit flipped anywhere in the written part of the data group's
  log, restarted: bit rot at rest, on one node at a time, while every other holds the committed log;
- rot (with --corrupt): one bit flipped in an older segment of a running node's log, for its background
  scrub (a pass every 2 s here) to find; one damaged node at a time, as for corrupt.

Used by tests/server/test_server_chaos.py for a short run; for a long hunt:

    python -m tests.server.chaos --seconds 600 --seed 7 [--mode pb] [--net] [--disks] [--corrupt]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorumlog.client import AsyncClient
from quorumlog.errors import QuorumLogError
from quorumlog.server.cluster import LocalCluster

from .conftest import (
    FAST_RAFT,
    SMALL_STORE,
    await_until,
    check_store,
    committed_entries,
    fill_disk,
    fill_to_the_brim,
    statuses,
    tmpfs,
)
from .history import EndQuery, Op, check_history, record_appends, record_ends
from .netns import NetnsCluster, Network

# Each node's data group's tmpfs with --disks: room for a minute of chaos, small enough to fill in a call.
DISK_MB = 256

# Primary/backup with a controller (automatic failover), sync acks, fast failure detection.
PB_HA = {"ack": "sync", "controller": "ctl", "ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 800,
         "failover_timeout_ms": 800}


@dataclass
class Nemesis:
    cluster: LocalCluster
    rng: random.Random
    raft: bool
    net: Network | None = None
    disks: list[Path] | None = None  # node i's data group's file system (a tmpfs), for the full fault
    corrupt: bool = False
    done: list[str] = field(default_factory=list)
    blocked: set[tuple[int, int]] = field(default_factory=set)  # (i, j): what i sends to j is dropped
    partitioned = False
    filled = False
    admin: AsyncClient | None = None  # (the run's, once the cluster is up)
    down: set[int] = field(default_factory=set)  # killed or paused right now
    wiped: set[int] = field(default_factory=set)  # restarted empty, maybe not caught up yet

    async def run(self, stop: float) -> None:
        """Start a fault every 0.5-2 s until `stop` (loop time); each heals itself after a while."""
        loop = asyncio.get_running_loop()
        faults: list[asyncio.Task[None]] = []
        try:
            while loop.time() < stop:
                await asyncio.sleep(self.rng.uniform(0.5, 2.0))
                if loop.time() >= stop:
                    break
                faults.append(asyncio.ensure_future(self._one()))
        finally:
            await asyncio.gather(*faults, return_exceptions=False)

    async def _one(self) -> None:
        n = len(self.cluster.nodes)
        kinds = ["kill", "pause", "wipe"] + (["transfer"] if self.raft else []) + (["partition"] if self.net else [])
        kinds += (["full"] if self.disks else []) + (["corrupt", "rot"] if self.corrupt else [])
        kind = self.rng.choice(kinds)
        if self.net is not None and not self.partitioned:
            kind = "partition"  # the first fault, so that even a short run has one
        elif self.disks is not None and not self.filled:
            kind = "full"
        i = self.rng.randrange(n)
        if kind == "partition":
            await self._partition(i)
            return
        if kind == "full":
            await self._fill(i)
            return
        if kind == "rot":
            await self._rot(i)
            return
        if kind == "transfer":
            target = self.cluster.nodes[i].node_id
            try:
                assert self.admin is not None
                await asyncio.wait_for(self.admin.transfer_leader(target), 5)
                self.done.append(f"transfer to {target}")
            except (TimeoutError, QuorumLogError, OSError) as e:
                self.done.append(f"transfer to {target} refused: {type(e).__name__}")
            return
        if i in self.down or len(self.down) >= n - 1:  # never every node at once: something must lead
            return
        if kind in ("wipe", "corrupt") and (self.down or self.wiped or not await self._all_caught_up()):
            kind = "kill"
        self.down.add(i)
        node = self.cluster.nodes[i]
        try:
            if kind == "pause":
                assert node.proc is not None
                node.proc.send_signal(signal.SIGSTOP)
                try:
                    await asyncio.sleep(self.rng.uniform(0.3, 2.5))
                finally:
                    node.proc.send_signal(signal.SIGCONT)
            else:
                self.cluster.kill(i, signal.SIGKILL)
                if kind == "wipe":  # every group's store (the controller's too): a new disk
                    for d in node.data_dir.iterdir():
                        if d.is_dir():
                            shutil.rmtree(d, ignore_errors=True)
                    self.wiped.add(i)
                if kind == "corrupt":
                    where = flip_a_bit(node.data_dir / "g0" / node.node_id / "data", self.rng)
                    kind = f"corrupt ({where})"
                    self.wiped.add(i)
                await asyncio.sleep(self.rng.uniform(0.2, 2.0))
                self.cluster.start(i)
            self.done.append(f"{kind} {node.node_id}")
        finally:
            self.down.discard(i)
        if kind == "wipe" or kind.startswith("corrupt"):
            await self._until_caught_up(i)

    async def _partition(self, i: int) -> None:
        assert self.net is not None
        n = len(self.cluster.nodes)
        j = self.rng.choice([k for k in range(n) if k != i])
        shape = self.rng.choice(["isolate", "cut", "one way"])
        if shape == "isolate":
            routes = {(a, b) for a in range(n) for b in range(n) if a != b and i in (a, b)}
        else:
            routes = {(i, j), (j, i)} if shape == "cut" else {(i, j)}
        if routes & self.blocked:
            return  # overlapping partitions would heal each other's routes
        self.partitioned = True
        self.blocked |= routes
        try:
            for a, b in routes:
                self.net.set_route(a, b, blocked=True)
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        finally:
            for a, b in routes:
                self.net.set_route(a, b, blocked=False)
            self.blocked -= routes
        nodes = self.cluster.nodes
        what = nodes[i].node_id if shape == "isolate" else f"{nodes[i].node_id} {nodes[j].node_id}"
        self.done.append(f"partition ({shape}) {what}")

    async def _fill(self, i: int) -> None:
        assert self.disks is not None
        disk = self.disks[i]
        filler = disk / ".filler"  # beside the store directory, on its file system
        if filler.exists():
            return
        self.filled = True
        brim = self.rng.random() < 0.5
        try:
            if brim:
                fill_to_the_brim(filler)
            else:  # past disk_full_ratio (0.90): 98 % used
                u = shutil.disk_usage(disk)
                try:
                    await fill_disk(filler, max(u.free - int(u.total * 0.02), 1))
                except OSError as e:  # the nodes wrote more meanwhile: take the rest, to the brim
                    if e.errno != errno.ENOSPC:
                        raise
                    brim = True
                    fill_to_the_brim(filler)
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        finally:
            filler.unlink(missing_ok=True)  # (a wipe may have deleted it)
        self.done.append(f"full ({'brim' if brim else 'past the ratio'}) {self.cluster.nodes[i].node_id}")

    async def _rot(self, i: int) -> None:
        """Flip a bit under running node i (bit rot nobody reads); wait for its scrub to find it (bounded: the
        bit may land where nothing is checked, in a segment's blank end or past the committed entries)."""
        if self.down or self.wiped or not await self._all_caught_up():  # every node up and whole
            return
        node = self.cluster.nodes[i]
        self.wiped.add(i)  # one damaged copy at a time
        admin = self.admin
        assert admin is not None

        async def found() -> int:
            s = (await statuses(admin, self.cluster)).get(node.node_id, {})
            return int(s.get("scrub", {}).get("damaged", 0))

        before = await found()
        where = flip_a_bit(node.data_dir / "g0" / node.node_id / "data", self.rng, older=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while loop.time() < deadline and await found() <= before:
            await asyncio.sleep(0.3)
        self.done.append(f"rot ({where}{'' if await found() > before else ', not found'}) {node.node_id}")
        await self._until_caught_up(i)

    async def _all_caught_up(self) -> bool:
        assert self.admin is not None
        st = await statuses(self.admin, self.cluster)
        leaders = [s for s in st.values() if s["role"] == "leader"]
        # Primary/backup: every other node recorded in sync too. A lost disk the record names as the only
        # copy waits for an operator by design (docs/replication.md), as the simulator's wipes leave out.
        in_sync = self.raft or (len(leaders) == 1 and len(leaders[0].get("in_sync", ())) == len(st) - 1)
        return (len(st) == len(self.cluster.nodes) and len(leaders) == 1 and in_sync
                and all(not s["recovering"] and not s["joining"] and s["end_index"] >= leaders[0]["committed_index"]
                        for s in st.values()))

    async def _until_caught_up(self, i: int) -> None:
        """Keep `i` counted as wiped (no second wipe) until it holds the leader's committed log again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while loop.time() < deadline:
            await asyncio.sleep(0.5)
            if await self._all_caught_up():
                break
        self.wiped.discard(i)


def flip_a_bit(data: Path, rng: random.Random, older: bool = False) -> str:
    """Flip one random bit in the written part (up to the last non-zero byte) of a random data segment (with
    `older`, not the newest while there are others: under a running node, committed entries)."""
    written = []
    for seg in sorted(data.glob("[0-9]*")):
        used = len(seg.read_bytes().rstrip(b"\0"))
        if used:
            written.append((seg, used))
    if older and len(written) > 1:
        written.pop()
    if not written:
        return "nothing written"
    seg, used = rng.choice(written)
    at, bit = rng.randrange(used), rng.randrange(8)
    with open(seg, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ (1 << bit)]))
    return f"{seg.name} byte {at} bit {bit}"


async def record_batches(c: AsyncClient, name: str, stop: float, ops: list[Op], rng: random.Random) -> None:
    """Like record_appends, in batches of 1-20 (one request, one wait, one outcome for the batch)."""
    n = 0
    loop = asyncio.get_running_loop()
    while loop.time() < stop:
        batch = [Op(f"{name}-{n + k}".encode(), time.monotonic()) for k in range(rng.randint(1, 20))]
        n += len(batch)
        ops.extend(batch)
        try:
            results = await c.append_many([op.body for op in batch])
            for op, r in zip(batch, results, strict=True):
                op.index = r.index
        except QuorumLogError as e:
            for op in batch:
                op.error = type(e).__name__
        t = time.monotonic()
        for op in batch:
            op.completed = t


async def _committed(addr: str, begin: int, secret: str | None) -> list[tuple[int, bytes]]:
    """committed_entries, asked again (bounded) while a read finds a damaged entry the node is fetching again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        try:
            return await committed_entries(addr, begin, secret=secret)
        except QuorumLogError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _settled(admin: AsyncClient, cluster: LocalCluster, raft: bool) -> str | None:
    """The leader's id once one leads, every node answers and holds the leader's whole log, committed."""
    st = await statuses(admin, cluster)
    leaders = [n for n, s in st.items() if s["role"] == "leader" and (raft or s.get("confirmed"))]
    if len(st) != len(cluster.nodes) or len(leaders) != 1:
        return None
    end = st[leaders[0]]["end_index"]
    if any(s["committed_index"] != end or s["end_index"] != end or s["recovering"] for s in st.values()):
        return None
    return leaders[0]


async def run_chaos(root: Path, seconds: float, seed: int, raft: bool = True, writers: int = 3,
                    net: Network | None = None, disks: bool = False, nodes: int = 3,
                    corrupt: bool = False) -> dict[str, Any]:
    """One chaos run in `root` (with `net`, created: the nodes in its namespaces, and partitions; with
    `disks`, each node's data group on a tmpfs of its own, and full disks); raises AssertionError on any
    violation; returns a summary."""
    rng = random.Random(seed)
    # The background scrub runs throughout: a pass every 2 s, fast enough to cover a run's log.
    kwargs: dict[str, Any] = {"raft": FAST_RAFT, "store": SMALL_STORE, "log_level": "INFO",
                              "node": {"scrub_interval_hours": 2 / 3600, "scrub_bytes_per_s": 32 << 20}}
    if not raft:
        kwargs.update(replication="primary-backup", ha=PB_HA)
    if net is None:
        cluster: LocalCluster = LocalCluster(root, nodes, 1, **kwargs)
    else:  # beyond loopback: with the cluster secret
        assert len(net.nodes) == nodes
        cluster = NetnsCluster(root, nodes, 1, secret=os.urandom(18).hex(),
                               hosts=[net.host(i) for i in range(nodes)], namespaces=net.nodes, **kwargs)
    mounts = [n.data_dir / "g0" for n in cluster.nodes] if disks else []
    with contextlib.ExitStack() as unmount:
        for m in mounts:
            unmount.enter_context(tmpfs(m, DISK_MB))
        try:
            nemesis = Nemesis(cluster, rng, raft, net, mounts or None, corrupt)
            return await _run(cluster, seconds, seed, raft, writers, nemesis)
        except AssertionError:
            cluster.stop(timeout=10)
            for m in mounts:  # the stores, before their file systems go (for --keep)
                shutil.copytree(m, m.parent / f"{m.name}.kept", symlinks=True)
            raise
        finally:
            cluster.stop(timeout=10)


async def _run(cluster: LocalCluster, seconds: float, seed: int, raft: bool, writers: int,
               nemesis: Nemesis) -> dict[str, Any]:
    secret = cluster.secret
    ops: list[Op] = []
    ends: list[EndQuery] = []
    cluster.start()
    async with AsyncClient(cluster.endpoints, secret=secret) as admin:
        nemesis.admin = admin
        await await_until(lambda: _settled(admin, cluster, raft), 30, "a first leader")
        clients = [AsyncClient(cluster.endpoints, secret=secret, retry_timeout=30) for _ in range(writers)]
        try:
            stop = asyncio.get_running_loop().time() + seconds
            tasks = [record_appends(c, f"w{k}a", stop, ops) for k, c in enumerate(clients)]
            tasks += [record_batches(c, f"w{k}b", stop, ops, random.Random(seed * 100 + k))
                      for k, c in enumerate(clients)]
            # A reader asks random nodes for the linearizable end throughout (followers forward: docs/replication.md).
            reader = AsyncClient(cluster.endpoints, secret=secret, retry_timeout=5)
            clients.append(reader)
            tasks.append(record_ends(reader, "reader", [n.address for n in cluster.nodes], stop, ends,
                                     random.Random(seed * 100 + 99)))
            await asyncio.gather(nemesis.run(stop), *tasks)
        finally:
            for c in clients:
                await c.close()
        cluster.start()  # every node back (a fault heals itself; this covers one that failed to)
        leader = await await_until(lambda: _settled(admin, cluster, raft), 90,
                                   "one leader, every replica holding its whole log, committed")
        # A full disk past disk_clean_ratio expires old segments, on each node by its own disk: the logs are
        # compared from the latest first index.
        begin = max(s["begin_index"] for s in (await statuses(admin, cluster)).values())
        logs = {}
        for node in cluster.nodes:
            entries = await _committed(node.address, begin, secret)
            logs[node.node_id] = [(i, b) for i, b in entries if b]
        log = logs[leader]
        for nid, other in logs.items():
            assert other == log, f"{nid}'s committed log differs from the leader's ({len(other)} and {len(log)})"
        assert begin == 0 or nemesis.disks, f"entries before {begin} expired"
        summary = check_history(ops, log, begin, ends)
        summary["ends"] = len(ends)
    exits = cluster.stop()
    assert all(code == 0 for code in exits.values()), f"a node did not stop cleanly: {exits}"
    for node in cluster.nodes:
        for g in cluster.group_names:
            check_store(node.data_dir / g / node.node_id)
    crashed = [n.node_id for n in cluster.nodes if "Traceback" in n.log_path.read_text(errors="replace")]
    assert not crashed, f"a traceback in the log of {crashed}"
    summary.update(appends=len(ops), faults=len(nemesis.done), log=len(log),
                   kinds={k: sum(d.startswith(k) for d in nemesis.done)
                          for k in ("kill", "pause", "wipe", "transfer", "partition", "full", "corrupt", "rot")},
                   rot_found=sum(d.startswith("rot") and "not found" not in d for d in nemesis.done))
    return summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", type=int, default=1, help="seeds seed, seed+1, ...")
    p.add_argument("--mode", choices=("raft", "pb"), default="raft")
    p.add_argument("--keep", action="store_true", help="keep the data dirs and logs of a failed run")
    p.add_argument("--net", action="store_true", help="nodes in network namespaces, with partitions (root)")
    p.add_argument("--disks", action="store_true", help="each node's data on a tmpfs, with full disks (root)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--corrupt", action="store_true", help="bit flips in a stopped node's log, and under a running one")
    a = p.parse_args()
    failed = 0
    for seed in range(a.seed, a.seed + a.runs):
        root = Path(tempfile.mkdtemp(prefix=f"quorumlog-chaos-{seed}-"))
        t = time.monotonic()
        net = Network(a.nodes) if a.net else None
        try:
            if net is not None:
                net.create()
            s = asyncio.run(run_chaos(root, a.seconds, seed, raft=a.mode == "raft", net=net, disks=a.disks,
                                      nodes=a.nodes, corrupt=a.corrupt))
            print(f"seed {seed}: ok in {time.monotonic() - t:.0f} s: {s}", flush=True)
            shutil.rmtree(root)
        except AssertionError as e:
            failed += 1
            print(f"seed {seed}: FAILED: {e}", flush=True)
            print(f"  data and logs: {root}" if a.keep else "", flush=True)
            if not a.keep:
                shutil.rmtree(root)
        finally:
            if net is not None:
                net.destroy()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
