"""A quiet group is ticked once a heartbeat interval instead of at every node tick (server/group.py): the
ticks of idle groups were most of a node's idle CPU. Any movement (an append, a commit, a role change, a
request waiting) has it ticked at every node tick again, at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from quorumlog.config import GroupConfig, RaftConfig, StoreConfig
from quorumlog.server import cadence
from quorumlog.server.group import Group

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}
STORE = StoreConfig(data_segment_bytes=8 << 20, index_segment_bytes=1 << 16)
RAFT = RaftConfig(heartbeat_interval_ms=100)


async def _ticks(tmp_path: Path) -> dict[str, Any]:
    g = Group("n0", GroupConfig("g0", PEERS, raft=RAFT, store=STORE), str(tmp_path), lambda m: None, print)
    core_ticks: list[int] = []
    tick = g.node.tick

    def counting(now: int) -> Any:
        core_ticks.append(now)
        return tick(now)

    g.node.tick = counting  # type: ignore[method-assign]
    try:
        busy = cadence.IDLE_AFTER_MS
        for now in range(0, busy, 10):  # a new group: its first second, every tick
            g.tick(now)
        first = len(core_ticks)
        for now in range(busy, busy + 1000, 10):  # quiet since: one core tick a heartbeat interval
            g.tick(now)
        quiet = len(core_ticks) - first
        g.store.append([b"x"], 1)  # the log moves: ticked at the next node tick, and every one after
        before = len(core_ticks)
        for now in range(busy + 1000, busy + 1100, 10):
            g.tick(now)
        return {"first": first, "quiet": quiet, "after": len(core_ticks) - before}
    finally:
        await g.close()


def test_a_quiet_group_is_ticked_once_a_heartbeat_interval_and_again_at_once_when_it_moves(tmp_path: Path) -> None:
    counts = asyncio.run(_ticks(tmp_path))
    assert counts["first"] == 100, counts
    assert 9 <= counts["quiet"] <= 11, counts  # 1000 ms / 100 ms
    assert counts["after"] == 10, counts
