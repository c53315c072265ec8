"""What several replicas appending to one disk at once get from it, by how their segments are prepared
and what becomes of the page cache behind them (the two choices in store/segments.py).

    python benchmarks/disk_bench.py [--writers 3] [--mib 512] [--dir /tmp]

Each writer is a process appending to a file of its own in 256 KiB pwrites with an fdatasync every
1 MiB, all at the same time (three replicas of one machine). Prepared as:
- zeros ahead: a thread writes zeros with O_DIRECT (4 MiB, then fdatasync) up to 32 MiB ahead;
- fallocate ahead: the same thread reserves the blocks with posix_fallocate instead (quorumlog's);
- holes: a sparse file, blocks allocated as the appends land;
- written before: the whole file zero-filled before the clock starts (the ceiling's).
Every case drops synced pages 64 MiB behind the writer from the page cache, as quorumlog does; the
last row keeps them ("fresh page cache") to show what that costs. Prints MiB/s per writer, fdatasync
p50/p99 and CPU per MiB; every file is removed.
"""

from __future__ import annotations

import argparse
import mmap
import multiprocessing as mp
import os
import tempfile
import threading
import time

MiB = 1 << 20
CHUNK = 256 * 1024
AHEAD = 32 * MiB
BEHIND = 64 * MiB
CASES = [("zeros ahead", "zeros", True), ("fallocate ahead", "fallocate", True), ("holes", "holes", True),
         ("written before", "before", True), ("fallocate ahead, fresh page cache", "fallocate", False)]


def _prepare_ahead(path: str, size: int, how: str, written: list[int], stop: threading.Event) -> None:
    fd = os.open(path, os.O_WRONLY | (os.O_DIRECT if how == "zeros" else 0))
    zeros = mmap.mmap(-1, 4 * MiB)  # page-aligned, as O_DIRECT needs
    filled = 0
    try:
        while not stop.is_set() and filled < size:
            if filled - written[0] > AHEAD:
                time.sleep(0.002)
                continue
            if how == "zeros":
                os.pwrite(fd, zeros, filled)
            else:
                os.posix_fallocate(fd, filled, 4 * MiB)
            os.fdatasync(fd)
            filled += 4 * MiB
    finally:
        os.close(fd)
        zeros.close()


def _writer(path: str, size: int, how: str, drop: bool, out: mp.Queue) -> None:  # type: ignore[type-arg]
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, size)
    os.fsync(fd)
    written, stop = [0], threading.Event()
    if how == "before":
        os.pwrite(fd, bytes(size), 0)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)
    elif how in ("zeros", "fallocate"):
        threading.Thread(target=_prepare_ahead, args=(path, size, how, written, stop), daemon=True).start()
        time.sleep(0.2)
    block = os.urandom(CHUNK)
    syncs, off, dropped = [], 0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    while off < size:
        for _ in range(4):
            os.pwrite(fd, block, off)
            off += CHUNK
        written[0] = off
        t = time.perf_counter()
        os.fdatasync(fd)
        syncs.append(time.perf_counter() - t)
        if drop and off - BEHIND - dropped >= 8 * MiB:
            os.posix_fadvise(fd, dropped, off - BEHIND - dropped, os.POSIX_FADV_DONTNEED)
            dropped = off - BEHIND
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stop.set()
    os.close(fd)
    os.unlink(path)
    syncs.sort()
    out.put((size / MiB / wall, syncs[len(syncs) // 2], syncs[int(0.99 * len(syncs))], cpu / (size / MiB)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--mib", type=int, default=512, help="MiB each writer appends")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    a = ap.parse_args()
    size = max(4, a.mib // 4 * 4) * MiB
    print(f"{a.writers} writers at once, {size // MiB} MiB each, 256 KiB pwrites, fdatasync every 1 MiB")
    print(f"{'segments':36s} {'MiB/s each':>11s} {'fdatasync p50 / p99':>21s} {'CPU per MiB':>12s}")
    root = tempfile.mkdtemp(prefix="disk-bench-", dir=a.dir)
    try:
        for name, how, drop in CASES:
            q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
            procs = [mp.Process(target=_writer, args=(os.path.join(root, f"w{i}"), size, how, drop, q))
                     for i in range(a.writers)]
            for p in procs:
                p.start()
            got = [q.get(timeout=600) for _ in procs]
            for p in procs:
                p.join(timeout=60)
            rate = sum(g[0] for g in got) / len(got)
            p50 = max(g[1] for g in got) * 1e3
            p99 = max(g[2] for g in got) * 1e3
            cpu = sum(g[3] for g in got) / len(got) * 1e3
            print(f"{name:36s} {rate:11.0f} {p50:9.2f} / {p99:6.2f} ms {cpu:9.2f} ms")
    finally:
        for f in os.listdir(root):
            os.unlink(os.path.join(root, f))
        os.rmdir(root)


if __name__ == "__main__":
    main()
