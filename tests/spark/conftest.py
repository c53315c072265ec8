"""One SparkSession for the whole test session (local[2,4]: two threads, four attempts per task; quiet),
and real local quorumlog clusters started as the server tests start them (`quorumlog serve` processes,
stopped by pid)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster
from quorumlog.spark import register
from server.conftest import ClusterPool, wait_until

__all__ = ["append_bodies", "leader_of", "wait_until"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The JVM's temporary files (its artifacts, block manager and native-library dirs) go to a directory
    # of the test session's, removed after: java.io.tmpdir is /tmp whatever TMPDIR says.
    tmp = tempfile.mkdtemp(prefix="quorumlog-spark-tests-")
    session = (SparkSession.builder.master("local[2,4]").appName("quorumlog-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
               .config("spark.driver.extraJavaOptions",
                       f"-Dlog4j.rootLogger=ERROR -XX:-UsePerfData -Djava.io.tmpdir={tmp}")
               .config("spark.local.dir", tmp)
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def leader_of(cluster: LocalCluster, group: str, timeout: float = 20.0) -> str:
    """The node id of the group's leader, once there is one."""
    with Client(cluster.endpoints, group, retry_timeout=timeout) as c:
        def probe() -> str | None:
            try:
                return c.metadata(with_nodes=False).leader
            except Exception:
                return None

        return wait_until(probe, timeout, f"a leader of {group}", interval=0.05)


def append_bodies(cluster: LocalCluster, group: str, bodies: list[bytes], batch: int = 500) -> list[int]:
    """Append bodies in order; returns their indexes."""
    out: list[int] = []
    with Client(cluster.endpoints, group, retry_timeout=30.0) as c:
        for i in range(0, len(bodies), batch):
            out += [r.index for r in c.append_many(bodies[i:i + batch])]
    return out


def _start(pool: ClusterPool, groups: int, **kwargs: Any) -> LocalCluster:
    """A 3-node cluster whose groups all have a leader (the pool stops it, whatever happens)."""
    c = pool.make(3, groups, **kwargs)
    for g in c.group_names:
        leader_of(c, g)
    return c


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-node cluster with groups g0 and g1, shared by tests that only append and read."""
    pool = ClusterPool(tmp_path_factory.mktemp("shared"))
    try:
        yield _start(pool, 2)
    finally:
        pool.close()


@pytest.fixture
def new_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Clusters of one's own (for tests that kill nodes or expire entries); stopped after the test."""
    pool = ClusterPool(tmp_path)
    try:
        yield lambda groups=1, **kwargs: _start(pool, groups, **kwargs)
    finally:
        pool.close()
