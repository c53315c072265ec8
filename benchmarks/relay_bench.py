"""The event-loop floor under one replicated append: a bare relay in quorumlog's topology.

A client (blocking socket) sends a message to a "leader" process; the leader forwards it to two
"follower" processes; the first echo back is answered to the client. Every process is Python on uvloop
(quorumlog's loop) doing nothing else: no decoding, no store, no fsync. The p50 is what four processes,
three hops and two cores cost before quorumlog does any work; compare it with `quorumlog bench --local 3
--flush async --batch 1` (docs/performance.md, "where one append's time goes").

    python benchmarks/relay_bench.py [--size 100] [--count 5000]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys

from quorumlog.commands.bench import round_trip

_NODE = r"""
import asyncio, socket, sys
from quorumlog.net.loop import loop_factory

async def follower() -> None:
    class Echo(asyncio.Protocol):
        def connection_made(self, t): self.t = t
        def data_received(self, d): self.t.write(d)
    srv = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

async def leader(ports: list[int]) -> None:
    loop = asyncio.get_running_loop()
    waiting: dict[bytes, asyncio.Transport] = {}  # message id -> the client waiting for its first echo
    class FromFollower(asyncio.Protocol):
        def data_received(self, d):
            client = waiting.pop(d[:8], None)
            if client is not None:
                client.write(d)
    followers = [(await loop.create_connection(FromFollower, "127.0.0.1", p))[0] for p in ports]
    for f in followers:
        f.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    class FromClient(asyncio.Protocol):
        def connection_made(self, t): self.t = t
        def data_received(self, d):
            waiting[d[:8]] = self.t
            for f in followers:
                f.write(d)
    srv = await loop.create_server(FromClient, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

role = sys.argv[1]
coro = follower() if role == "follower" else leader([int(p) for p in sys.argv[2:]])
with asyncio.Runner(loop_factory=loop_factory()) as r:
    r.run(coro)
"""


def _start(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", _NODE, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def relay(size: int, count: int) -> list[float]:
    """Round-trip times (seconds) of `count` messages of `size` bytes, one at a time."""
    procs: list[subprocess.Popen[str]] = []
    try:
        ports = []
        for _ in range(2):
            proc, port = _start("follower")
            procs.append(proc)
            ports.append(port)
        proc, port = _start("leader", *map(str, ports))
        procs.append(proc)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pad = b"x" * max(0, size - 8)
            return [round_trip(s, i.to_bytes(8, "big") + pad) for i in range(count)]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=100, help="message bytes (at least 8; default 100)")
    p.add_argument("--count", type=int, default=5000, help="round trips, one at a time (default 5000)")
    args = p.parse_args()
    lat = sorted(relay(max(8, args.size), args.count)[args.count // 10:])  # the first tenth warms up
    q = statistics.quantiles(lat, n=100)
    print(f"relay client -> leader -> 2 followers -> leader -> client, {args.size} B: "
          f"p50 {statistics.median(lat) * 1e3:.3f} ms, p90 {q[89] * 1e3:.3f} ms, p99 {q[98] * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
