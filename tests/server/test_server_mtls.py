"""Mutual TLS on a real 3-node cluster, with certificates from `quorumlog certs init`: the cluster elects
and replicates over TLS; a client with a certificate of the CA appends and reads; a client without a
certificate, or with one of another CA, is refused; and a member presenting its own certificate while
claiming another node's id at HELLO is refused."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quorumlog import Client
from quorumlog.errors import QuorumLogError
from quorumlog.net.connection import connect
from quorumlog.net.errors import HandshakeError
from quorumlog.raft.member import members_digest
from quorumlog.tls import cert_identity, client_context

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    r = subprocess.run([sys.executable, "-m", "quorumlog", "certs", "init", "--dir", str(d), "--nodes", "n0,n1,n2",
                        "--clients", "client"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    other = d / "other"  # a second CA, whose certificates the cluster must not accept
    r = subprocess.run([sys.executable, "-m", "quorumlog", "certs", "init", "--dir", str(other), "--nodes", "n1",
                        "--clients", "client"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (d / "n0.key").stat().st_mode & 0o077 == 0
    return d


def test_mutual_tls_cluster(cluster_factory: Any, certs: Path) -> None:
    cluster = cluster_factory(nodes=3, tls_dir=certs)
    tls = client_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")
    with Client(cluster.endpoints, group="g0", tls=tls, retry_timeout=30) as c:
        r = c.append(b"over tls")
        many = c.append_many([b"a", b"b", b"c"])
        assert c.get(r.index).body == b"over tls"
        assert [e.body for e in c.read(r.index, 4)] == [b"over tls", b"a", b"b", b"c"]
        assert many[-1].index == r.index + 3  # replicated: a quorum of TLS peers acknowledged it
    no_cert = client_context(certs / "ca.pem")
    foreign = client_context(certs / "ca.pem", certs / "other" / "client.pem", certs / "other" / "client.key")
    for ctx in (no_cert, foreign):
        with Client(cluster.endpoints, group="g0", tls=ctx, retry_timeout=2) as bad, pytest.raises(QuorumLogError):
            bad.get(r.index)
    with Client(cluster.endpoints, group="g0", retry_timeout=2) as plain, pytest.raises(QuorumLogError):
        plain.get(r.index)  # plaintext to a TLS port

    async def impersonate() -> None:
        # n2's own certificate, but HELLO claims n1: refused before any Raft message is taken.
        ctx = client_context(certs / "ca.pem", certs / "n2.pem", certs / "n2.key")
        groups = {"g0": members_digest("g0", ["n0", "n1", "n2"])}
        with pytest.raises(HandshakeError, match="HELLO names 'n1' but the TLS certificate names 'n2'"):
            await connect("127.0.0.1", cluster.nodes[0].port, cluster="quorumlog", node_id="n1", ssl=ctx,
                          groups=groups, timeout=5)
        # The node's certificate names it: a client expecting another id refuses the connection.
        with pytest.raises(HandshakeError, match="certificate for 'n0'"):
            await connect("127.0.0.1", cluster.nodes[0].port, cluster="quorumlog", ssl=tls, expect_identity="n1",
                          timeout=5)

    asyncio.run(impersonate())
    assert cert_identity({"subjectAltName": (("URI", "quorumlog:n7"),), "subject": ()}) == "n7"
    assert cert_identity({"subject": ((("commonName", "n8"),),)}) == "n8" and cert_identity(None) is None


def test_a_controlled_primary_backup_group_under_mutual_tls(cluster_factory: Any, certs: Path) -> None:
    """Issue 34, item 7: the controller's commands went through a client built without TLS, so under mutual
    TLS a member that did not lead the controller group could record nothing: a primary elected there was
    never confirmed, and a dead primary never replaced. Commands now travel over the peer links, which carry
    the nodes' certificates. Each member in turn leads the data group, and its takeover is recorded
    whichever member leads the controller group; after its process is killed, another takes over."""
    ha = {"ack": "sync", "controller": "ctl", "ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 800,
          "failover_timeout_ms": 800}
    cluster = cluster_factory(nodes=3, tls_dir=certs, replication="primary-backup", ha=ha)
    tls = client_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")
    with Client(cluster.endpoints, group="g0", tls=tls, retry_timeout=30) as c:
        first = c.append(b"before")
        for target in ("n1", "n2"):  # promotions make each member the primary in turn
            assert c.promote(target)[0] == target
            assert c.append(target.encode()).index > first.index
        primary = c.metadata(with_nodes=False).leader
        assert primary == "n2"
        cluster.kill(2)
        after = c.append(b"after the failover")  # retried until the controller elected an in-sync backup
        assert c.metadata(with_nodes=False).leader in ("n0", "n1")
        assert [e.body for e in c.read(first.index, 4)] == [b"before", b"n1", b"n2", b"after the failover"]
        assert after.index == first.index + 3
