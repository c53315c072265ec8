"""How many entries per second the Raft core alone moves through a 3-node cluster (no network, no
disk): MemoryStores, messages handed straight to their target, batches of 64 x 1 KiB bodies.

    python benchmarks/core_bench.py [--entries 400000] [--batch 64] [--body 1024] [--window 16] [--profile]
                                    [--idempotent]

It prints entries/s committed and acknowledged, with the share of time spent in the store (encode,
CRC, copies) versus the core. Nothing here asserts a figure; see docs/testing.md for recorded runs.
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import pstats
import random
import struct
import time
from collections import deque
from collections.abc import Sequence

from quorumlog.config import RaftConfig, StoreConfig
from quorumlog.core.driver import Driver
from quorumlog.core.ready import Completion
from quorumlog.raft.member import members_digest
from quorumlog.raft.messages import Message
from quorumlog.raft.node import RaftNode
from quorumlog.store.base import Appended, Damage
from quorumlog.store.memory import MemoryStore

GROUP = "bench"
_RUN = struct.Struct(">qqq")  # first index, count, term


class CountingStore:
    """Index and term bookkeeping only, per batch: no bytes, no CRCs. With it the benchmark measures
    the core's own cost, the ceiling a faster store could reach. Not a LogStore to use anywhere else."""

    def __init__(self) -> None:
        self.firsts: list[int] = []  # first index of each run, for bisect
        self.runs: list[tuple[int, int, int]] = []  # (first, count, term)
        self.end_index = -1
        self.committed_index = -1
        self.durable_index = -1
        self.begin_index = 0
        self.write_pos = 0
        self.damage: Damage | None = None
        self.recovering = False
        self.configs: tuple[tuple[int, int, bytes], ...] = ()  # (no membership change in a benchmark)
        self._vote: tuple[int, str | None] = (0, None)

    @property
    def end_term(self) -> int:
        return self.runs[-1][2] if self.runs else 0

    def _add(self, first: int, count: int, term: int) -> None:
        self.firsts.append(first)
        self.runs.append((first, count, term))
        self.end_index = first + count - 1

    def append(self, bodies: Sequence[bytes], term: int, magic: int = 1, metas: object = None) -> Appended:
        first = self.end_index + 1
        self._add(first, len(bodies), term)
        return Appended(first, term, [0] * len(bodies))

    def append_encoded_metas(self, data: bytes) -> tuple[int, list[tuple[int, bytes]]]:
        return self.append_encoded(data), []

    def append_encoded(self, data: bytes) -> int:
        for off in range(0, len(data), _RUN.size):
            first, count, term = _RUN.unpack_from(data, off)
            if first != self.end_index + 1:
                raise AssertionError("gap")
            self._add(first, count, term)
        return self.end_index

    def read_raw(self, start: int, max_count: int, max_bytes: int) -> tuple[bytes, int]:
        out: list[bytes] = []
        if start > self.end_index:
            return b"", 0
        i = bisect.bisect_right(self.firsts, start) - 1
        n = 0
        while i < len(self.runs) and n < max_count:
            first, count, term = self.runs[i]
            lo = max(first, start + n)
            take = min(first + count - lo, max_count - n)
            out.append(_RUN.pack(lo, take, term))
            n += take
            i += 1
        return b"".join(out), n

    def term_at(self, index: int) -> int:
        if index < 0:
            return 0
        return self.runs[bisect.bisect_right(self.firsts, index) - 1][2]

    def set_committed(self, index: int) -> None:
        self.committed_index = max(self.committed_index, min(index, self.end_index))

    def truncate_after(self, index: int) -> None:
        raise AssertionError("no truncation in a fault-free run")

    def flush(self) -> int:
        self.durable_index = self.end_index
        return self.durable_index

    def checkpoint(self) -> None:
        pass

    def load_vote(self) -> tuple[int, str | None]:
        return self._vote

    def save_vote(self, term: int, voted_for: str | None) -> None:
        self._vote = (term, voted_for)

    def set_recovering(self, recovering: bool) -> None:
        self.recovering = recovering

    stable_unsaved = False  # (durable at once: nothing to persist later)

    def persist_stable(self) -> None:
        pass

    identity: str | None = None

    def set_identity(self, identity: str) -> None:
        self.identity = identity

    def producer_snapshot(self) -> bytes | None:
        return None  # (a benchmark starts with an empty log)

    def save_producer_snapshot(self, blob: bytes) -> None:
        pass


