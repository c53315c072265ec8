"""Store throughput: appends/s and MiB/s by body size, batch size and flush mode; read throughput;
and the raw disk limit (1 MiB pwrite + fdatasync) measured in the same run.

    python benchmarks/store_bench.py [--seconds 2] [--dir /path/on/the/disk/to/measure]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time

from quorumlog.config import StoreConfig
from quorumlog.store.file_store import FileStore

MiB = 1 << 20


def raw_disk(directory: str, seconds: float) -> float:
    """MiB/s of 1 MiB pwrites each followed by fdatasync, into a pre-filled file."""
    path = os.path.join(directory, "raw")
    size = 256 * MiB
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        block = bytes(MiB)
        for off in range(0, size, MiB):
            os.pwrite(fd, block, off)
        os.fsync(fd)
        block = os.urandom(MiB)
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.pwrite(fd, block, (n * MiB) % size)
            os.fdatasync(fd)
            n += 1
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)


def appends(directory: str, body_size: int, batch: int, flush: str, seconds: float) -> tuple[float, float, int]:
    """Append batches (flushing after each with flush "sync") for `seconds`; entries/s, MiB/s."""
    cfg = StoreConfig(data_segment_bytes=256 * MiB, index_segment_bytes=32 * (1 << 20), flush=flush)
    path = tempfile.mkdtemp(dir=directory)
    store = FileStore(path, cfg)
    store.append([b"w"], 1)
    # Measure the steady state: the window of blocks filled ahead of the writes is ready.
    store.data.wait_filled()
    store.index.wait_filled()
    bodies = [os.urandom(body_size)] * batch
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        store.append(bodies, 1)
        if flush == "sync":
            store.flush()
        n += batch
    secs = time.perf_counter() - t0
    store.close()
    shutil.rmtree(path)
    return n / secs, n * (body_size + 48) / secs / MiB, n


def reads(directory: str, body_size: int, count: int) -> tuple[float, float]:
    """Sequential read() of `count` entries in chunks of 1024; entries/s, and read_raw entries/s."""
    cfg = StoreConfig(data_segment_bytes=256 * MiB, index_segment_bytes=32 * (1 << 20))
    path = tempfile.mkdtemp(dir=directory)
    store = FileStore(path, cfg)
    bodies = [os.urandom(body_size)] * 1024
    for _ in range(count // 1024):
        store.append(bodies, 1)
    store.flush()
    total = store.end_index + 1
    results = []
    for fn in (store.read, store.read_raw):
        t0 = time.perf_counter()
        i = 0
        while i < total:
            fn(i, 1024, 1 << 30)
            i += 1024
        results.append(total / (time.perf_counter() - t0))
    store.close()
    shutil.rmtree(path)
    return results[0], results[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    args = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="quorumlog-bench-", dir=args.dir)
    try:
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"dir {directory}")
        disk = raw_disk(directory, args.seconds)
        print(f"raw disk: 1 MiB pwrite + fdatasync: {disk:,.0f} MiB/s")
        print(f"{'body':>6} {'batch':>6} {'flush':>6} {'entries/s':>12} {'MiB/s':>8} {'of raw':>7}")
        for flush in ("sync", "async"):
            for body in (100, 1024):
                for batch in (1, 64, 1024):
                    secs = args.seconds if batch > 1 or flush == "async" else min(args.seconds, 1.0)
                    rate, mib, _ = appends(directory, body, batch, flush, secs)
                    print(f"{body:>6} {batch:>6} {flush:>6} {rate:>12,.0f} {mib:>8,.1f} {mib / disk:>7.0%}")
        for body, batch in ((65536, 16), (1 << 20, 1)):
            rate, mib, _ = appends(directory, body, batch, "sync", args.seconds)
            print(f"{body:>6} {batch:>6} {'sync':>6} {rate:>12,.0f} {mib:>8,.1f} {mib / disk:>7.0%}")
        for body in (100, 1024):
            r, raw = reads(directory, body, 400_000)
            print(f"read {body:>5} B entries: read() {r:,.0f} entries/s, read_raw() {raw:,.0f} entries/s")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
