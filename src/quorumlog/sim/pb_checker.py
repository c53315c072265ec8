"""The primary/backup simulator's checker (pb.py): the Raft simulator's checks, with acknowledged entries
held by the controller's recorded primary and in-sync set rather than by a majority."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..store.base import LogStore
from .checker import Checker, InvariantViolation, chain_at, header_at

if TYPE_CHECKING:
    from .pb import PbCluster


class PbChecker(Checker):
    """The Raft simulator's checks, with (a) held by the recorded primary and in-sync set, not a majority."""

    first_term = 1  # a new group's epoch 1, led by the configured primary, is never saved (ha/node.py)

    def __init__(self, cluster: PbCluster) -> None:
        super().__init__(cluster.ids, lambda i: cluster.members[i].store if cluster.members[i].node else None)
        self.stopped_store = lambda i: cluster.members[i].store
        self.cluster = cluster
        # Members whose recovery cut entries they may have acknowledged as a torn tail (the "tail" fault),
        # each with the durable end it had: they lack what they acknowledged, knowing it only as a primary
        # by its own store, until they reach that end again. A copy lost after its ack, as a wiped one.
        self.tail_cut: dict[str, int] = {}

    def _check_end(self, node: str, store: LogStore) -> None:
        """Log matching at durable ends: a primary restarted in its epoch (no controller) rewrites the
        unflushed tail it lost, which nobody else held (only durable entries are streamed)."""
        if (d := store.durable_index) >= store.begin_index:
            h = header_at(store, d)
            if self.end_entries.setdefault((d, h[3]), h[6]) != h[6]:
                raise InvariantViolation(f"log matching: {node} holds entry {d} of epoch {h[3]}, differently")

    def _check_acked_majority(self) -> None:
        idx, c = self.max_acked, self.cluster
        for i, end in list(self.tail_cut.items()):
            if c.members[i].store.durable_index >= end:
                del self.tail_cut[i]
        if idx < 0 or idx >= len(self.ref):
            return
        recorded = {c.record.primary, *c.record.isr} if c.cfg.controller else {c.ids[0]}
        for i in sorted(recorded):
            if i in self.damaged or i in self.tail_cut:
                continue  # a replaced disk, until the controller leaves it out (on_leader checks it never leads)
            s = c.members[i].store
            at = max(idx, min(s.begin_index - 1, len(self.ref) - 1))  # expired entries: its first vouches
            if chain_at(s, at) != self.ref_chain[at] or s.durable_index < at:
                raise InvariantViolation(f"{i} (recorded {'primary' if i == c.record.primary else 'in sync'}) lacks "
                                         f"acknowledged entries up to {idx}: durable end {s.durable_index}")
