"""The producer table saved beside the log (core/producer_snapshot.py): a start from a matching snapshot
reads only the log after it and ends with the table a full rebuild makes; a snapshot that does not match
the log (cut and rewritten, another window, garbage) costs a full rebuild and nothing else; damage below
the snapshot's index is still found at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from quorumlog.config import StoreConfig
from quorumlog.core.producers import ProducerTable
from quorumlog.entry import pack_meta
from quorumlog.store.base import LogStore
from quorumlog.store.file_store import FileStore
from quorumlog.store.memory import MemoryStore

CFG = StoreConfig(data_segment_bytes=1 << 20, index_segment_bytes=32 * 4096, max_body_bytes=4096)


def _write(store: FileStore | MemoryStore, first_seq: dict[int, int], requests: int, term: int = 1) -> None:
    """`requests` requests of 1-3 entries from producers 1..7 in turn, in sequence per producer."""
    for r in range(requests):
        pid = 1 + r % 7
        seq = first_seq.get(pid, 0)
        first_seq[pid] = seq + 1
        n = 1 + r % 3
        bodies = [f"p{pid}s{seq}e{k}".encode() for k in range(n)]
        store.append(bodies, term, metas={0: pack_meta(pid, seq, n, 1000 + r)})


class _Counting(ProducerTable):
    """A table that counts the request records its reads of the log make."""

    scanned = 0

    def scan(self, store: LogStore, first: int, last: int) -> None:
        before = self.records
        super().scan(store, first, last)
        self.scanned += self.records - before


def _table(store: LogStore, snapshot: bytes | None, window: int = 8) -> tuple[ProducerTable, int]:
    """The table a start makes, and how many request records its read of the log made."""
    t = _Counting(window)
    t.rebuild(store, None, snapshot)
    return t, t.scanned


def _state(t: ProducerTable) -> dict[int, tuple[int, int, list[int], list[int]]]:
    return {pid: (p.base, p.wall_ms, p.firsts, p.counts) for pid, p in t.producers.items()}


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_a_start_from_a_matching_snapshot_reads_the_tail_and_ends_as_a_full_rebuild(tmp_path: Path, kind: str) -> None:
    store = FileStore(tmp_path, CFG) if kind == "file" else MemoryStore(CFG)
    seqs: dict[int, int] = {}
    _write(store, seqs, 200)
    live, _ = _table(store, None)
    store.save_producer_snapshot(live.encode(store))
    _write(store, seqs, 30)
    store.flush()
    if kind == "file":
        store.close()
        store = FileStore(tmp_path, CFG)
    snapshot = store.producer_snapshot()
    assert snapshot is not None
    fast, scanned = _table(store, snapshot)
    full, everything = _table(store, None)
    assert scanned == 30 and everything == 230
    assert _state(fast) == _state(full) and fast.newest_wall == full.newest_wall
    assert (fast.span_firsts, fast.span_lasts) == (full.span_firsts, full.span_lasts)
    store.close()


def test_a_snapshot_of_a_log_cut_and_written_again_is_not_taken(tmp_path: Path) -> None:
    store = FileStore(tmp_path, CFG)
    seqs: dict[int, int] = {}
    _write(store, seqs, 100)
    live, _ = _table(store, None)
    blob = live.encode(store)
    store.truncate_after(89)  # the last ten go, and others of another term take their indexes
    other: dict[int, int] = {pid: seq + 1000 for pid, seq in seqs.items()}
    _write(store, other, 10, term=2)
    assert store.end_index >= 99  # (the snapshot's index holds an entry of term 2 now)
    t, scanned = _table(store, blob)
    full, everything = _table(store, None)
    assert scanned == everything and _state(t) == _state(full)
    store.close()


@pytest.mark.parametrize("blob", [b"", b"\x00garbage", b"\x95\x01\x08\x05\x01\x02"])
def test_a_damaged_or_foreign_snapshot_costs_a_full_rebuild(tmp_path: Path, blob: bytes) -> None:
    store = FileStore(tmp_path, CFG)
    _write(store, {}, 50)
    t, scanned = _table(store, blob)
    assert scanned == 50 and _state(t) == _state(_table(store, None)[0])
    live, _ = _table(store, None)
    other_window, scanned = _table(store, live.encode(store), window=16)
    assert scanned == 50 and _state(other_window) == _state(_table(store, None, window=16)[0])
    store.close()


def test_damage_below_the_snapshot_is_still_found_at_start(tmp_path: Path) -> None:
    store = FileStore(tmp_path, CFG)
    _write(store, {}, 100)
    live, _ = _table(store, None)
    store.save_producer_snapshot(live.encode(store))
    pos = store.get(40).pos
    store.flush()
    store.set_committed(store.end_index)
    store.checkpoint()  # entry 40 below it: recovery does not read it again
    store.close()
    with open(tmp_path / "data" / f"{0:020d}", "r+b") as f:  # one bit of entry 40's header
        f.seek(pos + 7)
        byte = f.read(1)[0]
        f.seek(pos + 7)
        f.write(bytes([byte ^ 0x40]))
    store = FileStore(tmp_path, CFG)
    found: list[int] = []

    def cut(index: int, why: str) -> None:
        found.append(index)
        store.discard_after(index - 1)

    t = ProducerTable(8)
    t.rebuild(store, cut, store.producer_snapshot())
    assert found == [40] and store.end_index == 39
    assert _state(t) == _state(_table(store, None)[0])
    store.close()
