"""Wire-layer throughput over loopback: one-way frames/s and MiB/s, single vs joined writes, and
request/response round trips per second with N in flight. Server and client run in separate processes.

    python benchmarks/net_bench.py [--seconds 2] [--size 1024] [--inflight 1,16,256] [--no-uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
from multiprocessing.connection import Connection as Pipe
from typing import Any

from quorumlog.net import Connection, Frame, Op, connect, serve
from quorumlog.net.frames import ONEWAY
from quorumlog.net.loop import loop_factory, run

CLUSTER = "bench"
MiB = 1024 * 1024


def _server_main(pipe: Pipe, use_uvloop: bool) -> None:
    async def main() -> None:
        received = [0, 0]  # frames, body bytes

        def handler(conn: Connection, f: Frame) -> bytes | None:
            if f.kind == ONEWAY:
                received[0] += 1
                received[1] += len(f.body)
                return None
            if f.op == Op.STATUS:  # report and reset the one-way counters
                n, b = received
                received[0] = received[1] = 0
                return b"%d %d" % (n, b)
            return bytes(f.body)

        server = await serve("127.0.0.1", 0, handler, cluster=CLUSTER, max_inflight=1 << 20)
        pipe.send(server.port)
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)  # wait for "stop"
        await server.close()

    run(main(), use_uvloop=use_uvloop)


async def _oneway(conn: Connection, size: int, per_write: int, seconds: float) -> tuple[float, float]:
    body = b"x" * size
    sent = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(256 // per_write or 1):
            for _ in range(per_write):
                conn.send(Op.APPEND, body)
            conn.flush()  # one transport.write per `per_write` frames
            sent += per_write
        await conn.drain()
        await asyncio.sleep(0)
    # The server answers STATUS only after every earlier frame on this connection was handled.
    reply = await conn.request(Op.STATUS, b"", timeout=60)
    elapsed = time.perf_counter() - start
    n, nbytes = map(int, bytes(reply.body).split())
    assert n == sent, (n, sent)
    return n / elapsed, nbytes / elapsed / MiB


async def _round_trips(conn: Connection, size: int, inflight: int, seconds: float) -> tuple[float, float]:
    body = b"x" * size
    done = 0
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await conn.request(Op.GET, body, timeout=30)
            latencies.append(time.perf_counter() - t)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return done / elapsed, latencies[len(latencies) // 2] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each measurement")
    ap.add_argument("--size", type=int, default=1024, help="body bytes per frame")
    ap.add_argument("--inflight", default="1,16,256", help="requests in flight for the round-trip test")
    ap.add_argument("--no-uvloop", action="store_true", help="use the asyncio loop even if uvloop is there")
    args = ap.parse_args()
    use_uvloop = not args.no_uvloop
    loop_name = "uvloop" if use_uvloop and loop_factory() is not asyncio.new_event_loop else "asyncio"

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_server_main, args=(child, use_uvloop), daemon=True)
    proc.start()
    try:
        if not parent.poll(30):
            raise SystemExit("server did not start")
        port = parent.recv()

        async def client() -> list[tuple[str, Any]]:
            conn = await connect("127.0.0.1", port, cluster=CLUSTER)
            out: list[tuple[str, Any]] = []
            for per_write in (1, 64):
                fps, mibs = await _oneway(conn, args.size, per_write, args.seconds)
                out.append((f"one-way {args.size} B frames, {per_write:>2} per write",
                            f"{fps:>12,.0f} frames/s {mibs:>9,.1f} MiB/s"))
            for n in (int(x) for x in args.inflight.split(",")):
                rps, p50 = await _round_trips(conn, args.size, n, args.seconds)
                out.append((f"request/response {args.size} B, {n:>4} in flight",
                            f"{rps:>12,.0f} round trips/s  p50 {p50:,.0f} us"))
            conn.close()
            await conn.wait_closed()
            return out

        print(f"quorumlog net bench: loopback, loop={loop_name}, {args.seconds:g} s per line")
        for name, figures in run(client(), use_uvloop=use_uvloop):
            print(f"  {name:<42} {figures}")
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)


if __name__ == "__main__":
    main()
