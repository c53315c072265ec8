"""Schema-valid but arbitrary peer messages into the Raft and primary/backup cores: whatever a peer sends
that passes the wire schema, the core answers or ignores it, and no exception leaves it (in a node one
would drop the rest of that batch of messages). Seeded random runs, each a node with a short log of its
own, fed messages whose fields lean towards the values that matter (its end index, terms near its own,
real encoded entries and frames, and garbage bytes), with ticks, flushes and proposals between them.

Found this way: a backup named primary by a peer in its own epoch tripped an assertion; a push whose
data held an impossible entry size made the overlap walk raise struct.error."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from quorumlog.config import HaConfig, StoreConfig
from quorumlog.errors import ResponseCode
from quorumlog.ha.messages import FRAME_HEADER
from quorumlog.ha.node import HaNode
from quorumlog.net.errors import ProtocolError
from quorumlog.net.frames import ONEWAY, Frame
from quorumlog.raft.node import RaftNode
from quorumlog.server.codec import _ROUTES, decode_message, encode_message
from quorumlog.sim.script import SCRIPT_RAFT
from quorumlog.store.memory import MemoryStore

IDS = ["n0", "n1", "n2"]
CODES = [int(c) for c in ResponseCode]
STORE = StoreConfig(data_segment_bytes=4096, index_segment_bytes=32 * 1024, max_body_bytes=1024)


def _store(rng: random.Random, entries: int, term: int) -> MemoryStore:
    s = MemoryStore(STORE)
    for i in range(entries):
        s.append([b"e%d." % i * rng.randint(1, 20)], term)
    s.flush()
    return s


def _value(name: str, rng: random.Random, end: int, runs: list[bytes]) -> Any:
    if name == "group":
        return "g0"
    if name in ("sender", "target"):
        return rng.choice(IDS)
    if name == "primary":
        return rng.choice([*IDS, None])
    if name in ("pre_vote", "transfer", "granted"):
        return rng.random() < 0.5
    if name == "data":
        return rng.choice(runs) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 100))
    if name == "frame":
        body = rng.choice(runs) if rng.random() < 0.6 else rng.randbytes(rng.randint(0, 60))
        size = len(body) if rng.random() < 0.8 else rng.randint(0, 200)
        return FRAME_HEADER.pack(rng.choice([-1, 0, rng.randint(0, 5000)]), size) + body
    if name == "epochs":
        return rng.randbytes(rng.choice([0, 7, 16, 32]))
    if name == "code":
        return rng.choice(CODES)
    if name == "kind":
        return rng.randint(0, 5)
    return rng.choice([0, 1, 2, 3, -1, end - 1, end, end + 1, rng.randint(-1, end + 10), rng.randint(0, 1 << 40)])


def _message(rng: random.Random, cls: type, end: int, runs: list[bytes]) -> Any:
    """A message of `cls` with drawn fields, as the peer's frame decodes it; None when the schema refuses it."""
    m = cls(**{f.name: _value(f.name, rng, end, runs) for f in dataclasses.fields(cls)})
    try:
        op, direction, body = encode_message(m)
        return decode_message(Frame(ONEWAY, op, direction, memoryview(bytes(body))))
    except (ProtocolError, TypeError, ValueError):
        return None


@pytest.mark.parametrize("mode", ["raft", "primary-backup"])
def test_cores_take_any_schema_valid_peer_message(mode: str) -> None:
    classes = [c for c in _ROUTES if c.__module__.endswith("raft.messages" if mode == "raft" else "ha.messages")]
    for seed in range(400):
        rng = random.Random(seed)
        donor = _store(rng, 40, 2)
        runs = [bytes(donor.read_raw(i, rng.randint(1, 5), 1 << 20)[0]) for i in range(35)]
        store = _store(rng, rng.randint(0, 30), 2)
        me = rng.choice(IDS)
        node: RaftNode | HaNode
        if mode == "raft":
            node = RaftNode(me, "g0", IDS, store, SCRIPT_RAFT, random.Random(seed))
        else:
            node = HaNode(me, "g0", IDS, store, HaConfig(replication="primary-backup", primary="n0", min_in_sync=1),
                          SCRIPT_RAFT, 0)
        now = 0
        for step in range(300):
            now += rng.randint(0, 300)
            roll = rng.random()
            where = f"seed {seed} step {step}"
            if roll < 0.1:
                node.tick(now)
            elif roll < 0.15:
                node.on_flushed(store.flush(), now)
            elif roll < 0.2:
                node.propose([b"x"], now)
            elif (m := _message(rng, rng.choice(classes), store.end_index, runs)) is not None:
                try:
                    node.step_batch([m], now)  # type: ignore[list-item]
                except Exception as e:
                    raise AssertionError(f"{where}: {type(m).__name__} {m} raised {e!r}") from e
