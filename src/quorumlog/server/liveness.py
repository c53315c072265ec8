"""Which peer nodes are alive, for quiet Raft groups (raft/quiesce.py).

A quiet group sends nothing, so its followers cannot tell its leader's death from its silence. The
node can: every peer frame it receives (a group's message or a NODE_PING, which each node sends each
peer once a heartbeat interval, PeerLinks.ping) is word that the sender's node lives. A peer silent
for a group's election timeout is reported to that group's core if the group is quiet (`peer_down`),
which then runs its election timer again, or, on a leader, heartbeats again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .group import Group

log = logging.getLogger("quorumlog.server")


class PeerLiveness:
    """When each peer node was last heard from (milliseconds of the node's monotonic clock)."""

    __slots__ = ("heard", "started", "next_ping", "ping_ms")

    def __init__(self, started_ms: int, ping_ms: int) -> None:
        self.heard: dict[str, int] = {}
        self.started = started_ms  # a peer never heard is silent since the node started
        self.ping_ms = ping_ms
        self.next_ping = started_ms

    def heard_from(self, peer: str, now: int) -> None:
        self.heard[peer] = now

    def ping_due(self, now: int) -> bool:
        if now < self.next_ping:
            return False
        self.next_ping = now + self.ping_ms
        return True

    def wake_quiet(self, groups: Iterable[Group], peers: Iterable[str], now: int) -> None:
        """Tell each quiet group of every peer silent for its election timeout (the core ignores peers that
        are not its members, and a group that is not quiet is not asked)."""
        heard, started = self.heard, self.started
        silence = {p: now - heard.get(p, started) for p in peers}
        longest = max(silence.values(), default=0)
        told: dict[str, int] = {}
        for g in groups:
            if not g.node.quiesced:
                continue
            timeout = g.cfg.raft.election_timeout_ms
            if longest < timeout:
                continue
            for p, silent in silence.items():
                if silent >= timeout and g.node.quiesced:
                    g.peer_down(p, now)
                    told[p] = told.get(p, 0) + 1
        for p, n in told.items():
            log.info("node %s silent for %d ms: %d quiet group(s) told", p, silence[p], n)
