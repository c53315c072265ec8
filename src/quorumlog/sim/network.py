"""A simulated network: per-message delay (so reordering), loss, duplication and partitions.

Partitions are a set of blocked directed links, checked when a message is sent and again when it would
be delivered, so a partition that forms while a message is in flight also stops it.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..raft.messages import Message


@dataclass(frozen=True, slots=True)
class Ping:
    """A node's word that it is alive (the server's NODE_PING): what a quiet group's followers wait on
    (raft/quiesce.py). It travels the same links as the group's messages, so it meets the same faults."""

    sender: str
    target: str


@dataclass(slots=True)
class LinkFaults:
    """How the network misbehaves right now."""

    drop: float = 0.0
    duplicate: float = 0.0
    min_delay_ms: int = 1
    max_delay_ms: int = 5


class Network:
    __slots__ = ("rng", "faults", "blocked", "partition_name", "_heap", "_seq", "sent", "dropped",
                 "duplicated", "delivered", "fifo", "_last")

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.faults = LinkFaults()
        self.blocked: set[tuple[str, str]] = set()
        self.partition_name = ""
        self._heap: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.sent = self.dropped = self.duplicated = self.delivered = 0
        self.fifo = False  # deliver each link's messages in order, as TCP does (Raft copes without)
        self._last: dict[tuple[Any, Any], int] = {}  # link -> when its latest message lands

    def partition(self, name: str, blocked: Iterable[tuple[str, str]]) -> None:
        self.partition_name = name
        self.blocked = set(blocked)

    def heal(self) -> None:
        self.partition_name = ""
        self.blocked = set()
        self.faults = LinkFaults()

    def can_reach(self, src: str, dst: str) -> bool:
        return (src, dst) not in self.blocked

    def send(self, msg: Message, now: int) -> bool:
        """Queue `msg`; False when the network drops it at once."""
        self.sent += 1
        f = self.faults
        rng = self.rng
        if (msg.sender, msg.target) in self.blocked or (f.drop and rng.random() < f.drop):
            self.dropped += 1
            return False
        copies = 2 if f.duplicate and rng.random() < f.duplicate else 1
        if copies == 2:
            self.duplicated += 1
        for _ in range(copies):
            self._seq += 1
            at = now + rng.randint(f.min_delay_ms, f.max_delay_ms)
            if self.fifo:
                link = (msg.sender, msg.target)
                at = self._last[link] = max(at, self._last.get(link, 0))
            heapq.heappush(self._heap, (at, self._seq, msg))
        return True

    def due(self, now: int) -> list[Message]:
        """Messages whose delivery time has come, in delivery order (partitions checked again)."""
        heap = self._heap
        out = []
        while heap and heap[0][0] <= now:
            msg = heapq.heappop(heap)[2]
            if (msg.sender, msg.target) in self.blocked:
                self.dropped += 1
                continue
            out.append(msg)
        self.delivered += len(out)
        return out

    def in_flight(self) -> int:
        return len(self._heap)


def partition_links(groups: list[list[str]], bridges: Iterable[str] = ()) -> set[tuple[str, str]]:
    """Block every link between different groups, except links touching a bridge node."""
    side = {n: i for i, g in enumerate(groups) for n in g}
    bridge = set(bridges)
    blocked = set()
    for a in side:
        for b in side:
            if a != b and side[a] != side[b] and a not in bridge and b not in bridge:
                blocked.add((a, b))
    return blocked


def ring_links(ids: list[str]) -> set[tuple[str, str]]:
    """Each node hears only its two ring neighbours: every node sees a majority of a 5-node group,
    but no two non-adjacent nodes can talk (the "majorities ring")."""
    n = len(ids)
    blocked = set()
    for i, a in enumerate(ids):
        for j, b in enumerate(ids):
            if i != j and (i - j) % n not in (1, n - 1):
                blocked.add((a, b))
    return blocked
