"""quorumlog beside etcd, PySyncObj and the ceiling, on this machine, in one run.

    python benchmarks/peers/run.py [--seconds 5] [--sizes 100,1024] [--systems ...] [--no-ceiling]
    make peers        # installs etcd-server and the `peers` extra first

For each entry size, in turn: the ceiling, quorumlog Raft (batched and one entry per request), quorumlog
primary/backup SYNC, a 3-member etcd cluster and a 3-member PySyncObj cluster, each started fresh on
127.0.0.1 with ephemeral ports in a temp dir and stopped by its pids afterwards. The same conventions
everywhere: C connections x K requests in flight (default 2 x 16); "batched" requests carry B entries
(default 128), "unbatched" ones a single entry; then one append at a time (default 1,000) for p50/p99.
Prints a table, writes the results as JSON and a plot (PNG).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import baselines
import etcd_peer
import pysyncobj_peer
import report
from rich.console import Console

HERE = Path(__file__).resolve().parent
SYSTEMS = ("quorumlog", "quorumlog-pb", "etcd", "pysyncobj")
NAMES = {"quorumlog": "quorumlog Raft", "quorumlog-pb": "quorumlog primary/backup SYNC", "etcd": "etcd",
         "pysyncobj": "PySyncObj"}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100,1024", help="entry body sizes in bytes (default 100,1024)")
    p.add_argument("--seconds", type=float, default=5.0, help="length of each throughput phase (default 5)")
    p.add_argument("--connections", type=int, default=2, help="client connections (default 2)")
    p.add_argument("--inflight", type=int, default=16, help="requests in flight per connection (default 16)")
    p.add_argument("--batch", type=int, default=128, help="entries per batched request (default 128: etcd's "
                                                          "limit of operations in one Txn)")
    p.add_argument("--single", type=int, default=1000, help="appends one at a time for latency (default 1000)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"which to run (default {','.join(SYSTEMS)})")
    p.add_argument("--no-ceiling", dest="ceiling", action="store_false", help="skip the ceiling")
    p.add_argument("--ceiling-dir", type=Path, default=baselines.CEILING_DIR)
    p.add_argument("--ceiling-python", type=Path, default=baselines.CEILING_PYTHON,
                   help="a Python with uvloop for the ceiling (default /tmp/ceil/bin/python)")
    p.add_argument("--json-out", type=Path, default=HERE / "results.json", help="results file")
    p.add_argument("--plot", type=Path, default=HERE.parents[1] / "docs" / "peers.png", help="PNG to write")
    a = p.parse_args(argv)
    a.sizes = [int(s) for s in a.sizes.split(",")]
    a.systems = [s for s in a.systems.split(",") if s]
    if unknown := set(a.systems) - set(SYSTEMS):
        p.error(f"unknown systems: {', '.join(sorted(unknown))}")
    return a


def _quorumlog(a: argparse.Namespace, size: int, replication: str) -> dict[str, Any]:
    batched = baselines.run_quorumlog(size, a.seconds, a.connections, a.inflight, a.batch, a.single, replication)
    out = {"batched": batched["throughput"] | {"batch": a.batch, "label": f"batches of {a.batch}"},
           "single": batched.get("single"),
           "commands": [batched["command"]], "disk_fsync": batched.get("disk_fsync")}
    if replication == "raft":
        one = baselines.run_quorumlog(size, a.seconds, a.connections, a.inflight, 1, 0, replication)
        out["unbatched"] = one["throughput"] | {"batch": 1, "label": "1 entry a request"}
        out["commands"].append(one["command"])
    return out


def _one(a: argparse.Namespace, system: str, size: int) -> dict[str, Any]:
    if system == "quorumlog":
        return _quorumlog(a, size, "raft")
    if system == "quorumlog-pb":
        return _quorumlog(a, size, "primary-backup")
    if system == "etcd":
        return etcd_peer.run(size, a.seconds, a.connections, a.inflight, a.batch, a.single)
    return pysyncobj_peer.run(size, a.seconds, a.connections, a.inflight, a.batch, a.single)


def _leftovers() -> list[str]:
    """Our own child processes still alive (there should be none)."""
    ps = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "pid=,args="], capture_output=True, text=True,
                        timeout=10)
    return [line.strip() for line in ps.stdout.splitlines() if line.strip() and "ps --ppid" not in line]


def _on_sigterm(_sig: int, _frame: object) -> None:
    sys.exit(143)  # unwinds through every `finally`: clusters stopped, temp dirs removed


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    console = Console(stderr=True)
    started = time.time()
    doc: dict[str, Any] = {
        "taken_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(["run.py", *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "loadavg_before": os.getloadavg()},
        "settings": {"sizes": a.sizes, "seconds": a.seconds, "connections": a.connections, "inflight": a.inflight,
                     "batch": a.batch, "single": a.single}, "results": [], "ceiling": {}}
    if a.ceiling and (why := baselines.ceiling_available(a.ceiling_dir, a.ceiling_python)):
        console.print(f"[yellow]ceiling skipped: {why}[/yellow]")
        a.ceiling = False
    if "etcd" in a.systems and etcd_peer.etcd_binary() is None:
        console.print("[yellow]etcd skipped: not on PATH (apt-get install etcd-server, or `make peers`)[/yellow]")
        a.systems.remove("etcd")
    if not a.systems and not a.ceiling:
        console.print("[red]nothing to run[/red]")
        return 2
    for size in a.sizes:
        if a.ceiling:
            console.print(f"ceiling, {size} B…")
            try:
                doc["ceiling"][size] = baselines.run_ceiling(size, a.seconds, a.ceiling_dir, a.ceiling_python)
            except Exception as e:  # one system failing must not lose the others' figures
                console.print(f"[red]ceiling failed: {e}[/red]")
                doc["ceiling"][size] = {"error": str(e)}
        for system in a.systems:
            console.print(f"{NAMES[system]}, {size} B…")
            load = os.getloadavg()[0]
            t = time.monotonic()
            try:
                r = _one(a, system, size)
            except Exception as e:
                console.print(f"[red]{NAMES[system]} failed: {e}[/red]")
                r = {"error": str(e)}
            fsync = system != "pysyncobj"
            doc["results"].append(r | {"system": NAMES[system], "size": size, "fsync": fsync, "loadavg_1m": load,
                                       "wall_s": round(time.monotonic() - t, 1)})
    doc["machine"]["loadavg_after"] = os.getloadavg()
    doc["wall_s"] = round(time.time() - started, 1)
    doc["leftover_processes"] = _leftovers()
    doc["rows"] = report.rows(doc["results"], doc["ceiling"])
    title = (f"{a.connections} connections × {a.inflight} in flight, batches of {a.batch}; {a.seconds:g} s a phase; "
             f"{doc['taken_at']}, {os.cpu_count()} cores")
    out = Console()
    if not out.is_terminal:
        out = Console(width=170)  # a file or pipe: keep the table's rows on one line each
    out.print(report.table(doc["rows"], f"quorumlog and peers: {title}"))
    a.json_out.parent.mkdir(parents=True, exist_ok=True)
    a.json_out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    console.print(f"results: {a.json_out}")
    if a.plot:
        try:
            report.plot(doc["rows"], a.plot, title)
            console.print(f"plot: {a.plot}")
        except ImportError as e:
            console.print(f"[yellow]no plot: {e} (pip install -e '.[peers]')[/yellow]")
    if doc["leftover_processes"]:
        console.print(f"[red]processes left running: {doc['leftover_processes']}[/red]")
        return 1
    console.print(f"done in {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
