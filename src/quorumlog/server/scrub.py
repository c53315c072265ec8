"""The background scrub: a group's committed log read back at a low rate, every entry checked.

Bit rot in an entry nobody reads stays unseen: recovery checks only what follows the checkpoint, and a
read checks only what it reads. Found late, when a follower needs that entry or the other copies are
gone, it is lost. The scrub finds it while the peers still hold good copies, and the group handles it as
a read that met damage (Group.on_corruption): a Raft member cuts its log there and fetches the rest
again; a backup is streamed it again; a primary has a backup elected in its place, then does the same
(ha/node.py report_corruption).

A pass walks begin..committed; the next pass starts `scrub_interval_hours` after the last one started
(the first SCRUB_FIRST_DELAY_S after start, or sooner with a shorter interval). The node reads at most
`scrub_bytes_per_s` over all its groups (server/node.py shares it). Each step runs on the event loop,
which alone changes the log, between other work: it holds the loop for one housekeeping tick's share of
the rate (0.8 MiB at the default 8 MiB/s), read mostly from the disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CorruptEntryError
from .store import NodeStore

SCRUB_FIRST_DELAY_S = 60.0


class Scrubber:
    """One group's scrub: where its pass is, and what it found."""

    def __init__(self, store: NodeStore, interval_s: float, now_s: float,
                 on_damage: Callable[[CorruptEntryError], None]) -> None:
        self.store = store
        self.interval_s = interval_s
        self.on_damage = on_damage
        self.next_pass_s = now_s + min(SCRUB_FIRST_DELAY_S, interval_s)
        self.pass_started_s: float | None = None  # None: between passes
        self.cursor = 0  # the next index to check in this pass
        self.passes = 0  # passes completed
        self.scrubbed_bytes = 0  # read back and checked, over all passes
        self.damaged = 0  # damaged entries found (each cut there and fetched again, or reported)
        self.last_pass_s: float | None = None  # how long the last completed pass took

    def due(self, now_s: float) -> bool:
        """A pass runs, or one is due to start."""
        return self.pass_started_s is not None or now_s >= self.next_pass_s

    def step(self, now_s: float, budget: int) -> None:
        """Check about `budget` bytes of the pass (the node shares its rate among the groups scrubbing)."""
        store = self.store
        if self.pass_started_s is None:
            if now_s < self.next_pass_s:
                return
            self.pass_started_s, self.cursor = now_s, store.begin_index
            self.next_pass_s = now_s + self.interval_s
        last = min(store.committed_index, store.durable_index)
        start = max(self.cursor, store.begin_index)
        if start > last:
            self._end_pass(now_s)
            return
        try:
            self.cursor, n = store.scrub(start, last, max(1, budget))
        except CorruptEntryError as e:
            # The group cuts its log there and fetches the rest again, checking it as it arrives (a primary
            # once replaced): this pass ends; the next one, an interval later, reads the log again.
            self.damaged += 1
            self.pass_started_s = None
            self.on_damage(e)
            return
        self.scrubbed_bytes += n
        if self.cursor > last:
            self._end_pass(now_s)

    def _end_pass(self, now_s: float) -> None:
        if self.pass_started_s is not None:
            self.passes += 1
            self.last_pass_s = now_s - self.pass_started_s
        self.pass_started_s = None

    def doc(self) -> dict[str, Any]:
        """The scrub in a group's status."""
        return {"running": self.pass_started_s is not None, "cursor": self.cursor, "passes": self.passes,
                "scrubbed_bytes": self.scrubbed_bytes, "damaged": self.damaged, "last_pass_s": self.last_pass_s}
