"""100,000 fuzzed frames over real sockets to a live 3-node cluster, Raft or primary/backup (with and
without a controller): every node stays up, its memory stays bounded, the cluster still serves
correctly afterwards, and no request met a handler's bug (each would be answered INTERNAL_ERROR and
logged "handler failed").

Most frames are well-formed requests with random field values (indexes, sizes, group names, bodies,
conditions; now and then a leadership transfer or a promotion, to any name), pipelined on a few
connections; one in a hundred is malformed (random bytes, a bad length, a body that is not msgpack, an
unknown op), each on a connection of its own, which the node closes."""

from __future__ import annotations

import random
import socket
import struct
import time
from typing import Any

import msgpack
import pytest

from quorumlog import Client
from quorumlog.net.frames import ONEWAY, REQUEST, encode_frame
from quorumlog.net.ops import Op

from .conftest import rss_mib
from .test_server_robustness import _hello

FRAMES = 100_000
MALFORMED_EVERY = 100
MiB = 1 << 20




def _valid(rng: random.Random, rid: int, force: bool) -> bytes:
    """A well-framed request whose fields are random but of the right types (answered, often with an error)."""
    group = rng.choice(["g0", "g0", "g0", "nope", "", "g0\x00", "x" * 255])
    index = rng.choice([-1, 0, 1, 5, rng.randrange(1 << 40), (1 << 63) - 1])
    op = rng.choice([Op.READ, Op.GET, Op.METADATA, Op.APPEND, Op.APPEND_BATCH, Op.TAIL, Op.UNTAIL, Op.STATUS,
                     Op.LEADERSHIP_TRANSFER if rng.random() < 0.01 else Op.GET, Op.PROMOTE])
    if op == Op.READ:
        body = [group, index, rng.choice([0, 1, 100, 1 << 20]), rng.choice([0, 1, 4096, (1 << 32) - 1]),
                rng.random() < 0.5]
    elif op == Op.GET:
        body = [group, index]
    elif op == Op.METADATA:
        body = [group]
    elif op == Op.APPEND:
        body = [group, rng.randbytes(rng.randrange(64))]
        if rng.random() < 0.3:
            body += [rng.randrange(1, 1 << 62), rng.randrange(0, 5), rng.choice([-2, -1, index])]
    elif op == Op.APPEND_BATCH:
        body = [group, [rng.randbytes(rng.randrange(32)) for _ in range(rng.randrange(0, 5))]]
    elif op == Op.TAIL:
        body = [group, index, rng.random() < 0.5]
    elif op == Op.UNTAIL:
        body = [rng.randrange(1 << 31)]
    elif op in (Op.LEADERSHIP_TRANSFER, Op.PROMOTE):  # (a Raft group refuses PROMOTE)
        body = [group, rng.choice(["n0", "n1", "n2", "n9", ""])]
        if op == Op.PROMOTE:
            body += [rng.choice([0, 1, 2, (1 << 63) - 1]), force and rng.random() < 0.5]
    else:
        body = [rng.choice([None, group])]
    return encode_frame(REQUEST, op, rid, msgpack.packb(body))


def _malformed(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if kind == 1:
        return struct.pack(">I", rng.choice([0, 3, 15, 1 << 31, (1 << 32) - 1])) + rng.randbytes(16)
    if kind == 2:
        return encode_frame(REQUEST, rng.choice([Op.READ, Op.APPEND, Op.GET]), 7, b"\xc1" + rng.randbytes(8))
    return encode_frame(rng.choice([REQUEST, ONEWAY]), rng.randrange(60, 256), 7, msgpack.packb(["g0"]))


def _drain(s: socket.socket) -> None:
    s.setblocking(False)
    try:
        while s.recv(1 << 20):
            pass
    except (BlockingIOError, ConnectionError):
        pass
    finally:
        s.setblocking(True)


@pytest.mark.parametrize("mode", ["raft", "primary-backup", "primary-backup with a controller"])
def test_100k_fuzzed_frames_leave_every_node_up(cluster_factory: Any, mode: str) -> None:
    """In primary/backup mode the promotions are real (a forced one may drop acknowledged entries, as
    documented, so none is forced there); a Raft group refuses them."""
    if mode == "raft":
        cluster = cluster_factory(nodes=3)
    else:
        ha = {"ack": "sync", "ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 1000}
        cluster = cluster_factory(nodes=3, replication="primary-backup",
                                  ha={**ha, "controller": "ctl"} if "controller" in mode else ha)
    rng = random.Random(20261123)
    with Client(cluster.endpoints, group="g0", retry_timeout=30) as c:
        c.append_many([b"seed"] * 50)
    pids = {n.node_id: n.proc.pid for n in cluster.nodes}
    before = {n: rss_mib(p) for n, p in pids.items()}
    conns = []
    for node in cluster.nodes:
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
            _hello(s)
            conns.append(s)
    sent = malformed = closed = 0
    rid = 1
    for i in range(FRAMES // MALFORMED_EVERY):  # 99 well-formed requests on a kept connection, 1 malformed frame
        k = i % len(conns)
        batch = b"".join(_valid(rng, rid + j, mode == "raft") for j in range(MALFORMED_EVERY - 1))
        rid += MALFORMED_EVERY - 1
        try:
            conns[k].sendall(batch)
            _drain(conns[k])  # a client that reads its answers (the limits test covers one that does not)
        except ConnectionError:  # the node refused a frame of the batch: count it, connect again
            closed += 1
            conns[k].close()
            conns[k] = socket.create_connection(("127.0.0.1", cluster.nodes[k // 2].port), timeout=10)
            _hello(conns[k])
        sent += MALFORMED_EVERY - 1
        node = rng.choice(cluster.nodes)
        with socket.create_connection(("127.0.0.1", node.port), timeout=10) as bad:
            if rng.random() < 0.7:
                _hello(bad)
            bad.sendall(_malformed(rng))
        malformed += 1
        sent += 1
    assert sent == FRAMES
    for s in conns:
        s.close()
    assert malformed == FRAMES // MALFORMED_EVERY
    assert closed == 0, f"{closed} batches of well-formed requests had a connection closed"
    time.sleep(1)
    for n in cluster.nodes:
        assert n.alive, f"{n.node_id} died"
        grown = rss_mib(pids[n.node_id]) - before[n.node_id]
        assert grown < 100, f"{n.node_id} grew by {grown:.0f} MiB"
    with Client(cluster.endpoints, group="g0", retry_timeout=30) as c:  # and still serves correctly
        r = c.append(b"after the storm")
        assert c.get(r.index).body == b"after the storm"
        assert [e.body for e in c.read(0, 51)].count(b"seed") == 50  # (a Raft log begins with a NOOP)
    for n in cluster.nodes:  # an answer INTERNAL_ERROR is a handler's bug: each logs "handler failed"
        assert "handler failed" not in n.log_path.read_text(), n.node_id
