"""Where one append's time goes, hop by hop.

A local 3-node cluster whose node processes, and this client, note the time of every frame read and
written, every segment write and every fdatasync (CLOCK_MONOTONIC, which the processes share); then one
append at a time, and the median of each hop: client -> leader -> both followers -> fdatasync -> acks ->
leader -> client. What lies between two marks is Python (and, after a send, the wake-up of whoever it
woke); docs/performance.md reads it. With --steps the nodes also mark the entry and exit of each step
inside a hop (about 1 µs a mark), and each node's share is shown from the frame that starts it.

    python benchmarks/hop_trace.py [--size 100] [--count 3000] [--steps]
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import bisect
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRACE_ENV = "QUORUMLOG_HOP_TRACE"  # where a traced process writes its marks at exit
STEPS_ENV = "QUORUMLOG_HOP_STEPS"  # set: the node processes mark the steps below too
STEPS = [  # (module, class, method): "e:Class.method" at entry, "x:Class.method" at exit
    ("quorumlog.server.node", "NodeServer", "_handle"), ("quorumlog.server.node", "NodeServer", "_peer_frame"),
    ("quorumlog.server.group", "Group", "process"), ("quorumlog.server.group", "Group", "_start_flush"),
    ("quorumlog.server.group", "Group", "_complete_append"), ("quorumlog.raft.node", "RaftNode", "propose_many"),
    ("quorumlog.raft.node", "RaftNode", "step_batch"), ("quorumlog.raft.node", "RaftNode", "on_flushed"),
    ("quorumlog.raft.pusher", "Leader", "dispatch_all"), ("quorumlog.raft.pusher", "Leader", "on_response"),
    ("quorumlog.store.file_store", "FileStore", "append"),
    ("quorumlog.store.file_store", "FileStore", "append_encoded_metas"),
    ("quorumlog.store.file_store", "FileStore", "flush"), ("quorumlog.server.peers", "PeerLinks", "send"),
]


def install(out_dir: str, steps: bool = False) -> None:
    """Note the marks in this process (wrapping four methods, and with `steps` those of STEPS) and write them
    to `out_dir` at exit."""
    from quorumlog.net.connection import Connection
    from quorumlog.store.segments import SegmentList
    from quorumlog.store.vfs import OsFiles

    marks: list[tuple[int, str]] = []
    clock = time.perf_counter_ns

    def wrap(cls: Any, name: str, tag: Callable[..., str | None]) -> None:
        inner = getattr(cls, name)

        def traced(self: Any, *args: Any) -> Any:
            t = tag(self, *args)
            if t is not None:
                marks.append((clock(), t))
            return inner(self, *args)

        setattr(cls, name, traced)

    def side(conn: Any) -> str:
        return "peer" if conn.peer_id and conn.peer_id.startswith("n") else "client"

    wrap(Connection, "data_received", lambda c, d: "recv-" + side(c))
    wrap(Connection, "flush", lambda c: "send-" + side(c) if len(c._writer) else None)
    wrap(SegmentList, "write", lambda s, off, d: "write-" + os.path.basename(s.dir))
    fdatasync = OsFiles.fdatasync

    def traced_fdatasync(self: OsFiles, fd: int) -> None:
        marks.append((clock(), "fsync"))
        fdatasync(self, fd)
        marks.append((clock(), "fsynced"))

    OsFiles.fdatasync = traced_fdatasync  # type: ignore[method-assign]
    for module, cls_name, name in STEPS if steps else ():
        cls = getattr(importlib.import_module(module), cls_name)
        setattr(cls, name, _marked(getattr(cls, name), f"{cls_name}.{name}", marks, clock))

    def dump() -> None:
        with open(os.path.join(out_dir, f"{os.getpid()}.marks"), "w") as f:
            f.writelines(f"{t} {tag}\n" for t, tag in marks)

    atexit.register(dump)


def _marked(inner: Callable[..., Any], tag: str, marks: list[tuple[int, str]],
            clock: Callable[[], int]) -> Callable[..., Any]:
    def marked(self: Any, *args: Any, **kwargs: Any) -> Any:
        marks.append((clock(), "e:" + tag))
        try:
            return inner(self, *args, **kwargs)
        finally:
            marks.append((clock(), "x:" + tag))
    return marked


def _serve() -> None:
    """A node process: install the marks, then `quorumlog serve` with the arguments given."""
    install(os.environ[TRACE_ENV], bool(os.environ.get(STEPS_ENV)))
    from quorumlog.cli import main

    sys.exit(main(sys.argv[1:]))


def _load(path: Path) -> tuple[list[int], list[str]]:
    times, tags = [], []
    for line in path.read_text().splitlines():
        t, tag = line.split()
        times.append(int(t))
        tags.append(tag)
    return times, tags


class _Marks:
    def __init__(self, path: Path) -> None:
        self.times, self.tags = _load(path)

    def next(self, t: int | None, tag: str) -> int | None:
        """The first mark `tag` at or after `t`."""
        if t is None:
            return None
        i = bisect.bisect_left(self.times, t)
        while i < len(self.times):
            if self.tags[i] == tag:
                return self.times[i]
            i += 1
        return None


HOPS = [
    ("client sends", "leader reads", "c.send", "L.recv"),
    ("leader reads", "leader writes its segment", "L.recv", "L.write"),
    ("leader writes", "leader sends the first push", "L.write", "L.push1"),
    ("first push", "second push", "L.push1", "L.push2"),
    ("leader's fdatasync", "its end", "L.fsync", "L.fsynced"),
    ("first push sent", "a follower reads it", "L.push1", "F.recv"),
    ("follower reads", "follower writes its segment", "F.recv", "F.write"),
    ("follower writes", "follower's fdatasync starts", "F.write", "F.fsync"),
    ("follower's fdatasync", "its end", "F.fsync", "F.fsynced"),
    ("fdatasync done", "follower sends its ack", "F.fsynced", "F.ack"),
    ("first ack sent", "leader reads it", "F.ack", "L.ackrecv"),
    ("leader reads the ack", "leader answers", "L.ackrecv", "L.answer"),
    ("leader answers", "client reads", "L.answer", "c.recv"),
    ("client reads", "client sends the next", "c.recv", "c.next"),
]


def analyse(client: _Marks, leader: _Marks, followers: list[_Marks]) -> list[tuple[str, float, float]]:
    cycles = []
    sends = [t for t, tag in zip(client.times, client.tags, strict=True) if tag == "send-peer"]
    for t0 in sends[len(sends) // 10:-10]:  # the first tenth warms up
        m: dict[str, int | None] = {"c.send": t0}
        m["L.recv"] = leader.next(t0, "recv-client")
        m["L.write"] = leader.next(m["L.recv"], "write-data")
        m["L.push1"] = leader.next(m["L.write"], "send-peer")
        m["L.push2"] = leader.next((m["L.push1"] or 0) + 1, "send-peer")
        m["L.fsync"] = leader.next(m["L.write"], "fsync")
        m["L.fsynced"] = leader.next(m["L.fsync"], "fsynced")
        fs = []
        for f in followers:
            r = f.next(m["L.push1"], "recv-peer")
            w = f.next(r, "write-data")
            s = f.next(w, "fsync")
            e = f.next(s, "fsynced")
            a = f.next(e, "send-peer")
            fs.append((a or 1 << 62, r, w, s, e, a))
        first = min(fs)  # the follower whose ack came first
        m["F.recv"], m["F.write"], m["F.fsync"], m["F.fsynced"], m["F.ack"] = first[1:]
        m["L.ackrecv"] = leader.next(m["F.ack"], "recv-peer")
        m["L.answer"] = leader.next(m["L.ackrecv"], "send-client")
        m["c.recv"] = client.next(m["L.answer"], "recv-peer")
        m["c.next"] = client.next(m["c.recv"], "send-peer")
        if None in m.values():
            continue
        cycles.append(m)
    rows = []
    for start, end, ka, kb in HOPS:
        d = [(c[kb] - c[ka]) / 1000 for c in cycles]  # type: ignore[operator]
        rows.append((f"{start} -> {end}", statistics.median(d), statistics.quantiles(d, n=10)[8]))
    total = [(c["c.next"] - c["c.send"]) / 1000 for c in cycles]  # type: ignore[operator]
    rows.append(("one append, send to next send", statistics.median(total), statistics.quantiles(total, n=10)[8]))
    return rows


SECTIONS = [  # (heading, node, start mark, end mark, a mark that drops the cycle)
    ("the leader, from the client's frame to its own fdatasync", "leader", "recv-client", "fsync", None),
    ("the leader, from the ack that commits to the answer", "leader", "recv-peer", "send-client", "recv-client"),
    ("a follower, from the push to its ack", "follower", "recv-peer", "send-peer", None),
]


def steps(m: _Marks, start: str, end: str, abort: str | None) -> list[tuple[str, float]]:
    """Each mark's median offset (µs) from `start` in the cycles from a `start` to the next `end` (the first
    tenth warms up; a cycle that meets `abort` first is dropped), for the marks in half the cycles or more
    (a follower's heartbeats start cycles too, with fewer marks)."""
    cycles: list[dict[str, float]] = []
    t0: int | None = None
    seen: dict[str, float] = {}
    for t, tag in zip(m.times, m.tags, strict=True):
        if t0 is None:
            if tag == start:
                t0, seen = t, {}
        elif tag == abort:
            t0 = None
        else:
            seen.setdefault(tag, (t - t0) / 1000)
            if tag == end:
                cycles.append(seen)
                t0 = None
    cycles = cycles[len(cycles) // 10:]
    offsets: dict[str, list[float]] = {}
    for c in cycles:
        for tag, v in c.items():
            offsets.setdefault(tag, []).append(v)
    rows = [(tag, statistics.median(v)) for tag, v in offsets.items() if len(v) >= 0.5 * len(cycles)]
    return sorted(rows, key=lambda r: r[1])


async def _appends(endpoints: str, size: int, count: int) -> None:
    from quorumlog.client import AsyncClient

    async with AsyncClient(endpoints) as c:
        body = b"x" * size
        for _ in range(count):
            await c.append(body)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    p.add_argument("--count", type=int, default=3000, help="appends, one at a time (default 3000)")
    p.add_argument("--steps", action="store_true", help="also each node's steps inside its hops")
    args = p.parse_args()
    from quorumlog.client import AsyncClient
    from quorumlog.net.loop import loop_factory
    from quorumlog.server.cluster import LocalCluster

    root = Path(tempfile.mkdtemp(prefix="quorumlog-hops-"))
    marks = root / "marks"
    marks.mkdir()
    here = str(Path(__file__).resolve().parent)

    class Traced(LocalCluster):
        def command(self, node: Any) -> list[str]:
            code = f"import sys; sys.path.insert(0, {here!r}); import hop_trace; hop_trace._serve()"
            return [sys.executable, "-c", code, "serve", "--config", str(node.config_path), "--log-level", "WARNING"]

    os.environ[TRACE_ENV] = str(marks)
    if args.steps:
        os.environ[STEPS_ENV] = "1"
    cluster = Traced(root / "cluster", 3, 1, secret=None)
    try:
        cluster.start()

        async def leader() -> str:
            async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
                await c.append(b"warm-up")
                return (await c.metadata(with_nodes=False)).leader or ""

        with asyncio.Runner(loop_factory=loop_factory()) as r:
            leader_id = r.run(leader())
        install(str(marks))
        with asyncio.Runner(loop_factory=loop_factory()) as r:
            r.run(_appends(cluster.endpoints, args.size, args.count))
        pids = {n.node_id: n.proc.pid for n in cluster.nodes if n.proc is not None}
    finally:
        cluster.stop()
    try:
        atexit._run_exitfuncs()  # this client's marks, now
        nodes = {nid: _Marks(marks / f"{pid}.marks") for nid, pid in pids.items()}
        followers = [m for nid, m in nodes.items() if nid != leader_id]
        rows = analyse(_Marks(marks / f"{os.getpid()}.marks"), nodes[leader_id], followers)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"one append at a time, {args.size} B, 3 nodes; median and p90 in µs:")
    for name, p50, p90 in rows:
        print(f"  {name:60s} {p50:8.1f} {p90:8.1f}")
    if args.steps:
        print("inside the nodes: each mark's median µs from the frame that starts the cycle (e: entry, x: exit):")
        for heading, who, start, end, abort in SECTIONS:
            print(f"{heading}:")
            for tag, at in steps(nodes[leader_id] if who == "leader" else followers[0], start, end, abort):
                print(f"    {at:8.1f}  {tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
