"""Cluster's side of quiet groups (raft/quiesce.py): the node pings a server sends, through the simulated
network, and the `idle` fault, which pauses the clients amid the faults so that crashes, partitions and
pauses also meet quiet groups."""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

from ..config import RaftConfig
from ..core.ready import Ready
from .network import Network, Ping
from .nodes import SimNode

if TYPE_CHECKING:
    from .cluster import SimConfig


class QuietGroups:
    """The node pings and the `idle` fault (see the module docstring)."""

    if TYPE_CHECKING:
        cfg: SimConfig
        raft: RaftConfig
        faults: set[str]
        time: int
        net: Network
        ids: list[str]
        stats: Counter[str]
        idle_rng: random.Random
        idle_until: int

        def _apply(self, sim: SimNode, ready: Ready) -> None: ...
        def _trace(self, node_id: str, text: str) -> None: ...

    def _idle(self, phase: str) -> bool:
        """Whether the clients pause this step (an idle span of 0.3-0.8 s starts now and then)."""
        if self.time < self.idle_until:
            return True
        if "idle" in self.faults and phase == "faults" and self.idle_rng.random() < 0.005:
            self.idle_until = self.time + self.idle_rng.randint(30, 80) * self.cfg.step_ms
            self.stats["idle_spans"] += 1
            self._trace("sim", f"IDLE: clients pause until {self.idle_until}")
            return True
        return False

    def _liveness(self, sim: SimNode) -> None:
        """What the server does for quiet groups: ping every other node once a heartbeat interval, and tell a
        quiet core of each peer node silent for an election timeout."""
        raft = self.raft
        if self.time >= sim.next_ping:
            sim.next_ping = self.time + raft.heartbeat_interval_ms
            for p in self.ids:
                if p != sim.id:
                    self.net.send(Ping(sim.id, p), self.time)  # type: ignore[arg-type]
        node = sim.node
        if node is None or not node.quiesced:
            return
        now = sim.now(self.time)
        for p in self.ids:
            if p != sim.id and now - sim.heard.get(p, sim.started_at) >= raft.election_timeout_ms:
                self._apply(sim, node.peer_down(p, now))
                if not node.quiesced:
                    self.stats["quiet_ended_node_silent"] += 1
                    self._trace(sim.id, f"QUIET ENDED: node {p} silent")
                    break
