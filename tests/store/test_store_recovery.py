"""Recovery: torn tails at every byte offset, corrupt committed entries, damaged index and checkpoint."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from store_helpers import log_of, small_config

from quorumlog.entry import HEADER_SIZE, INDEX_UNIT_SIZE
from quorumlog.errors import CorruptCommittedError, CorruptEntryError, StoreError
from quorumlog.store import MemoryStore
from quorumlog.store.file_store import FileStore

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
SEG = CFG.data_segment_bytes


def nz_body(i: int, n: int) -> bytes:
    """A body without zero bytes, so zeroing any suffix of an entry changes it."""
    return bytes(1 + (i * 31 + j) % 255 for j in range(n))


def seg_path(directory: Path, pos: int) -> Path:
    return directory / "data" / f"{pos - pos % SEG:020d}"


def overwrite(directory: Path, pos: int, data: bytes) -> None:
    with open(seg_path(directory, pos), "r+b") as f:
        f.seek(pos % SEG)
        f.write(data)


def read_bytes(directory: Path, pos: int, n: int) -> bytes:
    with open(seg_path(directory, pos), "rb") as f:
        f.seek(pos % SEG)
        return f.read(n)


def make_store(directory: Path, n: int, last_size: int = 60, roll_last: bool = False,
               committed: int = 1) -> list[tuple[int, int, int, int, bytes]]:
    """A store of n entries (the last one starting a new segment when roll_last) whose last entry was
    written after the last flush and checkpoint, and then the process died.

    Only such an entry can be torn by a crash: everything up to the checkpoint's durable end was
    fsynced and may have been acknowledged, so damage there is lost data, never a torn tail (this
    fixture used to close the store after the last entry, which made tearing it look harmless)."""
    s = FileStore(directory, CFG)
    for i in range(n - 1):
        s.append([nz_body(i, 40 + i % 7)], 1 + i // 4)
    if roll_last:
        while SEG - s.write_pos % SEG > 2100:
            s.append([nz_body(s.end_index + 1, 2000)], s.end_term)
        s.append([nz_body(s.end_index + 1, SEG - s.write_pos % SEG - HEADER_SIZE - 50)], s.end_term)
    s.set_committed(committed)
    s.close()
    s = FileStore(directory, CFG)
    s.append([nz_body(999, last_size)], s.end_term + 1)
    if roll_last:
        assert s.get(s.end_index).pos % SEG == 0
    log = log_of(s)
    s.abandon()  # a process crash: the page cache keeps the write, the checkpoint does not name it
    return log


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, tuple[Path, list]]:
    out = {}
    for roll in (False, True):
        d = tmp_path_factory.mktemp(f"pristine{int(roll)}") / "s"
        out[roll] = (d, make_store(d, 9, roll_last=roll))
    return out


def _check_cut(d: Path, log: list, damaged: bool) -> None:
    last = log[-1]
    s = FileStore(d, CFG)
    try:
        assert log_of(s) == log[:-1]
        assert s.end_index == last[0] - 1 and s.write_pos <= last[2]
        assert any("cut" in n for n in s.notes) == damaged  # a cut tail is reported; a zeroed one is a clean end
        a = s.append([b"next"], s.end_term)
        assert a.first_index == last[0]
        # the next entry goes where the torn one was (or at the segment start, where the torn one was)
        assert a.positions == [last[2]]
    finally:
        s.close()
    s = FileStore(d, CFG)
    try:
        assert log_of(s)[:-1] == log[:-1] and s.get(last[0]).body == b"next"
    finally:
        s.close()


@pytest.mark.parametrize("roll", [False, True], ids=["same-segment", "after-roll"])
@pytest.mark.parametrize("fill", ["garbage", "zeros"])
def test_torn_last_entry_at_every_offset(pristine: dict, tmp_path: Path, roll: bool, fill: str) -> None:
    src, log = pristine[roll]
    last = log[-1]
    pos, size = last[2], HEADER_SIZE + len(last[4])
    original = read_bytes(src, pos, size)
    for k in range(size):
        d = tmp_path / f"t{k}"
        shutil.copytree(src, d)
        tail = original[k:]
        junk = bytes(b ^ 0xA5 for b in tail) if fill == "garbage" else bytes(len(tail))
        overwrite(d, pos + k, junk)
        # zeros over a header whose first k bytes were zeros anyway leave a clean end, not a cut
        _check_cut(d, log, damaged=fill == "garbage" or any(original[:min(k, HEADER_SIZE)]))
        shutil.rmtree(d)


def test_torn_tail_with_garbage_past_the_end(pristine: dict, tmp_path: Path) -> None:
    """Garbage after a torn entry (a write that reached the disk out of order) is cut too."""
    src, log = pristine[False]
    last = log[-1]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    overwrite(d, last[2] + 10, b"\x07" * 3000)
    _check_cut(d, log, damaged=True)


def test_missing_tail_segment_is_a_clean_end(pristine: dict, tmp_path: Path) -> None:
    src, log = pristine[True]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    os.unlink(seg_path(d, log[-1][2]))
    _check_cut(d, log, damaged=False)


def _committed_store(d: Path) -> list:
    log = make_store(d, 12, committed=8)
    s = FileStore(d, CFG)
    assert s.committed_index == 8
    s.close()
    return log


def test_corrupt_committed_entry_is_reported_not_dropped(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = _committed_store(d)
    entry8 = log[8]
    overwrite(d, entry8[2] + HEADER_SIZE + 3, b"\x00\x00")  # body bytes of the committed entry 8
    with pytest.raises(CorruptCommittedError) as info:
        FileStore(d, CFG)
    assert info.value.first_bad_index == 8
    assert "8" in str(info.value) and info.value.code.name == "DISK_ERROR"
    # still refused: nothing was cut by the failed open
    with pytest.raises(CorruptCommittedError):
        FileStore(d, CFG)
    s = FileStore(d, CFG, repair=True)
    try:
        # owed up to the durable end 11 (entries 9..11 may have been acknowledged), not only to 8
        assert s.damage is not None and s.damage.first_bad_index == 8 and s.damage.committed_index == 11
        assert s.end_index == 7 and log_of(s) == log[:8] and s.committed_index == 7
        assert any("damaged" in n for n in s.notes)
    finally:
        s.close()
    # the damage is remembered across a reopen until the entries are written again
    s = FileStore(d, CFG, repair=True)
    try:
        assert s.damage is not None and s.damage.first_bad_index == 8
        leader = MemoryStore(CFG)
        for e in log:
            leader.append([e[4]], e[1], e[3])
        assert log_of(leader) == log
        s.append_encoded(leader.read_raw(8, 1, 1 << 20)[0])
        assert s.damage is not None  # 9..11 are still owed
        s.append_encoded(leader.read_raw(9, 3, 1 << 20)[0])
        # healed: committed again up to the old committed index, not up to the durable end
        assert s.damage is None and log_of(s) == log and s.committed_index == 8
    finally:
        s.close()
    s = FileStore(d, CFG)
    assert s.damage is None and s.committed_index == 8
    s.close()


def test_corrupt_committed_entry_below_the_anchor_is_never_read_back(tmp_path: Path) -> None:
    """Recovery trusts the log up to the checkpoint's anchor; a later read still checks every CRC."""
    d = tmp_path / "s"
    log = _committed_store(d)
    e3 = log[3]
    overwrite(d, e3[2] + HEADER_SIZE, b"\xff")
    try:
        s = FileStore(d, CFG)
    except CorruptCommittedError as e:  # finding it at open is fine too
        assert e.first_bad_index == 3
        return
    try:
        with pytest.raises(CorruptEntryError):
            s.get(3)
        with pytest.raises(CorruptEntryError):
            s.read(0, 100, 1 << 20)
        with pytest.raises(CorruptEntryError):
            s.read_raw(2, 5, 1 << 20)
        assert s.get(4).body == log[4][4]
    finally:
        s.close()


