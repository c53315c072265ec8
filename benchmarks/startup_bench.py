"""How long a fresh cluster with default settings takes to accept its first append, and how much disk it
takes: the baseline issue 11 asks to bring to about a second and 128 MiB per empty replica.

    python benchmarks/startup_bench.py [--nodes 3] [--replication raft|primary-backup] [--rounds 1]

Each round starts `quorumlog serve` processes with the default store settings (1 GiB data and 160 MiB
index segments) in a temporary directory, appends one entry with a retrying client, and reports:
- the time from starting the processes to that first acknowledged append;
- the disk used (allocated blocks, as `du` counts them) right after it, and again --settle seconds
  later (anything allocated in the background by then).
Every process is stopped by its pid and the directory removed, whatever happens.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster

MiB = 1 << 20


def disk_used(path: Path) -> int:
    """Bytes of blocks allocated under `path` (sparse files count what they hold)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                continue  # a spare renamed or a temp file replaced meanwhile
    return total


def one_round(args: argparse.Namespace) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="quorumlog-startup-"))
    ha = {"ack": "sync"} if args.replication == "primary-backup" else {}
    cluster = LocalCluster(root, args.nodes, 1, replication=args.replication, ha=ha)
    try:
        t0 = time.monotonic()
        cluster.start()
        with Client(cluster.endpoints, "g0", retry_timeout=120.0) as c:
            c.append(b"first")
        first = time.monotonic() - t0
        used_first = disk_used(root)
        time.sleep(args.settle)
        used_settled = disk_used(root)
        return {"first_append_s": first, "disk_at_first_append_mib": used_first / MiB,
                "disk_settled_mib": used_settled / MiB}
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--replication", choices=("raft", "primary-backup"), default="raft")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--settle", type=float, default=5.0, help="seconds before the second look at the disk (default 5)")
    args = p.parse_args(argv)
    firsts = []
    for r in range(args.rounds):
        res = one_round(args)
        firsts.append(res["first_append_s"])
        print(f"round {r + 1}: first append after {res['first_append_s']:.2f} s; disk "
              f"{res['disk_at_first_append_mib']:.0f} MiB then, {res['disk_settled_mib']:.0f} MiB {args.settle:g} s "
              f"later; {args.nodes} nodes, {args.replication}", flush=True)
    if len(firsts) > 1:
        print(f"first append: median {statistics.median(firsts):.2f} s, max {max(firsts):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
