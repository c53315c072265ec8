"""The Raft simulator's fault injection (a Cluster mixin): link faults drawn every 100 steps, partitions of
several shapes, crashes (some past the member timeout), pauses, full disks and bit rot found on a running
node. Crashes, restarts and pauses themselves are the cluster's (cluster.py)."""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

from ..core.ready import Ready
from ..errors import CorruptEntryError
from .checker import Checker
from .network import LinkFaults, Network, partition_links, ring_links
from .nodes import FillableStore, SimNode

# Virtual time after which a leader's expiry stops waiting for a silent member (it is reset on return).
SIM_MEMBER_TIMEOUT_MS = 1500


class FaultInjection:
    """Cluster's fault injection (see the module docstring)."""

    if TYPE_CHECKING:
        rng: random.Random
        rot_rng: random.Random
        faults: set[str]
        time: int
        step_no: int
        net: Network
        ids: list[str]
        sims: dict[str, SimNode]
        partition_until: int
        known_leader: str | None
        checker: Checker
        stats: Counter[str]

        def crash(self, node_id: str, until: int) -> None: ...
        def pause(self, node_id: str, until: int) -> None: ...
        def _apply(self, sim: SimNode, ready: Ready) -> None: ...
        def _trace(self, node_id: str, text: str) -> None: ...

    def _inject_faults(self) -> None:
        rng = self.rng
        f = self.faults
        t = self.time
        if self.step_no % 100 == 1:
            self.net.faults = LinkFaults(
                drop=rng.uniform(0, 0.15) if "drop" in f else 0.0,
                duplicate=rng.uniform(0, 0.1) if "dup" in f else 0.0,
                min_delay_ms=1,
                max_delay_ms=rng.randint(5, 60) if "delay" in f else 5)
        if "partition" in f:
            if self.net.blocked and t >= self.partition_until:
                self.net.partition("", ())
                self._trace("net", "partition healed")
            elif not self.net.blocked and rng.random() < 0.02:
                self._partition()
        running = [i for i in self.ids if self.sims[i].node is not None]
        if "crash" in f and running and rng.random() < 0.01:
            # Some downtimes outlast the leader's member timeout, so expiry stops waiting for the node
            # and it must be reset when it returns.
            long_down = "expire" in f and rng.random() < 0.2
            self.crash(rng.choice(running), t + (SIM_MEMBER_TIMEOUT_MS + 500 if long_down else rng.randint(20, 800)))
        if "pause" in f and running and rng.random() < 0.01:
            self.pause(rng.choice(running), t + rng.randint(20, 600))
        if "full" in f and rng.random() < 0.006:
            self._fill_disk(rng.choice(self.ids), t + rng.randint(50, 1500))
        if "rot" in f and self.rot_rng.random() < 0.003:
            self._rot(self.sims[self.rot_rng.choice(self.ids)])

    def _rot(self, sim: SimNode) -> None:
        """A read (or the scrub) meets a damaged committed entry of a running node's: it cuts its log there
        (a leader steps down) and re-fetches it; one storage fault at a time, as at a crash."""
        store, node = sim.store, sim.node
        if (node is None or sim.paused_until is not None or self.checker.damaged
                or store.committed_index < store.begin_index
                or any(s.node is None or s.node.recovering or s.node.joining for s in self.sims.values())):
            return
        index = self.rot_rng.randint(store.begin_index, store.committed_index)
        self._apply(sim, node.report_corruption(CorruptEntryError("bit rot", index=index), sim.now(self.time)))
        self.checker.on_cut(sim.id, store)
        self.stats["rots"] += 1
        self._trace(sim.id, f"ROT: entry {index} found damaged; log cut to {store.end_index}")

    def _fill_disk(self, node_id: str, until: int) -> None:
        """The node's disk is full until `until` (or the heal): its store refuses appends, nothing written."""
        sim = self.sims[node_id]
        if not isinstance(sim.store, FillableStore) or sim.store.full:
            return
        sim.store.full = True
        sim.full_until = until
        self.stats["disks_full"] += 1
        self._trace(node_id, f"DISK FULL until {until}")

    def _free_disk(self, sim: SimNode) -> None:
        if isinstance(sim.store, FillableStore) and sim.store.full:
            sim.store.full = False
            self._trace(sim.id, "disk space back")
        sim.full_until = None

    def _partition(self) -> None:
        rng = self.rng
        ids = list(self.ids)
        kinds = ["halves", "isolate_leader", "bridge"] + (["ring"] if len(ids) >= 5 else [])
        kind = rng.choice(kinds)
        rng.shuffle(ids)
        if kind == "halves":
            k = rng.randint(1, len(ids) - 1)
            blocked = partition_links([ids[:k], ids[k:]])
        elif kind == "isolate_leader":
            leader = self.known_leader or ids[0]
            blocked = partition_links([[leader], [i for i in ids if i != leader]])
        elif kind == "bridge":
            bridge, rest = ids[0], ids[1:]
            k = max(1, len(rest) // 2)
            blocked = partition_links([rest[:k], rest[k:]], bridges=[bridge])
        else:
            blocked = ring_links(ids)
        self.net.partition(kind, blocked)
        self.partition_until = self.time + rng.randint(100, 1500)
        self.stats[f"partition_{kind}"] += 1
        self._trace("net", f"PARTITION {kind} {sorted(blocked)}")
