"""Beyond local mode: a real Spark standalone cluster (a master and two one-core workers, started from the
installed pyspark) runs a batch and a streaming read of a real quorumlog cluster with readFrom=followers,
from a driver process of its own (standalone_job.py), so that its JVM is not the test session's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster, free_ports

from . import standalone_job
from .conftest import append_bodies, leader_of, wait_until
from .drivers import kill_session, run_driver

pytestmark = pytest.mark.slow

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
ENTRIES = 20_000


class StandaloneSpark:
    """A master and `workers` workers on 127.0.0.1, each a process in a session of its own (the workers'
    executors and their Python workers stay in it), everything they write under `root`."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + workers)
        for d in ("logs", "local", "tmp", "work"):
            (root / d).mkdir(parents=True)
        self.env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(root / "logs"),
                    "SPARK_WORKER_DIR": str(root / "work"), "SPARK_LOCAL_DIRS": str(root / "local"),
                    "TMPDIR": str(root / "tmp"), "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_MEMORY": "256m",
                    "SPARK_DAEMON_JAVA_OPTS": f"-XX:-UsePerfData -XX:TieredStopAtLevel=1 "
                                              f"-Djava.io.tmpdir={root / 'tmp'}"}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> None:
        with (self.root / "logs" / f"{name}.out").open("wb") as out:
            self.procs[name] = subprocess.Popen([str(SPARK_CLASS), *args], env=self.env, cwd=self.root,
                                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def start(self, timeout: float = 90.0) -> None:
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for i, ui in enumerate(self.worker_ui_ports):
            self._spawn(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                                       "--cores", "1", "--memory", "1g", "--webui-port", str(ui),
                                       "--work-dir", str(self.root / "work" / f"w{i}")])

        def ready() -> bool:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            assert not dead, f"{dead} exited: {self.log_tail()}"
            doc = self.json(self.ui_port)
            return doc is not None and sum(w["state"] == "ALIVE" for w in doc["workers"]) == len(self.worker_ui_ports)

        wait_until(ready, timeout, "the Spark master to list its workers as ALIVE", interval=0.5)

    @staticmethod
    def json(ui_port: int) -> dict[str, Any] | None:
        """A web UI's /json/ document (the master's or a worker's), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
                return dict(json.load(r))
        except OSError:
            return None

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in sorted((self.root / "logs").glob("*.out")))

    def stop(self) -> None:
        """Every process of the workers' sessions (executors included), then the master's."""
        for name in sorted(self.procs, reverse=True):
            kill_session(self.procs[name])


@pytest.fixture
def standalone() -> Iterator[StandaloneSpark]:
    root = Path(tempfile.mkdtemp(prefix="quorumlog-spark-standalone-"))
    spark = StandaloneSpark(root)
    try:
        spark.start()
        yield spark
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def _read_entries(cluster: LocalCluster, group: str) -> dict[str, float]:
    """quorumlog_read_entries_total of the group on every node: the entries it served to readers."""
    out = {}
    for node in cluster.nodes:
        with urllib.request.urlopen(node.admin_url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        out[node.node_id] = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                                if line.startswith("quorumlog_read_entries_total{") and f'group="{group}"' in line)
    return out


def _all_committed(cluster: LocalCluster, group: str) -> bool:
    with Client(cluster.endpoints, group) as c:
        committed = {c.node_status(n.address)["groups"][group]["committed_index"] for n in cluster.nodes}
    return len(committed) == 1


def test_batch_and_stream_reads_on_a_standalone_cluster(standalone: StandaloneSpark,
                                                        new_cluster: Any) -> None:
    cluster = new_cluster(1)
    bodies = [b"event-%d-" % i + b"x" * (i % 200) for i in range(ENTRIES)]
    append_bodies(cluster, "g0", bodies, batch=1000)
    leader = leader_of(cluster, "g0")
    # readFrom=followers picks the followers that have committed the whole range: let them learn it.
    wait_until(lambda: _all_committed(cluster, "g0"), 20, "the followers to learn the commit index")
    before = _read_entries(cluster, "g0")

    work = standalone.root / "driver"
    work.mkdir()
    result = run_driver(standalone_job.__file__, [standalone.url, cluster.endpoints, "g0", str(work)], cwd=work,
                        env={**standalone.env, "SPARK_LOCAL_DIRS": str(work)},
                        log=standalone.root / "logs" / "driver.out", context=standalone.log_tail())

    # Exact: every body once, in both queries.
    want = {"count": ENTRIES, "crc32_sum": sum(zlib.crc32(b) for b in bodies), "bytes": sum(map(len, bodies))}
    assert result["batch"] == want
    assert result["stream"] == want
    assert result["stream_batches"] >= 1

    # The Python workers ran under executor JVMs, one on each worker, none of them the driver's.
    where = result["workers"]
    assert {w["partition"] for w in where} == set(range(standalone_job.PARTITIONS))
    assert all(w["executor_id"] not in (None, "driver") for w in where)
    assert result["driver_jvm_pid"] not in {w["jvm_pid"] for w in where}
    master = standalone.json(standalone.ui_port)
    assert master is not None
    worker_urls = {f"spark://Worker@{w['host']}:{w['port']}" for w in master["workers"]}
    assert {w["worker_url"] for w in where} == worker_urls
    app = next(a for a in master["completedapps"] + master["activeapps"] if a["id"] == result["app_id"])
    assert app["cores"] == 2
    for ui in standalone.worker_ui_ports:  # each worker ran an executor of this application
        doc = standalone.json(ui)
        assert doc is not None
        assert result["app_id"] in {e["appid"] for e in doc["executors"] + doc["finishedexecutors"]}

    # The reads went to the followers: the leader served none, each follower some, together both queries.
    after = _read_entries(cluster, "g0")
    assert leader_of(cluster, "g0") == leader
    served = {n: after[n] - before[n] for n in after}
    assert served[leader] == 0, served
    followers = [n for n in served if n != leader]
    assert all(served[n] > 0 for n in followers), served
    assert sum(served[n] for n in followers) >= 2 * ENTRIES, served
