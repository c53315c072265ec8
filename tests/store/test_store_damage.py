"""Damage on disk: what recovery may cut silently and what it must report, damage found while running,
the index of the entry every read error names, and index units checked against the data."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from store_helpers import log_of, small_config

from quorumlog.entry import HEADER_SIZE, INDEX_UNIT, INDEX_UNIT_SIZE
from quorumlog.errors import CorruptCommittedError, CorruptEntryError
from quorumlog.store import MemoryStore
from quorumlog.store.checkpoint import read_checkpoint
from quorumlog.store.file_store import FileStore
from quorumlog.store.vfs import Buffer, OsFiles

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
SEG = CFG.data_segment_bytes


def nz_body(i: int, n: int) -> bytes:
    return bytes(1 + (i * 31 + j) % 255 for j in range(n))


def poke(d: Path, pos: int, data: bytes) -> None:
    with open(d / "data" / f"{pos - pos % SEG:020d}", "r+b") as f:
        f.seek(pos % SEG)
        f.write(data)


def poke_unit(d: Path, index: int, field_at: int, data: bytes) -> None:
    off = index * INDEX_UNIT_SIZE
    size = CFG.index_segment_bytes
    with open(d / "index" / f"{off - off % size:020d}", "r+b") as f:
        f.seek(off % size + field_at)
        f.write(data)


def unit_bytes(d: Path, index: int) -> bytes:
    off = index * INDEX_UNIT_SIZE
    size = CFG.index_segment_bytes
    with open(d / "index" / f"{off - off % size:020d}", "rb") as f:
        f.seek(off % size)
        return f.read(INDEX_UNIT_SIZE)


def closed_store(d: Path, n: int = 30, committed: int = 10) -> list:
    """n entries in terms 1.., committed up to `committed`, closed: the checkpoint names n - 1 durable
    and its recovery anchor is entry `committed`."""
    s = FileStore(d, CFG)
    for i in range(n):
        s.append([nz_body(i, 200)], 1 + i // 7)
    s.set_committed(committed)
    log = log_of(s)
    s.close()
    return log


def leader_of(log: list) -> MemoryStore:
    leader = MemoryStore(CFG)
    for e in log:
        leader.append([e[4]], e[1], e[3])
    return leader


# -- recovery: the checkpoint's durable end ----------------------------------------------------------
def test_corrupt_entry_below_the_durable_end_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = closed_store(d)
    poke(d, log[20][2] + HEADER_SIZE + 7, b"\x00")  # past committed 10, below the durable end 29
    with pytest.raises(CorruptCommittedError) as info:
        FileStore(d, CFG)
    assert info.value.first_bad_index == 20 and "durable entry 20 is damaged" in str(info.value)
    s = FileStore(d, CFG, repair=True)
    try:
        assert s.damage is not None and (s.damage.first_bad_index, s.damage.committed_index) == (20, 29)
        assert s.committed_index == 10 and s.end_index == 19
        s.append_encoded(leader_of(log).read_raw(20, 100, 1 << 20)[0])
        assert s.damage is None and s.committed_index == 10  # committed again only what was committed
    finally:
        s.close()


def test_missing_durable_tail_segment_is_damage(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    for i in range(30):
        s.append([nz_body(i, 1500)], 1)
    log = log_of(s)
    s.close()
    last_seg = log[-1][2] - log[-1][2] % SEG
    os.unlink(d / "data" / f"{last_seg:020d}")
    first_lost = next(e[0] for e in log if e[2] >= last_seg)
    with pytest.raises(CorruptCommittedError) as info:
        FileStore(d, CFG)
    assert info.value.first_bad_index == first_lost


def test_truncation_below_the_durable_end_is_not_taken_for_loss(tmp_path: Path) -> None:
    """A truncation lowers the checkpoint's durable end before it zeroes anything, so that the entries
    it removed are not reported lost after a crash."""
    d = tmp_path / "s"
    log = closed_store(d, committed=3)
    s = FileStore(d, CFG)
    s.truncate_after(5)
    assert read_checkpoint(str(d)).end_index <= 5
    s.append([b"new six", b"new seven"], 9)
    s.abandon()  # crash before any flush or checkpoint
    s = FileStore(d, CFG)
    try:
        assert s.damage is None and log_of(s)[:6] == log[:6]
        assert [e[4] for e in log_of(s)[6:]] == [b"new six", b"new seven"]
    finally:
        s.close()


# -- damage found while running ----------------------------------------------------------------------
def test_marked_damage_survives_a_restart(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = closed_store(d)
    s = FileStore(d, CFG)
    s.mark_damaged(8, "body CRC mismatch")  # below the committed index: allowed here only
    assert s.end_index == 7 and s.committed_index == 7
    s.abandon()  # even without a close
    with pytest.raises(CorruptCommittedError) as info:
        FileStore(d, CFG)
    assert info.value.first_bad_index == 8
    s = FileStore(d, CFG, repair=True)
    try:
        assert s.damage is not None and (s.damage.first_bad_index, s.damage.committed_index) == (8, 29)
        s.append_encoded(leader_of(log).read_raw(8, 100, 1 << 20)[0])
        assert s.damage is None and s.committed_index == 10 and log_of(s) == log
    finally:
        s.close()


def test_mark_damaged_also_cuts_corrupt_entries_before_it(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = closed_store(d, committed=25)
    poke(d, log[6][2] + HEADER_SIZE + 1, b"\x00")  # below the anchor: not read at open
    poke(d, log[7][2] + HEADER_SIZE + 1, b"\x00")
    s = FileStore(d, CFG)
    try:
        with pytest.raises(CorruptEntryError) as info:
            s.read(5, 100, 1 << 20)
        assert info.value.index == 6
        s.mark_damaged(8, "entry 8 looked bad")
        assert s.end_index == 5 and s.damage is not None and s.damage.first_bad_index == 6
        assert log_of(s) == log[:6]
    finally:
        s.close()


# -- the index of the entry a read error names ---------------------------------------------------------
@pytest.mark.parametrize("at", [HEADER_SIZE, 23])  # a body byte; a byte of the term (the chain CRC's)
def test_read_errors_name_the_entry(tmp_path: Path, at: int) -> None:
    d = tmp_path / "s"
    log = closed_store(d, committed=25)
    poke(d, log[3][2] + at, b"\x00" if at == HEADER_SIZE else b"\x09")
    s = FileStore(d, CFG)
    try:
        for read in (lambda: s.get(3), lambda: s.read(0, 100, 1 << 20), lambda: s.read_raw(2, 5, 1 << 20),
                     lambda: s.read_raw_parts(2, 5, 1 << 20, control=False)):
            with pytest.raises(CorruptEntryError) as info:
                read()
            assert info.value.index == 3
        with pytest.raises(CorruptEntryError) as info:  # a pushed batch is not a stored entry
            s.append_encoded(b"\x00" * 60)
        assert info.value.index is None
    finally:
        s.close()


def test_memory_store_read_errors_name_the_entry() -> None:
    s = MemoryStore(CFG)
    s.append([nz_body(i, 50) for i in range(6)], 1)
    raw = bytearray(s._raw[4])
    raw[HEADER_SIZE] ^= 1
    s._raw[4] = bytes(raw)  # a flipped bit in memory
    for read in (lambda: s.get(4), lambda: s.read(0, 100, 1 << 20)):
        with pytest.raises(CorruptEntryError) as info:
            read()
        assert info.value.index == 4
    s.mark_damaged(4, "flipped bit")
    assert s.end_index == 3 and s.damage is not None and s.damage.committed_index == 5


# -- index units checked against the entry headers -----------------------------------------------------
@pytest.mark.parametrize("what", ["term", "pos", "index", "size", "magic"])
def test_damaged_index_unit_below_the_anchor_is_never_trusted(tmp_path: Path, what: str) -> None:
    d = tmp_path / "s"
    log = closed_store(d, committed=25)
    good = unit_bytes(d, 9)
    if what == "pos":  # points at another intact entry
        poke_unit(d, 9, 4, log[12][2].to_bytes(8, "big"))
    else:  # the lowest bit of the field's last byte
        last = {"magic": 3, "size": 15, "index": 23, "term": 31}[what]
        poke_unit(d, 9, last, bytes([good[last] ^ 0x01]))
    s = FileStore(d, CFG)
    try:
        assert s.term_at(9) == log[9][1]
        assert s.get(9).body == log[9][4] and log_of(s) == log
        s.flush()
        s.checkpoint()
    finally:
        s.close()
    assert unit_bytes(d, 9) == good  # rebuilt from the data


def test_damaged_header_term_is_never_returned(tmp_path: Path) -> None:
    """The unit is intact, the header's term is not: the rebuild walks the data, whose chain CRC
    covers the term, and reports the entry instead of believing either."""
    d = tmp_path / "s"
    log = closed_store(d, committed=25)
    term = log[9][1]
    poke(d, log[9][2] + 16, (term + 5).to_bytes(8, "big"))
    s = FileStore(d, CFG)
    try:
        with pytest.raises(CorruptEntryError) as info:
            s.term_at(9)
        assert info.value.index == 9
        assert s.term_at(8) == log[8][1] and s.term_at(10) == log[10][1]
    finally:
        s.close()


def test_index_unit_layout() -> None:
    """The tests above poke units by field offset: magic 0, pos 4, size 12, index 16, term 24."""
    raw = INDEX_UNIT.pack(1, 2, 3, 4, 5)
    assert [raw[0:4], raw[4:12], raw[12:16], raw[16:24], raw[24:32]] == \
        [v.to_bytes(n, "big") for v, n in ((1, 4), (2, 8), (3, 4), (4, 8), (5, 8))]


def killed_after(s: FileStore, synced: range, unsynced: range = range(0)) -> list:
    """Append `synced` and flush, append `unsynced` (written, never synced), then let the store go as a SIGKILL
    would: no checkpoint names them. The log, as it was."""
    for i in synced:
        s.append([nz_body(i, 200)], 5)
    s.flush()
    for i in unsynced:
        s.append([nz_body(i, 200)], 5)
    log = log_of(s)
    s.abandon()
    return log


def synced_since_checkpoint(d: Path) -> list:
    """closed_store, then entries 30..34 appended and synced, unknown to the checkpoint: a SIGKILL."""
    closed_store(d)
    s = FileStore(d, CFG)
    assert s.tail_cut is None  # (a clean open)
    return killed_after(s, range(30, 35))


def test_a_bad_entry_synced_since_the_checkpoint_is_damage_by_the_durable_mark(tmp_path: Path) -> None:
    """Past the checkpoint's durable end recovery alone cannot tell a torn write from rot in an entry synced,
    and maybe acknowledged, since. The durable mark, written after every fdatasync, names what was durable
    when the process died: a bad entry at or below it is damage, to be fetched again, never cut silently."""
    d = tmp_path / "s"
    log = synced_since_checkpoint(d)
    poke(d, log[32][2] + HEADER_SIZE + 7, b"\x00")
    with pytest.raises(CorruptCommittedError, match="durable entry 32 is damaged"):
        FileStore(d, CFG)  # (check-store's read-only open)
    with FileStore(d, CFG, repair=True) as s:
        assert s.end_index == 31 and s.damage is not None
        assert (s.damage.first_bad_index, s.damage.committed_index) == (32, 34)


def test_a_bad_entry_past_the_durable_mark_is_a_torn_write(tmp_path: Path) -> None:
    """Entries written but not yet synced when the process died were never acknowledged: a bad one is cut
    without a word, and with nothing for the node to remember."""
    d = tmp_path / "s"
    closed_store(d)
    log = killed_after(FileStore(d, CFG), range(30, 33), range(33, 35))
    poke(d, log[33][2] + HEADER_SIZE + 7, b"\x00")
    with FileStore(d, CFG, repair=True) as s:
        assert s.end_index == 32 and s.damage is None and s.tail_cut is None


def test_a_truncation_lowers_the_durable_mark_before_it_cuts(tmp_path: Path) -> None:
    d = tmp_path / "s"
    synced_since_checkpoint(d)
    s = FileStore(d, CFG, repair=True)
    s.truncate_after(31)  # a new leader's log: 32..34 were never committed
    s.abandon()
    with FileStore(d, CFG) as s:  # (a mark still naming 34 would make 32..34 missing durable entries)
        assert s.end_index == 31 and s.damage is None


@pytest.mark.parametrize("mark", ["missing", "garbled"])
def test_recovery_names_the_tail_it_cut_without_a_durable_mark(tmp_path: Path, mark: str) -> None:
    """A store written before durable marks (or whose mark is garbled): past the checkpoint a bad entry is cut
    as a torn tail, which it may not be, and `tail_cut` tells the replication layer, until the node says it
    made the cut good (clear_tail_cut); it is remembered across restarts meanwhile."""
    d = tmp_path / "s"
    log = synced_since_checkpoint(d)
    if mark == "missing":
        os.unlink(d / "durable")
    else:
        poke_file(d / "durable", 6, b"\xff")
    poke(d, log[32][2] + HEADER_SIZE + 7, b"\x00")
    with FileStore(d, CFG) as s:
        assert s.tail_cut == 32 and s.end_index == 31 and s.damage is None
    with FileStore(d, CFG) as s:  # remembered across a restart (in the checkpoint) until the node made it good
        assert s.tail_cut == 32 and s.end_index == 31
        s.clear_tail_cut()
        assert s.tail_cut is None
    with FileStore(d, CFG) as s:
        assert s.tail_cut is None


def test_a_tail_cut_is_remembered_through_a_crash_and_a_later_torn_write(tmp_path: Path) -> None:
    """A node may restart again before it fetched what a cut tail held: the store still names the first
    cut, and a torn write later in the log does not hide it."""
    d = tmp_path / "s"
    log = synced_since_checkpoint(d)
    os.unlink(d / "durable")  # (a store from before durable marks)
    poke(d, log[32][2] + HEADER_SIZE + 7, b"\x00")
    s = FileStore(d, CFG)
    assert s.tail_cut == 32
    log = killed_after(s, range(32, 36), range(36, 38))
    poke(d, log[36][2] + HEADER_SIZE + 7, b"\x00")
    with FileStore(d, CFG) as s:
        assert s.tail_cut == 32 and s.end_index == 35 and s.damage is None


class MarkOutOfSpace(OsFiles):
    """ENOSPC on every write of the durable mark while `full`: its first block, or a copy-on-write file system."""

    full = False
    mark_fd = -1

    def open(self, path: str) -> int:
        fd = super().open(path)
        if path.endswith("durable"):
            self.mark_fd = fd
        return fd

    def pwrite(self, fd: int, data: Buffer | list[Buffer], offset: int) -> None:
        if self.full and fd == self.mark_fd:
            raise OSError(errno.ENOSPC, "no space left on device")
        super().pwrite(fd, data, offset)


def test_a_durable_mark_that_cannot_be_written_is_emptied_and_recovery_falls_back(tmp_path: Path) -> None:
    """A mark lower than what was synced would make rot in a synced entry look like a torn write. Out of space,
    the store goes on and empties the mark (no block needed): recovery then falls back to the checkpoint's
    durable end and names the cut in `tail_cut`; the next write that succeeds brings the mark back."""
    d = tmp_path / "s"
    closed_store(d)
    files = MarkOutOfSpace()
    s = FileStore(d, CFG, files=files)
    files.full = True
    log = killed_after(s, range(30, 35))
    assert (d / "durable").stat().st_size == 0
    poke(d, log[32][2] + HEADER_SIZE + 7, b"\x00")
    with FileStore(d, CFG) as s:  # (space again: the mark is written at the end of recovery)
        assert s.tail_cut == 32 and s.end_index == 31 and s.damage is None
    assert (d / "durable").stat().st_size == 16


def poke_file(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)

