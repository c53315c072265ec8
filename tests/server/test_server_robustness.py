"""Hostile or mistaken input gets the right code or a closed connection, and the node keeps serving;
a node that cannot bind its port or open its data dir exits at once with one clear line."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from quorumlog import AsyncClient, Client, UnknownGroupError, UnknownMemberError
from quorumlog.errors import ResponseCode
from quorumlog.net.connection import connect
from quorumlog.net.errors import ConnectionClosedError
from quorumlog.net.frames import ONEWAY, PROTOCOL_VERSION, REQUEST, encode_frame
from quorumlog.net.ops import Op
from quorumlog.net.schemas import GOODBYE, HELLO_REQUEST
from quorumlog.server.cluster import free_ports

from .conftest import wait_leader


def _recv_all(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the node sends until it closes the connection (bounded by `timeout`)."""
    sock.settimeout(timeout)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            b = sock.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
    else:
        raise AssertionError("the node did not close the connection")
    return b"".join(chunks)


def _hello(sock: socket.socket, node_id: str = "client") -> None:
    sock.sendall(encode_frame(REQUEST, Op.HELLO, 1, HELLO_REQUEST.encode(PROTOCOL_VERSION, "quorumlog", node_id)))
    sock.settimeout(5)
    head = sock.recv(4)
    (length,) = struct.unpack(">I", head)
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    assert body[12:] and msgpack.unpackb(body[12:])[0] == 200


def _goodbye_reason(data: bytes) -> tuple[int, str] | None:
    off = 0
    while off + 16 <= len(data):
        (length,) = struct.unpack_from(">I", data, off)
        kind, op = data[off + 6], data[off + 7]
        if kind == ONEWAY and op == Op.GOODBYE:
            g = GOODBYE.decode(data[off + 16:off + 4 + length])
            return g.code, g.reason
        off += 4 + length
    return None


def _still_serving(endpoints: str) -> None:
    with Client(endpoints, group="g0") as c:
        r = c.append(b"still here")
        assert c.get(r.index).body == b"still here"


def test_hostile_bytes_close_only_that_connection(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1)
    addr = ("127.0.0.1", cluster.nodes[0].port)
    _still_serving(cluster.endpoints)

    # Garbage before HELLO.
    with socket.create_connection(addr) as s:
        s.sendall(b"\x00\x00\x00\x20" + b"\xff" * 64)
        _recv_all(s)
    # A 2 GiB length prefix, before and after HELLO: refused from the first four bytes.
    with socket.create_connection(addr) as s:
        s.sendall(struct.pack(">I", 2 << 30) + b"\x00" * 16)
        _recv_all(s)
    with socket.create_connection(addr) as s:
        _hello(s)
        s.sendall(struct.pack(">I", (2 << 30) - 1) + b"\x00\x01\x00\x0b" + b"\x00" * 8)
        reason = _goodbye_reason(_recv_all(s))
        assert reason is not None and "exceeds max_frame_bytes" in reason[1]
    # A well-framed APPEND whose body is not msgpack, and an unknown op.
    with socket.create_connection(addr) as s:
        _hello(s)
        s.sendall(encode_frame(REQUEST, Op.APPEND, 2, b"\xc1\xc1\xc1"))
        reason = _goodbye_reason(_recv_all(s))
        assert reason is not None and "msgpack" in reason[1]
    with socket.create_connection(addr) as s:
        _hello(s)
        s.sendall(encode_frame(REQUEST, 99, 2, msgpack.packb(["g0"])))
        reason = _goodbye_reason(_recv_all(s))
        assert reason is not None and "unknown operation" in reason[1]
    # APPENDs whose producer fields are out of range or of the wrong type: refused, nothing written.
    for fields in ([-1, 0, -2], [1 << 63, 0, -2], [7, -1, -2], [0, 3, -2], [7, 0, -3], ["7", 0, -2], [7, 0]):
        with socket.create_connection(addr) as s:
            _hello(s)
            s.sendall(encode_frame(REQUEST, Op.APPEND, 2, msgpack.packb(["g0", b"bad", *fields])))
            reason = _goodbye_reason(_recv_all(s))
            assert reason is not None and "AppendRequest" in reason[1], (fields, reason)
    # A batch with one body that is not bytes (a str, an int, a list) among bytes: refused whole.
    for odd in ("bad", 7, [b"bad"]):
        with socket.create_connection(addr) as s:
            _hello(s)
            s.sendall(encode_frame(REQUEST, Op.APPEND_BATCH, 2, msgpack.packb(["g0", [b"bad", odd, b"bad"]])))
            reason = _goodbye_reason(_recv_all(s))
            assert reason is not None and "AppendBatchRequest" in reason[1], (odd, reason)
    with Client(cluster.endpoints, group="g0") as c:
        assert all(e.body != b"bad" for e in c.read(0, 100))
    _still_serving(cluster.endpoints)


