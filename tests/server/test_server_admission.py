"""Admission on real nodes: sockets that never finish a handshake (plain or TLS) hold slots of their own,
capped per address and closed within the handshake timeout, so they lock no client or peer out; and the
connections kept for peers stay free whatever clients hold."""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from quorumlog import Client
from quorumlog.errors import ResponseCode
from quorumlog.net.connection import connect
from quorumlog.net.frames import PROTOCOL_VERSION, REQUEST, encode_frame
from quorumlog.net.ops import Op
from quorumlog.net.schemas import HELLO_REQUEST
from quorumlog.raft.member import members_digest
from quorumlog.tls import client_context

from .test_server_robustness import _goodbye_reason, _still_serving

STRANGER = "127.0.0.2"  # another loopback address: the node sees a second remote host


def _dial(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _closed_within(socks: list[socket.socket], seconds: float) -> dict[socket.socket, bytes]:
    """The sockets the node closed within `seconds`, with what it sent each before closing."""
    got: dict[socket.socket, bytes] = {s: b"" for s in socks}
    closed: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + seconds
    while len(closed) < len(socks) and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([s for s in socks if s not in closed], [], [], left)
        for s in readable:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                b = b""
            if b:
                got[s] += b
            else:
                closed[s] = got[s]
    return closed


def test_sockets_that_never_say_hello_lock_nobody_out(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1, node={"max_connections": 4, "max_handshakes": 8,
                                             "max_handshakes_per_address": 3})
    port = cluster.nodes[0].port
    _still_serving(cluster.endpoints)  # (started)
    idle = [_dial(port, STRANGER) for _ in range(12)]  # one stranger, silent
    try:
        turned_away = _closed_within(idle, 1.5)
        assert len(turned_away) == 9, f"{len(turned_away)} of 12 silent sockets from one address closed at once"
        for data in turned_away.values():
            reason = _goodbye_reason(data)
            assert reason is not None and reason[0] == ResponseCode.TOO_MANY_CONNECTIONS
            assert "max_handshakes_per_address" in reason[1]
        # Clients and the node's admin get in meanwhile, at once: the silent ones hold no place of theirs.
        with Client(cluster.endpoints, group="g0", retry_timeout=2) as c:
            r = c.append(b"served")
            assert c.get(r.index).body == b"served"
        more = [_dial(port, f"127.0.0.{k}") for k in range(3, 6) for _ in range(3)]  # 9 more, 3 hosts
        assert len(_closed_within(more, 1.0)) == 4, "the cap of 8 handshakes over every address"
        idle += more
        # The ones kept are closed once the HELLO timeout passes.
        kept = [s for s in idle if s not in turned_away]
        assert len(_closed_within(kept, 8.0)) == len(kept)
    finally:
        for s in idle:
            s.close()


def test_connections_kept_for_peers_stay_free_of_clients(cluster_factory: Any) -> None:
    """max_connections 6 on a 3-node cluster keeps 3 for peers: clients fill the rest and are refused,
    while a peer (one that restarts, say) still gets in."""
    cluster = cluster_factory(nodes=3, node={"max_connections": 6})
    port = cluster.nodes[0].port
    _still_serving(cluster.endpoints)  # (started)
    time.sleep(0.5)  # (and the connections of that client closed)
    held: list[socket.socket] = []

    async def as_peer() -> None:
        groups = {"g0": members_digest("g0", ["n0", "n1", "n2"])}
        conn = await connect("127.0.0.1", port, cluster="quorumlog", node_id="n2", groups=groups, timeout=5)
        assert conn.is_established
        conn.close()
        await conn.wait_closed()

    try:
        while True:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(encode_frame(REQUEST, Op.HELLO, 1, HELLO_REQUEST.encode(PROTOCOL_VERSION, "quorumlog", "client")))
            head = s.recv(4, socket.MSG_WAITALL)
            code = int(msgpack.unpackb(s.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL)[12:])[0])
            if code != ResponseCode.SUCCESS:
                assert code == ResponseCode.TOO_MANY_CONNECTIONS
                s.close()
                break
            held.append(s)
        assert len(held) == 3, f"{len(held)} clients let in; 3 places of 6 are the clients'"
        asyncio.run(as_peer())
    finally:
        for s in held:
            s.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    r = subprocess.run([sys.executable, "-m", "quorumlog", "certs", "init", "--dir", str(d), "--nodes", "n0",
                        "--clients", "client"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return d


def test_sockets_that_never_start_tls_are_capped_and_timed_out(cluster_factory: Any, certs: Path) -> None:
    """Counted from their accept, not from the end of a TLS handshake they never start: past the cap they
    are closed at once, and the rest within the handshake timeout rather than asyncio's 60 s."""
    cluster = cluster_factory(nodes=1, tls_dir=certs, node={"max_handshakes": 40, "max_handshakes_per_address": 4})
    port = cluster.nodes[0].port
    tls = client_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")
    with Client(cluster.endpoints, group="g0", tls=tls, retry_timeout=30) as c:
        c.append(b"started")
    silent = [_dial(port, STRANGER) for _ in range(40)]
    try:
        assert len(_closed_within(silent, 1.5)) == 36
        with Client(cluster.endpoints, group="g0", tls=tls, retry_timeout=5) as c:
            r = c.append(b"over tls")
            assert c.get(r.index).body == b"over tls"
        assert len(_closed_within(silent, 8.0)) == 40, "silent TLS sockets outlived the handshake timeout"
    finally:
        for s in silent:
            s.close()


def _churn(port: int, tls: ssl.SSLContext | None, rounds: int) -> None:
    """Connections that end every way a handshake can fail, one after another from 127.0.0.1."""
    hello = encode_frame(REQUEST, Op.HELLO, 1, HELLO_REQUEST.encode(PROTOCOL_VERSION, "elsewhere", "client"))
    for k in range(rounds):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            if k % 4 == 1:
                s.sendall(b"GET / HTTP/1.1\r\n\r\n")  # no frame, and no TLS either
            elif k % 4 >= 2 and tls is not None:
                try:
                    s = tls.wrap_socket(s, server_hostname="n0")
                    if k % 4 == 3:
                        s.sendall(hello)
                except (ssl.SSLError, OSError):
                    pass
            elif k % 4 == 2:
                s.sendall(hello)  # refused: another cluster
            elif k % 4 == 3:
                s.sendall(hello[:7])  # half a frame
        finally:
            s.close()


@pytest.mark.parametrize("with_tls", [False, True], ids=["plain", "tls"])
def test_every_failed_handshake_gives_its_place_back(cluster_factory: Any, certs: Path, with_tls: bool) -> None:
    """120 handshakes that fail or are cut, every way, from one address with a cap of 4 per address: if a
    single place leaked the address would be locked out for good."""
    kwargs: dict[str, Any] = {"tls_dir": certs} if with_tls else {}
    cluster = cluster_factory(nodes=1, node={"max_handshakes_per_address": 4}, **kwargs)
    ca, cert, key = certs / "ca.pem", certs / "client.pem", certs / "client.key"
    good = client_context(ca, cert, key) if with_tls else None
    with Client(cluster.endpoints, group="g0", tls=good, retry_timeout=30) as c:
        c.append(b"started")
    no_cert = client_context(ca) if with_tls else None
    _churn(cluster.nodes[0].port, no_cert, 60)
    _churn(cluster.nodes[0].port, good, 60)
    time.sleep(0.5)
    with Client(cluster.endpoints, group="g0", tls=good, retry_timeout=3) as c:
        r = c.append(b"after the churn")
        assert c.get(r.index).body == b"after the churn"
