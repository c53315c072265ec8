"""Regenerate docs/dashboard.png: a real 3-node cluster (two groups) under a varying append load, its
dashboard opened in headless Chromium, a screenshot once the sparklines have filled (and one node
killed a few seconds before, to show what a dead node looks like).

    .venv/bin/python benchmarks/dashboard_screenshot.py [--out docs/dashboard.png] [--seconds 45]

Needs Debian's chromium and chromium-driver (`make install`) and selenium (the dev extra).
Everything it starts is stopped and its temporary directory removed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from quorumlog import Client
from quorumlog.server.cluster import LocalCluster

ROOT = Path(__file__).resolve().parent.parent
CHROME_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--hide-scrollbars")
STORE = {"data_segment_bytes": 8 << 20, "index_segment_bytes": 32 * 65536, "max_body_bytes": 64 << 10}


def cluster_doc(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url + "/api/cluster", timeout=5) as r:
            return dict(json.loads(r.read()))
    except OSError:
        return None


def wait_leaders(url: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = cluster_doc(url)
        if doc and all(n["up"] for n in doc["nodes"]) and all(g["leader"] for g in doc["groups"]):
            return doc
        time.sleep(0.3)
    raise SystemExit("the cluster did not elect leaders in time")


def load(endpoints: str, group: str, stop: threading.Event, phase: float) -> int:
    """Append batches of 256-byte entries at a rate that rises and falls (a sparkline with a shape)."""
    sent = 0
    t0 = time.monotonic()
    with Client(endpoints, group=group) as c:
        while not stop.is_set():
            x = (time.monotonic() - t0) / 9.0 + phase
            batch = int(40 + 160 * (0.5 + 0.5 * math.sin(x)))
            c.append_many([b"q" * 256] * batch)
            sent += batch
            time.sleep(0.05)
    return sent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    ap.add_argument("--seconds", type=float, default=45.0, help="how long to append before the screenshot")
    ap.add_argument("--width", type=int, default=1360)
    ap.add_argument("--down", default="n2", help="a node to SIGKILL shortly before the screenshot ('' for none)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="quorumlog-dashboard-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", 3, 2, store=STORE,
                               raft={"heartbeat_interval_ms": 100, "election_backoff_ms": 300})
        cluster.start()
        driver = None
        try:
            url = cluster.nodes[0].admin_url
            wait_leaders(url)
            opts = webdriver.ChromeOptions()
            opts.binary_location = "/usr/bin/chromium"
            for a in (*CHROME_ARGS, f"--window-size={args.width},900", f"--user-data-dir={Path(tmp) / 'chromium'}"):
                opts.add_argument(a)
            driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
            driver.get(url + "/")
            stop = threading.Event()
            totals: dict[str, int] = {}
            workers = [threading.Thread(target=lambda g=g, p=p: totals.__setitem__(g, load(
                cluster.endpoints, g, stop, p))) for g, p in (("g0", 0.0), ("g1", 2.0))]
            for w in workers:
                w.start()
            try:
                time.sleep(args.seconds / 2)
                with Client(cluster.endpoints, group="g1") as c:  # a leadership transfer among the events
                    leader = c.metadata(with_nodes=False).leader
                    target = next(n.node_id for n in cluster.nodes if n.node_id != leader)
                    c.transfer_leader(target)
                time.sleep(args.seconds / 2 - 6)
                if args.down:
                    cluster.kill(next(i for i, n in enumerate(cluster.nodes) if n.node_id == args.down))
                time.sleep(6)
                # The whole page in one picture (the window is taller than its viewport), while appends go on.
                height = int(driver.execute_script("return document.documentElement.scrollHeight"))
                driver.set_window_size(args.width, height)
                chrome = height - int(driver.execute_script("return window.innerHeight"))
                driver.set_window_size(args.width, height + chrome)
                time.sleep(1.2)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(args.out))
            finally:
                stop.set()
                for w in workers:
                    w.join(30)
            print(f"appended {totals}; screenshot in {args.out}")
        finally:
            if driver is not None:
                driver.quit()
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
