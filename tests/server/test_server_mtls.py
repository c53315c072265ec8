"""Mutual TLS on a real 3-node cluster, with certificates from `quorumlog certs init`: the cluster elects
and replicates over TLS; a client with a certificate of the CA appends and reads; a client without a
certificate, or with one of another CA, is refused; and a member presenting its own certificate while
claiming another node's id at HELLO is refused."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quorumlog import Client
from quorumlog.errors import QuorumLogError, ResponseCode
from quorumlog.net.connection import connect
from quorumlog.net.errors import HandshakeError, UnverifiedPeerError
from quorumlog.net.server import serve
from quorumlog.raft.member import members_digest
from quorumlog.tls import cert_identity, client_context, server_context

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


@pytest.fixture(scope="module")
def named_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("named-certs")
    r = subprocess.run([sys.executable, "-m", "quorumlog", "certs", "init", "--dir", str(d), "--nodes", "n0",
                        "--clients", "client,client:reader,client:stranger"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return d


def _usages(pem: Path) -> set[str]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem.read_bytes())
    return {u._name for u in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value}


def test_a_client_certificate_cannot_pose_as_a_node(named_certs: Path, tmp_path: Path) -> None:
    """A reader's certificate, served by someone posing as node n0, is refused by a client: by TLS itself
    for certificates made for client use only, and by the identity check for one that may also serve."""
    assert _usages(named_certs / "n0.pem") == {"serverAuth", "clientAuth"}
    assert _usages(named_certs / "client-reader.pem") == {"clientAuth"}
    # A certificate of the same CA naming a client but usable by a server (as certs made before were).
    serving = tmp_path / "serving-reader"
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", f"{serving}.key", "-out", f"{serving}.csr", "-subj", "/CN=client:reader"],
                   check=True, capture_output=True, timeout=60)
    ext = tmp_path / "ext.cnf"
    ext.write_text("subjectAltName=URI:quorumlog:client:reader,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", f"{serving}.csr", "-CA", str(named_certs / "ca.pem"),
                    "-CAkey", str(named_certs / "ca.key"), "-CAcreateserial", "-out", f"{serving}.pem", "-days", "1",
                    "-extfile", str(ext)], check=True, capture_output=True, timeout=60)
    client_tls = client_context(named_certs / "ca.pem", named_certs / "client.pem", named_certs / "client.key")

    async def pose(cert: Path, key: Path) -> BaseException:
        ctx = server_context(cert, key, named_certs / "ca.pem")
        async with await serve("127.0.0.1", 0, lambda c, f: b"", cluster="quorumlog", node_id="n0", ssl=ctx) as s:
            with pytest.raises((HandshakeError, OSError)) as e:
                await connect("127.0.0.1", s.port, cluster="quorumlog", ssl=client_tls, timeout=5)
            with pytest.raises((HandshakeError, OSError)):
                await connect("127.0.0.1", s.port, cluster="quorumlog", ssl=client_tls, expect_node="n0", timeout=5)
            return e.value

    refused = asyncio.run(pose(named_certs / "client-reader.pem", named_certs / "client-reader.key"))
    assert isinstance(refused, ssl.SSLError | ConnectionError), refused  # TLS: not a server's certificate
    refused = asyncio.run(pose(Path(f"{serving}.pem"), Path(f"{serving}.key")))
    assert isinstance(refused, UnverifiedPeerError) and "client:reader" in str(refused)


def test_client_certificates_get_their_tokens_permissions(cluster_factory: Any, named_certs: Path) -> None:
    """With TLS and no shared secret, a certificate naming client:reader may do what [[token]] reader allows
    (a token without a secret), one naming a client no token covers is refused, and "client" does all."""
    cluster = cluster_factory(nodes=1, tls_dir=named_certs, tokens=[{"name": "reader",
                                                                     "permissions": {"g0": ["read"]}}])
    ca = named_certs / "ca.pem"

    def tls(name: str) -> ssl.SSLContext:
        return client_context(ca, named_certs / f"{name}.pem", named_certs / f"{name}.key")

    with Client(cluster.endpoints, group="g0", tls=tls("client"), retry_timeout=30) as admin:
        r = admin.append(b"by the admin client")
    with Client(cluster.endpoints, group="g0", token="reader", tls=tls("client-reader"), retry_timeout=5) as reader:
        assert reader.get(r.index).body == b"by the admin client"
        with pytest.raises(QuorumLogError) as e:
            reader.append(b"not allowed")
        assert e.value.code == ResponseCode.PERMISSION_DENIED
    with Client(cluster.endpoints, group="g0", token="stranger", tls=tls("client-stranger"), retry_timeout=2) as s, \
            pytest.raises(QuorumLogError, match="no \\[\\[token\\]\\] gives it permissions"):
        s.get(r.index)
