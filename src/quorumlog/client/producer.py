"""The client side of the idempotent producer: a producer id and the sequence numbers of its appends.

The leader remembers the last PRODUCER_WINDOW requests of a producer (core/producers.py), so a client
hands out a sequence only within that many of the oldest one not yet answered: a slow retry is always
recognised. A request refused as out of order goes again right after its predecessors are answered,
and no new request leaves meanwhile, so the pipeline is back in order at once. A request that ends
without success retires the id (its sequence may be missing, and the leader would hold every later one
back), unless the caller chose the id: then the caller (a Spark task that Spark retries) starts over.
"""

from __future__ import annotations

import asyncio
import random

PRODUCER_WINDOW = 64  # the leader's default producer_window: appends one client keeps in flight


def new_producer_id(rng: random.Random) -> int:
    """A random 63-bit id: two clients picking the same one is as unlikely as a UUID collision."""
    return rng.getrandbits(63) or 1


class Producer:
    """The producer id and sequences of one client (per group, as a client serves one group)."""

    def __init__(self, producer_id: int | None, max_in_flight: int, rng: random.Random) -> None:
        self._rng = rng
        self._owned = producer_id is not None  # the caller numbers and owns it: never retired
        self.id = producer_id if producer_id is not None else new_producer_id(rng)
        if not 0 < self.id < 1 << 63:
            raise ValueError("producer_id must be in 1..2^63-1")
        self.max_in_flight = max_in_flight
        self.changes = 0  # ids retired
        self._next_seq = 0
        self._outstanding: dict[tuple[int, int], None] = {}  # (id, seq) not yet answered, in order
        self._held: set[tuple[int, int]] = set()  # refused as out of order, waiting to go again
        self._window = asyncio.Condition()
        self._waiting = 0  # tasks waiting on _window: without any, an open window needs no lock

    async def take(self) -> tuple[int, int]:
        """The next (id, sequence), once the window allows it (behind any request already waiting)."""
        if self._waiting or not self._open():
            self._waiting += 1
            try:
                async with self._window:
                    await self._window.wait_for(self._open)
            finally:
                self._waiting -= 1
        key = (self.id, self._next_seq)  # no await since the window was seen open: it still is
        self._next_seq += 1
        self._outstanding[key] = None
        return key

    async def release(self, producer: int, seq: int) -> None:
        """The request is answered (or given up): it no longer holds the window."""
        self._held.discard((producer, seq))
        if self._outstanding.pop((producer, seq), 0) is None and self._waiting:
            async with self._window:
                self._window.notify_all()

    def hold(self, producer: int, seq: int) -> None:
        """The request was refused as out of order: no new request leaves until it has gone again."""
        self._held.add((producer, seq))

    def earlier_outstanding(self, producer: int, seq: int) -> bool:
        return any(p == producer and s < seq for p, s in self._outstanding)

    async def earlier_answered(self, producer: int, seq: int, deadline: float) -> bool:
        """Wait until every earlier request of `producer` is answered (the earliest one outstanding is
        never out of order). False if none was outstanding, or they were not answered by `deadline`."""
        def settled() -> bool:
            return not self.earlier_outstanding(producer, seq)

        if settled():
            return False  # refused all the same (a leader that has not caught up): back off instead
        self._waiting += 1
        try:
            async with self._window:
                await asyncio.wait_for(self._window.wait_for(settled),
                                       max(0.0, deadline - asyncio.get_running_loop().time()))
            return True
        except TimeoutError:
            return False
        finally:
            self._waiting -= 1

    def retire(self, producer: int) -> None:
        """A request of `producer` ended without success: continue under a new id."""
        if producer == self.id and not self._owned:
            self.id = new_producer_id(self._rng)
            self._next_seq = 0
            self.changes += 1

    def _open(self) -> bool:
        current = self.id
        oldest = next((s for p, s in self._outstanding if p == current), None)
        if oldest is None:
            return True
        return self._next_seq - oldest < self.max_in_flight and not any(p == current for p, _s in self._held)