def test_lost_committed_entries_are_reported(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = _committed_store(d)
    # entries 6.. vanish (zeroed), below the committed index 8
    overwrite(d, log[6][2], bytes(SEG - log[6][2] % SEG))
    with pytest.raises(CorruptCommittedError) as info:
        FileStore(d, CFG)
    assert info.value.first_bad_index <= 8
    s = FileStore(d, CFG, repair=True)
    assert s.damage is not None and s.damage.committed_index == 11 and s.end_index < 8
    s.close()


@pytest.mark.parametrize("damage", [
    "garbage-units", "zero-units", "delete-dir",
    "delete-segment",
])
def test_damaged_index_is_rebuilt_from_data(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    for i in range(40):  # 40 units: three index segments of 16
        s.append([nz_body(i, 50)], 1 + i // 10)
    s.set_committed(30)
    s.close()
    s = FileStore(d, CFG)
    log = log_of(s)
    s.close()
    index_dir = d / "index"
    if damage == "delete-dir":
        shutil.rmtree(index_dir)
    elif damage == "delete-segment":
        os.unlink(index_dir / f"{16 * INDEX_UNIT_SIZE:020d}")
    else:
        for name in os.listdir(index_dir):
            with open(index_dir / name, "r+b") as f:
                n = len(f.read())
                f.seek(0)
                f.write(bytes((i * 7 + 3) % 256 for i in range(n)) if damage == "garbage-units" else bytes(n))
    s = FileStore(d, CFG)
    try:
        assert log_of(s) == log
        assert [s.term_at(e[0]) for e in log] == [e[1] for e in log]
        assert s.committed_index == 30
        s.append([b"more"], 5)
    finally:
        s.close()


@pytest.mark.parametrize("damage", ["garbage", "flipped", "truncated", "empty"])
def test_damaged_checkpoint_is_a_clear_error(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "s"
    make_store(d, 5)
    cp = d / "checkpoint"
    raw = cp.read_bytes()
    if damage == "garbage":
        cp.write_bytes(b"\x00\xffnot a checkpoint")
    elif damage == "flipped":
        i = raw.index(b"committed_index=") + len("committed_index=")
        cp.write_bytes(raw[:i] + b"7" + raw[i + 1:])
    elif damage == "truncated":
        cp.write_bytes(raw[: len(raw) // 2])
    else:
        cp.write_bytes(b"")
    with pytest.raises(StoreError, match="checkpoint"):
        FileStore(d, CFG)


def test_damaged_currterm_is_a_clear_error(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.save_vote(4, "n2")
    s.close()
    (d / "currterm").write_bytes(b"term=5\nvoted_for=n2\ncrc=1\n")
    with pytest.raises(StoreError, match="currterm"):
        FileStore(d, CFG)


def test_interrupted_segment_allocation_is_completed(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = make_store(d, 5)
    nxt = d / "data" / f"{SEG:020d}"
    nxt.write_bytes(bytes(100))  # a crash while allocating the next segment
    s = FileStore(d, CFG)
    try:
        assert log_of(s) == log
        assert all(f.stat().st_size == SEG for f in (d / "data").iterdir() if not f.name.endswith(".spare"))
    finally:
        s.close()


def test_single_damaged_index_unit_below_the_anchor_is_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = _committed_store(d)
    with open(d / "index" / f"{0:020d}", "r+b") as f:
        f.seek(3 * INDEX_UNIT_SIZE)
        f.write(b"\x13" * INDEX_UNIT_SIZE)
    s = FileStore(d, CFG)
    try:
        assert log_of(s) == log  # a read from the start walks the data, not the index
        assert s.get(3).body == log[3][4] and s.term_at(3) == log[3][1]
    finally:
        s.close()


def test_memory_store_lose_from_reports_and_heals_like_the_file_store() -> None:
    s = MemoryStore(CFG)
    for i in range(10):
        s.append([nz_body(i, 30)], 1)
    leader = MemoryStore(CFG)
    leader.append_encoded(s.read_raw(0, 100, 1 << 20)[0])
    s.set_committed(7)
    s.flush()
    s.checkpoint()
    s.lose_from(5)
    # Everything that survived the crash was durable and may have been acknowledged: re-fetch up to 9.
    assert s.damage is not None and (s.damage.first_bad_index, s.damage.committed_index) == (5, 9)
    assert s.end_index == 4 and s.committed_index == 4
    s.append_encoded(leader.read_raw(5, 3, 1 << 20)[0])
    assert s.damage is not None
    s.append_encoded(leader.read_raw(8, 2, 1 << 20)[0])
    assert s.damage is None and s.committed_index == 7


def test_a_torn_entry_past_a_roll_is_cut_back_to_where_a_replica_would_write(tmp_path: Path) -> None:
    """An entry that did not fit its segment was written in the next, after a blank; torn, it is cut, and
    the log's end goes back before the blank: the next entry lands where a replica that never had the torn
    one puts it (a leader's positions are checked by its followers), not at the next segment's start."""
    seg = CFG.data_segment_bytes
    fs = FileStore(str(tmp_path), CFG)
    for _ in range(4):
        fs.append([b"a" * 4000], 1)
    fs.flush()
    end = fs.write_pos
    rolled = fs.append([b"b" * 4000], 1).positions[0]
    assert rolled == seg  # (did not fit: a blank, then the next segment)
    fs.abandon()
    with open(os.path.join(str(tmp_path), "data", f"{seg:020d}"), "r+b") as f:
        f.seek(20)
        f.write(b"\xa5\x5a\xa5\x5a")  # torn
    fs = FileStore(str(tmp_path), CFG)
    replica = MemoryStore(CFG)
    for _ in range(4):
        replica.append([b"a" * 4000], 1)
    assert fs.end_index == 3 and fs.write_pos == end == replica.write_pos
    assert fs.append([b"c" * 100], 1).positions == replica.append([b"c" * 100], 1).positions == [end]
    fs.flush()
    fs.close()
    fs = FileStore(str(tmp_path), CFG)
    assert [e.body for e in fs.read(0, 10, 1 << 20)] == [b"a" * 4000] * 4 + [b"c" * 100]
    fs.close()
