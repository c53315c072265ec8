"""The idempotent producer's table: what each producer already wrote, rebuilt from the log itself.

A producer (a client instance, or a Spark task) numbers its append requests 0, 1, 2, ... per group. The
first entry of each request carries (producer, sequence, count, wall_ms) in its metadata run (entry.py),
so the table is a pure function of the log: every member keeps it as its log changes (leader appends,
follower appends, truncation, restart), and a new leader's table already holds every request of its log,
committed or not. The leader judges each request against it:

- the next sequence (last + 1) is NEW: written, and recorded;
- a sequence it holds within the last `window` requests is a DUPLICATE: answered with the original
  index range, nothing written;
- an older one is TOO_OLD (written once, long ago; its position is no longer kept);
- a later one is a GAP (an earlier request is missing: refused, the client resends in order);
- a producer the table does not know may only start at sequence 0 (UNKNOWN otherwise: expired, or
  its history was lost).

Memory is O(window) per producer (one of a few requests keeps those few, about 0.6 KB; a full window
about 3.5 KB), and producers idle for `idle_ms` (by the wall clock written in the log, so every member
expires the same ones) are dropped: a retry after that long is not recognised.

A request is atomic: its entries commit together or not at all. The table keeps the index span of each
request above the commit; the leader never ends a push inside one (followers then hold, acknowledge and
commit whole requests), and a node drops an uncommitted request it holds only the start of (a torn
tail) at start and before it leads. So a retry always finds its original whole, or not at all.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right
from collections.abc import Callable, Iterable

import msgpack

from ..entry import HEADER, HEADER_SIZE, META_SIZE, unpack_meta
from ..errors import CorruptEntryError, StoreError
from ..store.base import LogStore
from .producer_snapshot import VERSION as SNAPSHOT_VERSION
from .producer_snapshot import mark, verify

NEW = 0
DUPLICATE = 1
TOO_OLD = 2
GAP = 3
UNKNOWN = 4

DEFAULT_WINDOW = 64  # requests a producer may have in flight; the client keeps to it
SWEEP_EVERY = 4096  # records between two sweeps for idle producers
_SCAN_BYTES = 4 << 20


class Producer:
    """One producer's recent requests, oldest first: sequence `base` + i began at firsts[i] with counts[i]
    entries. At most `window` are kept, and a producer that wrote a few requests keeps only those (a
    Spark task is a producer of its own: most write a handful)."""

    __slots__ = ("base", "wall_ms", "firsts", "counts")

    def __init__(self, base: int) -> None:
        self.base = base
        self.wall_ms = 0
        self.firsts: list[int] = []
        self.counts: list[int] = []

    @property
    def last_seq(self) -> int:
        return self.base + len(self.firsts) - 1


class ProducerTable:
    __slots__ = ("window", "idle_ms", "producers", "newest_wall", "records", "span_firsts", "span_lasts")

    def __init__(self, window: int = DEFAULT_WINDOW, idle_ms: int = 24 * 3_600_000) -> None:
        self.window = window
        self.idle_ms = idle_ms
        self.producers: dict[int, Producer] = {}
        self.newest_wall = 0
        self.records = 0
        self.span_firsts: list[int] = []  # index spans of the requests above the commit, in index order
        self.span_lasts: list[int] = []

    def __len__(self) -> int:
        return len(self.producers)

    def judge(self, producer: int, seq: int) -> tuple[int, int, int]:
        """(verdict, first_index, count); the range is the original request's for a DUPLICATE."""
        p = self.producers.get(producer)
        if p is None:
            return (NEW, -1, 0) if seq == 0 else (UNKNOWN, -1, 0)
        last = p.last_seq
        if seq == last + 1:
            return NEW, -1, 0
        if seq > last:
            return GAP, -1, 0
        k = seq - p.base
        if k >= 0:
            return DUPLICATE, p.firsts[k], p.counts[k]
        return TOO_OLD, -1, 0

    def record(self, producer: int, seq: int, first_index: int, count: int, wall_ms: int) -> None:
        """A request entered the log at first_index.. (the log holds requests in sequence order)."""
        p = self.producers.get(producer)
        if p is None or seq != p.last_seq + 1:  # new (or a log that skips sequences: start over there)
            p = self.producers[producer] = Producer(seq)
        p.firsts.append(first_index)
        p.counts.append(count)
        if len(p.firsts) > self.window:
            del p.firsts[0], p.counts[0]
            p.base += 1
        p.wall_ms = wall_ms
        if count > 1:
            self.span_firsts.append(first_index)
            self.span_lasts.append(first_index + count - 1)
        if wall_ms > self.newest_wall:
            self.newest_wall = wall_ms
        self.records += 1
        if self.records % SWEEP_EVERY == 0:
            self.sweep()

    def record_metas(self, metas: Iterable[tuple[int, bytes]]) -> None:
        for index, meta in metas:
            producer, seq, count, wall_ms = unpack_meta(meta)
            self.record(producer, seq, index, count, wall_ms)

    def sweep(self) -> int:
        """Drop producers idle for idle_ms before the newest write; returns how many."""
        horizon = self.newest_wall - self.idle_ms
        idle = [pid for pid, p in self.producers.items() if p.wall_ms < horizon]
        for pid in idle:
            del self.producers[pid]
        return len(idle)

    def span_at(self, index: int) -> tuple[int, int] | None:
        """The index span of the multi-entry request holding `index`, if the table still keeps it."""
        k = bisect_right(self.span_firsts, index) - 1
        if k >= 0 and self.span_lasts[k] >= index:
            return self.span_firsts[k], self.span_lasts[k]
        return None

    def forget_spans(self, upto: int) -> None:
        """Spans of committed requests are no longer needed (commits fall between requests)."""
        k = bisect_right(self.span_lasts, upto)
        if k:
            del self.span_firsts[:k], self.span_lasts[:k]

    def cut_partial_tail(self, store: LogStore) -> int:
        """Drop the uncommitted request the log holds only the start of (a torn tail, or a push cut short
        by a leader change); returns how many entries went."""
        end = store.end_index
        span = self.span_at(end)
        if span is None or span[1] <= end or span[0] - 1 < store.committed_index:
            return 0
        store.truncate_after(span[0] - 1)
        self.truncate_after(span[0] - 1)
        return end - span[0] + 1

    def after_cut(self, store: LogStore) -> None:
        """The log was cut (a corrupt entry): forget what went, and an uncommitted request left partial."""
        self.truncate_after(store.end_index)
        self.cut_partial_tail(store)

    def truncate_after(self, index: int) -> None:
        """The log was cut after `index`: forget the requests that began above it. Sequences are written
        in order, so what remains of a producer is everything below its first forgotten request."""
        k = bisect_right(self.span_firsts, index)
        del self.span_firsts[k:], self.span_lasts[k:]
        for pid in list(self.producers):
            p = self.producers[pid]
            if not p.firsts or p.firsts[-1] <= index:
                continue
            k = bisect_right(p.firsts, index)  # requests before k stay; requests before `base` are older
            del p.firsts[k:], p.counts[k:]
            if p.last_seq < 0:
                del self.producers[pid]

    def clear(self) -> None:
        self.producers.clear()
        self.span_firsts.clear()
        self.span_lasts.clear()

    def rebuild(self, store: LogStore, on_corrupt: Callable[[int, str], None] | None = None,
                snapshot: bytes | None = None) -> bool:
        """Read the log's metadata (at start): from the end of `snapshot` (the table saved beside the log,
        producer_snapshot.py) when it matches the log, else from the log's first entry. The first full read
        since the store opened (recovery checks only the entries after its checkpoint), so the part the
        snapshot covers is read too, checked, in whole runs: an entry that fails its checks is handed to
        `on_corrupt` (its index, why), which cuts the log before it, and the read starts again (without the
        snapshot, which held the log past the cut). Whether the snapshot was taken."""
        while True:
            self.clear()
            self.newest_wall = self.records = 0
            try:
                start = store.begin_index
                held = self.restore(store, snapshot) if snapshot is not None else None
                if held is not None:
                    verify(store, store.begin_index, held)
                    start = held + 1
                self.scan(store, start, store.end_index)
                return held is not None
            except CorruptEntryError as e:
                snapshot = None
                end = store.end_index
                if on_corrupt is None or e.index is None:
                    raise
                on_corrupt(e.index, str(e))
                if store.end_index >= end:
                    raise  # nothing was cut: it would be met again

    def encode(self, store: LogStore) -> bytes:
        """This table as of the store's end, to save beside the log (producer_snapshot.py)."""
        end = store.end_index
        at = mark(store, end)
        assert at is not None
        rows = [(pid, p.base, p.wall_ms, p.firsts, p.counts) for pid, p in self.producers.items()]
        return msgpack.packb((SNAPSHOT_VERSION, self.window, end, *at, self.newest_wall, self.records,
                              self.span_firsts, self.span_lasts, rows))

    def save(self, store: LogStore) -> None:
        """Encode and save now (the simulator's way; a server encodes on its loop, writes in a thread)."""
        with contextlib.suppress(StoreError):  # (the next start reads the whole log)
            store.save_producer_snapshot(self.encode(store))

    def restore(self, store: LogStore, blob: bytes) -> int | None:
        """Load `blob` into this (empty) table if it matches the log: the index it holds the log to, else
        None (also for a blob that does not parse: a damaged file costs a full rebuild, never the start)."""
        try:
            version, window, end, term, chain, newest_wall, records, firsts, lasts, rows = msgpack.unpackb(blob)
            if version != SNAPSHOT_VERSION or window != self.window or mark(store, end) != (term, chain):
                return None
            producers = {}
            for pid, base, wall_ms, p_firsts, p_counts in rows:
                p = producers[int(pid)] = Producer(int(base))
                p.wall_ms = int(wall_ms)
                p.firsts = [int(i) for i in p_firsts]
                p.counts = [int(c) for c in p_counts]
            spans = [int(i) for i in firsts], [int(i) for i in lasts]
            newest, held = int(newest_wall), int(records)
        except (ValueError, TypeError, msgpack.UnpackException):
            return None
        self.producers.update(producers)
        self.span_firsts[:], self.span_lasts[:] = spans
        self.newest_wall, self.records = newest, held
        return int(end)

    def scan(self, store: LogStore, first: int, last: int) -> None:
        """Record the requests that begin in first..last, walking headers only, and jumping over the rest
        of each multi-entry request (a request's entries carry no metadata after its first)."""
        unpack = HEADER.unpack_from
        index = first
        want = 16  # entries per read: small after a jump (the next request may begin right there)
        while index <= last:
            raw, n = store.read_raw(index, min(want, last - index + 1), _SCAN_BYTES)
            if n == 0:
                break
            off = 0
            end = index + n
            want = min(want * 4, 1 << 16)
            while index < end:
                h = unpack(raw, off)
                index += 1
                if h[5] == META_SIZE:
                    producer, seq, count, wall_ms = unpack_meta(raw[off + HEADER_SIZE:off + HEADER_SIZE + META_SIZE])
                    self.record(producer, seq, index - 1, count, wall_ms)
                    if count > 1:
                        index += count - 1  # over the rest of the request, then read again from there
                        want = 16
                        break
                off += h[1]