def test_wrong_group_and_wrong_member(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=3)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, group="nope", retry_timeout=2) as c:
            with pytest.raises(UnknownGroupError) as e:
                await c.append(b"x")
            assert e.value.code == ResponseCode.UNKNOWN_GROUP
            with pytest.raises(UnknownGroupError):
                await c.read_batch(0)
        async with AsyncClient(cluster.endpoints, group="g0") as c:
            await wait_leader(c, cluster)
            with pytest.raises(UnknownMemberError) as e2:
                await c.transfer_leader("n9")
            assert e2.value.code == ResponseCode.UNKNOWN_MEMBER
        # A peer frame from a node that is not a member closes that connection with UNKNOWN_MEMBER.
        node = cluster.nodes[0]
        conn = await connect("127.0.0.1", node.port, cluster="quorumlog", node_id="n9")
        vote = msgpack.packb(("g0", "n9", "n0", 5, 100, 5, True, False))
        conn.send(Op.VOTE, vote, 0)
        await asyncio.wait_for(conn.wait_closed(), 10)
        assert "not a member" in conn.close_reason
        # A member's malformed peer frame closes its connection too; the node goes on.
        conn = await connect("127.0.0.1", node.port, cluster="quorumlog", node_id="n1")
        conn.send(Op.PUSH, msgpack.packb(("g0", "n1", "n0", "not-a-term")), 0)
        await asyncio.wait_for(conn.wait_closed(), 10)
        assert "PushRequest" in conn.close_reason or "expected" in conn.close_reason
        with pytest.raises(ConnectionClosedError):
            conn.send(Op.VOTE, vote, 0)

    asyncio.run(main())
    _still_serving(cluster.endpoints)


def _serve(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "quorumlog", "serve", "--log-level", "WARNING", *args],
                          capture_output=True, text=True, timeout=60, cwd=tmp)


def test_node_that_cannot_bind_or_open_its_data_dir_exits_with_one_line(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        r = _serve(["--id", "n0", "--peers", f"n0=127.0.0.1:{port}", "--data-dir", str(tmp_path / "d")], tmp_path)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("quorumlog: error: cannot listen on 127.0.0.1:"), r.stderr

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = _serve(["--id", "n0", "--peers", f"n0=127.0.0.1:{port}", "--data-dir", str(blocker)], tmp_path)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("quorumlog: error: cannot open"), r.stderr

    r = _serve(["--id", "n0", "--data-dir", str(tmp_path)], tmp_path)
    assert r.returncode != 0 and r.stderr.strip().splitlines() == ["quorumlog: error: missing --peers "
                                                                    "(or give --config node.toml)"]


def test_shared_secret_admits_peers_and_clients_that_know_it(cluster_factory: Any) -> None:
    cluster = cluster_factory(secret="s3cret")
    with Client(cluster.endpoints, group="g0", secret="s3cret") as c:
        r = c.append(b"authenticated")
        assert c.get(r.index).body == b"authenticated"
    r2 = subprocess.run([sys.executable, "-m", "quorumlog", "append", "--endpoints", cluster.endpoints,
                         "--timeout", "2", "x"], capture_output=True, text=True, timeout=60)
    assert r2.returncode != 0 and len(r2.stderr.strip().splitlines()) == 1, r2.stderr


def test_malformed_http_to_the_admin_port_is_answered_400_and_logged_in_one_line(cluster_factory: Any) -> None:
    """A request line too long, or a header that is not HTTP: answered 400, the node goes on, and the log
    gets one WARNING line each (aiohttp logged each at ERROR with a traceback: a way to flood the log)."""
    cluster = cluster_factory(nodes=1)
    node = cluster.nodes[0]
    host, port = node.admin_url.removeprefix("http://").rstrip("/").split(":")
    with Client(cluster.endpoints, retry_timeout=30) as c:  # the node is up, its admin port too
        c.append(b"up")
    for request in (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /status HTTP/1.1\r\nHost: x\r\nBad Header\x00: y\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(request)
            assert s.recv(100).split(b"\r\n")[0].endswith(b" 400 Bad Request")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")
    log = node.log_path.read_text()
    assert "Traceback" not in log and log.count("Error handling request") == 2, log[-2000:]
    assert all(" WARNING " in line for line in log.splitlines() if "Error handling request" in line)
