"""Per-node and per-connection limits, on real nodes: a client that never reads its answers cannot grow
a node's memory past its output limit, a connection flood past max_connections is refused while the
clients already connected keep working, and a READ asking for more than a frame holds is answered with
one frame's worth."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
from typing import Any

import msgpack

from quorumlog import Client
from quorumlog.errors import ResponseCode
from quorumlog.net.frames import PROTOCOL_VERSION, REQUEST, RESPONSE, encode_frame
from quorumlog.net.ops import Op
from quorumlog.net.schemas import HELLO_REQUEST, READ_REQUEST, TAIL_REQUEST

from .conftest import rss_mib
from .test_server_robustness import _hello, _recv_all, _still_serving

MiB = 1 << 20




def _metric(cluster: Any, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(cluster.nodes[0].admin_url + "/metrics", timeout=5).read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name + "{") and want in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in /metrics")


def _fill(cluster: Any, count: int, size: int) -> None:
    with Client(cluster.endpoints, group="g0") as c:
        for k in range(0, count, 500):
            c.append_many([bytes([k % 251]) * size] * min(500, count - k))


def test_a_client_that_never_reads_cannot_grow_the_node(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1, node={"max_output_bytes_per_connection": 2 * MiB})
    _fill(cluster, 4000, 1024)  # 4 MiB of entries
    pid = cluster.nodes[0].proc.pid
    before = rss_mib(pid)
    with socket.create_connection(("127.0.0.1", cluster.nodes[0].port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        _hello(s)
        # 400 READs of up to 1 MiB each (400 MiB of answers without a limit), never read.
        body = READ_REQUEST.encode("g0", 0, 100_000, MiB, False)
        s.sendall(b"".join(encode_frame(REQUEST, Op.READ, 2 + i, body) for i in range(400)))
        deadline = time.monotonic() + 10
        while _metric(cluster, "quorumlog_limit_hits_total", limit="output") < 1:
            assert time.monotonic() < deadline, "the output limit never held the connection"
            time.sleep(0.05)
        time.sleep(0.5)  # what the node would buffer, it has by now
        grown = rss_mib(pid) - before
        assert grown < 64, f"the node grew by {grown:.0f} MiB for a client that does not read"
        _still_serving(cluster.endpoints)  # other clients are served meanwhile
    _still_serving(cluster.endpoints)


def test_connections_past_the_limit_are_refused_and_the_rest_keep_working(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1, node={"max_connections": 6})
    addr = ("127.0.0.1", cluster.nodes[0].port)
    with Client(cluster.endpoints, group="g0") as c:  # one connection held by a working client
        c.append(b"first")
        held = []
        for _ in range(5):
            s = socket.create_connection(addr)
            _hello(s)
            held.append(s)
        for _ in range(3):  # the node is full: each new one's HELLO is refused, saying why
            with socket.create_connection(addr) as s:
                s.sendall(encode_frame(REQUEST, Op.HELLO, 1,
                                       HELLO_REQUEST.encode(PROTOCOL_VERSION, "quorumlog", "client")))
                code, reason = msgpack.unpackb(_frames(_recv_all(s))[0][12:])[:2]
                assert code == ResponseCode.TOO_MANY_CONNECTIONS and "max_connections" in reason
        r = c.append(b"still here")  # the clients already connected keep working
        assert c.get(r.index).body == b"still here"
        assert _metric(cluster, "quorumlog_limit_hits_total", limit="connections") == 3
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    while True:  # the node notices the closes; new clients get in again
        try:
            _still_serving(cluster.endpoints)
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_a_read_larger_than_a_frame_is_answered_with_one_frame(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1, node={"max_frame_bytes": MiB})
    _fill(cluster, 3000, 1024)  # 3 MiB: more than one frame
    with socket.create_connection(("127.0.0.1", cluster.nodes[0].port)) as s:
        _hello(s)
        s.sendall(encode_frame(REQUEST, Op.READ, 2, READ_REQUEST.encode("g0", 0, 100_000, (1 << 32) - 1, False)))
        s.settimeout(10)
        (length,) = struct.unpack(">I", _exactly(s, 4))
        frame = _exactly(s, length)
        code, entries, nxt, committed = msgpack.unpackb(frame[12:])
        assert code == ResponseCode.SUCCESS
        assert 0 < len(entries) <= MiB and 0 < nxt < committed
    doc = urllib.request.urlopen(cluster.nodes[0].admin_url + "/metrics", timeout=5).read().decode()
    assert "quorumlog_reads_clamped_total" in doc and _metric(cluster, "quorumlog_reads_clamped_total") == 1
    assert json.loads(urllib.request.urlopen(cluster.nodes[0].admin_url + "/status", timeout=5).read())


def _frames(data: bytes) -> list[bytes]:
    """The frames in `data`, each without its 4-byte length."""
    out, off = [], 0
    while off + 4 <= len(data):
        (length,) = struct.unpack_from(">I", data, off)
        out.append(data[off + 4:off + 4 + length])
        off += 4 + length
    return out


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        b = s.recv(n - len(buf))
        assert b, "the node closed the connection"
        buf += b
    return buf


def test_tails_that_are_never_read_hold_to_the_output_limit(cluster_factory: Any) -> None:
    """Each TAIL subscription waits on its connection's unsent bytes: four of them on a connection that
    never reads hold about max_output_bytes_per_connection, not four copies of the log; a fifth TAIL past
    max_tails_per_connection is refused with a reason."""
    cluster = cluster_factory(nodes=1, node={"max_output_bytes_per_connection": 2 * MiB,
                                             "max_tails_per_connection": 4})
    _fill(cluster, 6000, 4096)  # 24 MiB of entries
    pid = cluster.nodes[0].proc.pid
    before = rss_mib(pid)
    with socket.create_connection(("127.0.0.1", cluster.nodes[0].port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        _hello(s)
        s.sendall(b"".join(encode_frame(REQUEST, Op.TAIL, 2 + i, TAIL_REQUEST.encode("g0", 0, False))
                           for i in range(4)))
        time.sleep(2.0)  # what the node would queue, it has by now
        grown = rss_mib(pid) - before
        assert grown < 40, f"the node grew by {grown:.0f} MiB for four tails that are not read"
        assert _metric(cluster, "quorumlog_limit_hits_total", limit="output") >= 1
        _still_serving(cluster.endpoints)
    with socket.create_connection(("127.0.0.1", cluster.nodes[0].port)) as s:
        _hello(s)
        s.sendall(b"".join(encode_frame(REQUEST, Op.TAIL, 2 + i, TAIL_REQUEST.encode("g0", 6000, False))
                           for i in range(5)))
        s.settimeout(10)
        codes = {}
        while len(codes) < 5:
            (length,) = struct.unpack(">I", _exactly(s, 4))
            frame = _exactly(s, length)
            if frame[2] == RESPONSE:
                codes[int.from_bytes(frame[4:12], "big")] = msgpack.unpackb(frame[12:])
        refused = [v for v in codes.values() if v[0] != ResponseCode.SUCCESS]
        assert len(refused) == 1 and refused[0][0] == ResponseCode.TOO_MANY_SUBSCRIPTIONS, codes
        assert "max_tails_per_connection" in refused[0][1]
