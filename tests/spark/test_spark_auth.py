"""The data source on clusters that require credentials: client tokens (a read-only token reads and cannot
write), and mutual TLS (the executors present a client certificate). Real clusters, a real Spark session."""

from __future__ import annotations

import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from quorumlog import Client
from quorumlog.server.cluster import LocalCluster
from quorumlog.tls import client_context
from server.conftest import ClusterPool

TOKENS = [
    {"name": "reader", "secret": "r-5ecret", "permissions": {"g0": ["read"]}},
    {"name": "writer", "secret": "w-5ecret", "permissions": {"g0": ["append", "read"]}},
]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[ClusterPool]:
    p = ClusterPool(tmp_path)
    try:
        yield p
    finally:
        p.close()


def _write(spark: SparkSession, cluster: LocalCluster, n: int, **options: str) -> None:
    df = spark.range(n).selectExpr("cast(concat('row-', id) as binary) as body")
    w = df.write.format("quorumlog").option("endpoints", cluster.endpoints).option("group", "g0")
    for k, v in options.items():
        w = w.option(k, v)
    w.mode("append").save()


def _read(spark: SparkSession, cluster: LocalCluster, **options: str) -> list[bytes]:
    r = spark.read.format("quorumlog").option("endpoints", cluster.endpoints).option("groups", "g0")
    for k, v in options.items():
        r = r.option(k, v)
    return [bytes(row.body) for row in r.load().orderBy("index").collect()]


def test_tokens(spark: SparkSession, pool: ClusterPool) -> None:
    cluster = pool.make(3, 1, secret="cluster-5ecret", tokens=TOKENS)
    _write(spark, cluster, 500, token="writer", secret="w-5ecret")
    bodies = _read(spark, cluster, token="reader", secret="r-5ecret", readFrom="any")
    assert sorted(bodies) == sorted(f"row-{i}".encode() for i in range(500))
    with pytest.raises(Exception, match="PERMISSION_DENIED|may not append"):
        _write(spark, cluster, 10, token="reader", secret="r-5ecret")
    with pytest.raises(Exception, match="authentication failed"):
        _read(spark, cluster, token="reader", secret="wrong")
    with Client(cluster.endpoints, "g0", secret="cluster-5ecret", retry_timeout=20) as c:  # nothing more written
        assert sum(not e.is_control for e in c.read(0, 10_000)) == 500


def test_mutual_tls(spark: SparkSession, pool: ClusterPool, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    r = subprocess.run([sys.executable, "-m", "quorumlog", "certs", "init", "--dir", str(certs), "--nodes",
                        "n0,n1,n2", "--clients", "client"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cluster = pool.make(3, 1, tls_dir=certs)
    files = {"tlsCa": str(certs / "ca.pem"), "tlsCert": str(certs / "client.pem"), "tlsKey": str(certs / "client.key")}
    _write(spark, cluster, 300, **files)
    bodies = _read(spark, cluster, readFrom="any", **files)
    assert zlib.crc32(b"".join(sorted(bodies))) == zlib.crc32(b"".join(sorted(f"row-{i}".encode()
                                                                               for i in range(300))))
    tls = client_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")
    with Client(cluster.endpoints, "g0", tls=tls, retry_timeout=20) as c:
        assert sum(not e.is_control for e in c.read(0, 10_000)) == 300
    with pytest.raises(Exception, match="tlsKey"):
        _read(spark, cluster, tlsCa=files["tlsCa"], tlsCert=files["tlsCert"])
