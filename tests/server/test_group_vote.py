"""A group writes term and vote off the event loop, and sends nothing that depends on them before they
are durable: every vote request and vote answer leaves only once `currterm` on disk holds its term."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from quorumlog.config import GroupConfig, RaftConfig, StoreConfig
from quorumlog.raft.messages import ProbeRequest, ProbeResponse, VoteRequest, VoteResponse
from quorumlog.server.group import Group
from quorumlog.store.checkpoint import read_stable
from quorumlog.store.file_store import store_dir

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}
STORE = StoreConfig(data_segment_bytes=8 << 20, index_segment_bytes=1 << 16)
# No pre-vote and a 20 ms timeout: the first campaign raises the term at once.
RAFT = RaftConfig(heartbeat_interval_ms=10, max_heartbeat_leak=2, election_backoff_ms=0, pre_vote=False)


async def _run(tmp_path: Path) -> list[tuple[Any, tuple[int, str | None]]]:
    sent: list[tuple[Any, tuple[int, str | None]]] = []
    directory = store_dir(str(tmp_path), "g0", "n0")

    def send(m: Any) -> None:  # what `currterm` on disk says at the moment each message leaves
        st = read_stable(directory)
        sent.append((m, (st.term, st.voted_for)))

    fatal: list[BaseException] = []
    g = Group("n0", GroupConfig("g0", PEERS, raft=RAFT, store=STORE), str(tmp_path), send, fatal.append)
    try:
        deadline = time.monotonic() + 10
        g.tick()  # a pristine store probes the others first; both answer with empty logs
        probes = [m for m, _ in sent if type(m) is ProbeRequest]
        assert {m.target for m in probes} == {"n1", "n2"}
        g.inbox.extend(ProbeResponse("g0", m.target, "n0", 0, m.nonce, -1, 0) for m in probes)
        g.process()
        while not any(type(m) is VoteRequest for m, _ in sent):  # the node's own campaign
            assert time.monotonic() < deadline, "no campaign within 10 s"
            g.tick()
            await asyncio.sleep(0.005)
        term = g.node.term
        # A rival with a higher term and a longer log asks: the node moves to its term and votes for it.
        g.inbox.append(VoteRequest("g0", "n1", "n0", term + 3, 5, term + 2))
        g.process()
        while not any(type(m) is VoteResponse for m, _ in sent):
            assert time.monotonic() < deadline, "no vote answer within 10 s"
            await asyncio.sleep(0.005)
        assert not fatal
        return sent
    finally:
        await g.close()


def test_votes_leave_only_once_durable(tmp_path: Path) -> None:
    sent = asyncio.run(_run(tmp_path))
    requests = [(m, disk) for m, disk in sent if type(m) is VoteRequest]
    assert {m.target for m, _ in requests} == {"n1", "n2"}
    for m, disk in requests:
        assert disk == (m.term, "n0"), f"{m} sent while currterm held {disk}"
    answers = [(m, disk) for m, disk in sent if type(m) is VoteResponse]
    assert len(answers) == 1
    m, disk = answers[0]
    assert m.granted and m.target == "n1"
    assert disk == (m.term, "n1"), f"{m} sent while currterm held {disk}"
