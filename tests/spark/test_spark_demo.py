"""`quorumlog demo` (the Spark pipeline) stopped by SIGTERM, as a service manager or `timeout` stops it:
its cluster, its producer and its Spark driver stop, and its data is removed. SIGTERM's default action
once ended the demo alone and left its three nodes running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from server.conftest import kill_leftovers, pids_with, wait_until

QL = [sys.executable, "-m", "quorumlog"]


def test_the_spark_demo_stopped_by_sigterm_stops_its_nodes_and_removes_its_data(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    demo = subprocess.Popen([*QL, "demo", "--seconds", "300", "--rate", "200"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        root = wait_until(lambda: list(tmp_path.glob("quorumlog-spark-demo-*")), 60, "the demo's directory")[0]
        nodes = wait_until(lambda: (p := pids_with(str(root) + "/cluster/n")) and len(p) == 3 and p, 60,
                           "its three nodes")
        time.sleep(8)  # into Spark's start, or past it
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(120) == 128 + signal.SIGTERM
        assert not [p for p in nodes if Path(f"/proc/{p}").exists()], "nodes outlived the demo"
        wait_until(lambda: not pids_with(str(tmp_path)), 30, "every process of the demo to end")
        assert not root.exists()
    finally:
        kill_leftovers(demo, str(tmp_path))
