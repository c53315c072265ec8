"""The controller in the primary/backup simulator (pb.py), as nodes run it: every member hosts a replica of
the controller group (a real RaftNode over its own MemoryStore, with its own driver, flushes, term writes,
checkpoints and expiry) and the node's ControllerCore (ha/controller_core.py), ticked as
server/controller.py ticks it. A command goes to the controller group's leader as a node sends it (a
`ControllerProposal` over the simulated network: a partition cuts it off like any message), or is appended
at once on the leader itself.

The ground truth the checks compare with is `ReferenceRecord`: the record applied from the controller
group's committed log as the Raft checker collects it (a second `Checker`, which also checks that group's
own Raft invariants).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..config import HaConfig, RaftConfig, StoreConfig
from ..core.appends import AppendRequest
from ..core.driver import Driver
from ..core.ready import Ready
from ..core.role import Role
from ..entry import HEADER, MAGIC_CONFIG, MAGIC_NORMAL
from ..ha.controller_core import Actions, ControllerCore, ControllerProposal
from ..ha.node import HaNode
from ..ha.record import Assignment, ControllerState
from ..raft.node import RaftNode
from .checker import Checker
from .nodes import FillableStore

CTL = "ctl"
CTL_STORE = StoreConfig(data_segment_bytes=256, index_segment_bytes=1024, max_body_bytes=160,
                        file_reserved_hours=0)  # small segments: the controller's log expires often
SNAPSHOT_EVERY = 8  # (the nodes' is 64: here snapshots, and logs that start after them, come often)


class CtlReplica:
    """One member's replica of the controller group and its controller core, for one incarnation."""

    def __init__(self, member: str, ids: list[str], store: FillableStore, ha: HaConfig, raft: RaftConfig,
                 rng: random.Random, send: Callable[[Any], None], on_leader: Callable[[int], None],
                 start_flush: Callable[[CtlReplica], None], start_persist: Callable[[CtlReplica], None]) -> None:
        self.member = member
        self.store = store
        self.node = RaftNode(member, CTL, ids, store, replace(raft, quiesce=False), rng)  # (as a node runs it)
        self.core = ControllerCore(member, {"pb": (CTL, ids, ha)}, snapshot_every=SNAPSHOT_EVERY)
        self.flush_at: int | None = None
        self.persist_at: int | None = None
        self.resets_seen = 0
        self._next_rid = 1
        self._send = send
        self.driver = Driver(self.node, send, lambda c: None,
                             lambda ch: on_leader(ch.term) if ch.role == Role.LEADER else None,
                             lambda: start_flush(self), lambda: start_persist(self))

    def apply(self, ready: Ready, now: int) -> None:
        self.driver.apply(ready, now)

    def tick(self, now: int, ha: HaNode | None) -> Actions:
        """The controller core's tick (the node's primary/backup core, unless it is down), its commands sent."""
        actions = self.core.tick(now, {CTL: self.node}, {} if ha is None else {"pb": ha})
        for _, body in actions.local:
            self.append(body, now)
        for _, body in actions.proposals:
            self.propose(body, now)
        return actions

    def propose(self, body: bytes, now: int) -> None:
        """As server/controller.py: appended here if this replica leads, else sent to the leader it knows."""
        if self.node.role == Role.LEADER:
            self.append(body, now)
        elif self.node.leader_id is not None:
            self._send(ControllerProposal(CTL, self.member, self.node.leader_id, body))

    def append(self, body: bytes, now: int) -> None:
        if self.node.role != Role.LEADER:
            return  # (a proposal that reached a node no longer leading: the client's retry goes elsewhere)
        rid, self._next_rid = self._next_rid, self._next_rid + 1
        self.apply(self.node.propose_many([AppendRequest(rid, [body])], now, now), now)

    def expiry_cap(self) -> int:
        return self.core.states[CTL].expiry_cap()


class ReferenceRecord:
    """The record of the committed controller log (the checker's `ref`), and its history: the primary
    elected for each epoch, and the epochs whose takeover was recorded."""

    def __init__(self, default: Assignment) -> None:
        self.state = ControllerState({"pb": default})
        self.primaries = {default.epoch: default.primary}
        self.taken = {default.epoch}
        self.counts: Counter[str] = Counter()  # the changes committed, by kind

    @property
    def current(self) -> Assignment:
        return self.state.groups["pb"]

    def follow(self, checker: Checker) -> None:
        ref = checker.ref
        for index in range(self.state.applied + 1, len(ref)):
            e = ref[index]
            h = HEADER.unpack_from(e, 0)
            if h[0] == MAGIC_CONFIG:  # the members (ha/record.py)
                self.counts["ctl_member_changes"] += 1
                self.state.apply_config(bytes(e[len(e) - h[8]:]))
            elif h[0] == MAGIC_NORMAL:
                before = self.current
                self.counts["ctl_snapshots"] += self.state.apply(bytes(e[len(e) - h[8]:]), index) == "*"
                a = self.current
                if a.epoch != before.epoch:  # an election; one of another primary is a failover (or hand-off)
                    self.counts["ctl_elections"] += 1
                    self.counts["failovers"] += a.primary != before.primary
                elif a.isr != before.isr:
                    self.counts["ctl_isr_changes"] += 1
                self.primaries.setdefault(a.epoch, a.primary)
                if a.taken:
                    self.taken.add(a.epoch)
            self.state.applied = index
