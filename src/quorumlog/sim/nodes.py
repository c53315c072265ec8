"""One simulated node: its process state across crashes, pauses and skewed clocks (SimNode), and a
memory store whose disk can be full (FillableStore)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.driver import Driver
from ..entry import MAGIC_NORMAL
from ..errors import DiskFullError
from ..raft.messages import Message
from ..raft.node import RaftNode
from ..store.base import Appended, LogStore
from ..store.memory import MemoryStore


@dataclass(slots=True)
class SimNode:
    id: str
    store: LogStore
    node: RaftNode | None = None
    driver: Driver | None = None
    offset: int = 0
    rate: float = 1.0
    incarnation: int = 0
    crashed_until: int | None = None
    paused_until: int | None = None
    flush_at: int | None = None
    persist_at: int | None = None  # when its term and vote (held by the driver meanwhile) become durable
    backlog: list[Message] = field(default_factory=list)
    next_checkpoint: int = 0
    resets_seen: int = 0  # log resets this incarnation's node has made its store do
    full_until: int | None = None  # the "full" fault: the disk has space again then
    heard: dict[str, int] = field(default_factory=dict)  # peer -> when (its clock) it last heard of that node
    started_at: int = 0  # when (its clock) this incarnation started: a peer never heard is silent since
    next_ping: int = 0

    def now(self, t: int) -> int:
        return self.offset + int(t * self.rate)


class FillableStore(MemoryStore):
    """A MemoryStore whose disk can be full (the "full" fault): then every append raises DiskFullError and
    writes nothing, as a FileStore past disk_full_ratio does."""

    full = False

    def append(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL,
               metas: Mapping[int, bytes] | None = None) -> Appended:
        if self.full:
            raise DiskFullError("simulated full disk")
        return super().append(bodies, term, magic, metas)

    def append_encoded_metas(self, data: bytes | bytearray | memoryview) -> tuple[int, list[tuple[int, bytes]]]:
        if self.full:
            raise DiskFullError("simulated full disk")
        return super().append_encoded_metas(data)


def start_persist(r: Any, faults: set[str], rng: random.Random, now: int, step_ms: int) -> None:
    """A driver's term and vote write (`r` has store, driver and persist_at): with disk faults it usually
    lands a few steps later, the driver holding the node's messages meanwhile; a crash in between loses it."""
    if "disk" in faults and rng.random() < 0.6:
        r.persist_at = now + rng.randint(1, 3) * step_ms
    else:
        r.store.persist_stable()
        r.driver.persisted()
