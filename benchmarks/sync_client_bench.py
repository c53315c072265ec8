"""The synchronous Client from several threads beside the AsyncClient, on one local 3-node cluster.

    python benchmarks/sync_client_bench.py [--size 1024] [--seconds 10] [--threads 4] [--batch 256]

Both keep the same number of batches in flight (`--threads` × `--inflight` for the sync Client,
as many tasks for the AsyncClient), each batch `--batch` bodies of `--size` bytes, through one client
(one connection to the leader). Phases alternate (async, sync, async, sync) after a warm-up, and each
figure is the best of its two runs. The sync Client is measured two ways: `append_batch_raw_async`
futures (pipelined) and blocking `append_many` calls (one batch per call per thread, as a script
would), the latter with `--threads` × `--inflight` threads so that the in-flight count is the same.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

from quorumlog.client import AsyncClient, Client
from quorumlog.net.loop import run
from quorumlog.server.cluster import LocalCluster


def run_async(endpoints: str, bodies: list[bytes], tasks: int, seconds: float) -> float:
    async def main() -> float:
        done = 0
        async with AsyncClient(endpoints, "g0", retry_timeout=30.0) as c:
            await c.append_batch_raw(bodies[:1])
            t0 = time.monotonic()
            stop = t0 + seconds

            async def worker() -> None:
                nonlocal done
                while time.monotonic() < stop:
                    n = (await c.append_batch_raw(bodies))[1]  # not `done += await`: it reads done first
                    done += n

            await asyncio.gather(*(worker() for _ in range(tasks)))
            return done / (time.monotonic() - t0)

    return run(main())


def run_sync_pipelined(c: Client, bodies: list[bytes], threads: int, inflight: int, seconds: float) -> float:
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        window: deque[Future[tuple[int, int]]] = deque()
        while time.monotonic() < stop:
            window.append(c.append_batch_raw_async(bodies))
            if len(window) >= inflight:
                counts[k] += window.popleft().result()[1]
        for f in window:
            counts[k] += f.result()[1]

    return _timed(worker, threads, counts)


def run_sync_blocking(c: Client, bodies: list[bytes], threads: int, seconds: float) -> float:
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        while time.monotonic() < stop:
            counts[k] += len(c.append_many(bodies))

    return _timed(worker, threads, counts)


def _timed(worker: object, threads: int, counts: list[int]) -> float:
    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]  # type: ignore[arg-type]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--inflight", type=int, default=4, help="batches in flight per sync thread (default 4)")
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args(argv)
    bodies = [os.urandom(args.size)] * args.batch
    tasks = args.threads * args.inflight
    root = Path(tempfile.mkdtemp(prefix="quorumlog-syncbench-"))
    cluster = LocalCluster(root, 3, 1)
    try:
        cluster.start()
        with Client(cluster.endpoints, "g0", retry_timeout=60.0) as c:
            c.append(b"warm-up")
            run_sync_pipelined(c, bodies, args.threads, args.inflight, 1.0)
            best: dict[str, float] = {}
            for _ in range(2):
                for name, fn in (
                    ("async", lambda: run_async(cluster.endpoints, bodies, tasks, args.seconds)),
                    ("sync, pipelined", lambda: run_sync_pipelined(c, bodies, args.threads, args.inflight,
                                                                   args.seconds)),
                    ("sync, blocking", lambda: run_sync_blocking(c, bodies, tasks, args.seconds)),
                ):
                    rate = fn()
                    print(f"  {name:16s} {rate:>10,.0f} appends/s", flush=True)
                    best[name] = max(best.get(name, 0.0), rate)
        base = best["async"]
        print(f"{args.size} B entries, batches of {args.batch}, {tasks} in flight; best of 2:")
        for name, rate in best.items():
            print(f"{name:16s} {rate:>10,.0f} appends/s  {rate / base:6.1%} of async")
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