class Bench:
    def __init__(self, batch: int, body: int, window: int, counting: bool = False, idempotent: bool = False) -> None:
        self.idempotent = idempotent  # each batch from producer 1, numbered (the idempotent client)
        self.ids = ["n0", "n1", "n2"]
        cfg = RaftConfig(max_inflight_pushes=64, push_batch_entries=batch * 4, push_batch_bytes=4 << 20,
                         max_pending_requests=100_000)
        store_cfg = StoreConfig(data_segment_bytes=1 << 30)
        self.stores = {i: CountingStore() if counting else MemoryStore(store_cfg) for i in self.ids}
        for store in self.stores.values():  # members of a bootstrapped group: no probe round
            store.set_identity(members_digest(GROUP, self.ids))
        self.nodes = {i: RaftNode(i, GROUP, self.ids, self.stores[i], cfg, random.Random(k))  # type: ignore[arg-type]
                      for k, i in enumerate(self.ids)}
        self.queue: deque[Message] = deque()
        self.acked = 0
        self.inflight = 0
        self.window = window
        self.bodies = [bytes([65 + i % 26]) * body for i in range(batch)]
        self.drivers = {i: Driver(self.nodes[i], self.queue.append, self._done) for i in self.ids}
        self.now = 0

    def _done(self, c: Completion) -> None:
        self.inflight -= 1
        if c.code == 200:
            self.acked += c.last_index - c.first_index + 1

    def pump(self) -> None:
        """Deliver everything queued, one step_batch per target (a loop iteration of a real server)."""
        while self.queue:
            batches: dict[str, list[Message]] = {}
            while self.queue:
                m = self.queue.popleft()
                batches.setdefault(m.target, []).append(m)
            for target, msgs in batches.items():
                self.drivers[target].apply(self.nodes[target].step_batch(msgs, self.now), self.now)

    def elect(self) -> RaftNode:
        leader = self.nodes["n0"]
        while not leader.is_leader:
            self.now += 100
            self.drivers["n0"].apply(leader.tick(self.now), self.now)
            self.pump()
        return leader

    def run(self, entries: int) -> float:
        leader = self.elect()
        driver = self.drivers["n0"]
        batch = len(self.bodies)
        proposed = 0
        start = time.perf_counter()
        while self.acked < entries:
            while self.inflight < self.window and proposed < entries:
                self.inflight += 1
                proposed += batch
                if self.idempotent:
                    ready = leader.propose(self.bodies, self.now, producer=1, seq=proposed // batch - 1,
                                           wall_ms=self.now)
                else:
                    ready = leader.propose(self.bodies, self.now)
                driver.apply(ready, self.now)
            self.pump()
        elapsed = time.perf_counter() - start
        self.now += 10  # idle followers learn the last commit index at the leader's next tick
        driver.apply(leader.tick(self.now), self.now)
        self.pump()
        return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=400_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--window", type=int, default=16, help="batches the client keeps in flight")
    p.add_argument("--profile", action="store_true", help="print the top functions by own time")
    p.add_argument("--idempotent", action="store_true", help="batches carry a producer id and sequence")
    p.add_argument("--core-only", action="store_true",
                   help="a bookkeeping-only store: the core's own ceiling, without encoding and CRCs")
    args = p.parse_args()
    bench = Bench(args.batch, args.body, args.window, counting=args.core_only, idempotent=args.idempotent)
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    elapsed = bench.run(args.entries)
    if prof:
        prof.disable()
    leader = bench.stores["n0"]
    assert all(s.committed_index == leader.committed_index for s in bench.stores.values())
    kind = "bookkeeping-only store" if args.core_only else "MemoryStore"
    print(f"core bench ({kind}): 3 nodes, batches of {args.batch} x {args.body} B, window {args.window}: "
          f"{bench.acked} entries acknowledged in {elapsed:.2f}s = {bench.acked / elapsed:,.0f} entries/s "
          f"({bench.acked * args.body / elapsed / 2**20:,.0f} MiB/s of bodies)")
    if prof:
        stats = pstats.Stats(prof)
        store_time = sum(v[2] for k, v in stats.stats.items() if "store" in k[0] or "entry.py" in k[0])  # type: ignore[attr-defined]
        total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
        print(f"own time in store/entry code: {store_time / total:.0%} of {total:.2f}s profiled")
        stats.sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
