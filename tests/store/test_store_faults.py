"""Disk faults through an injecting file layer: the store fails stop and never calls unsynced data durable."""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest
from store_helpers import body, log_of, small_config

from quorumlog.errors import DiskError, DiskFullError, StoreError
from quorumlog.server.store import NodeStore
from quorumlog.store import MemoryStore
from quorumlog.store.checkpoint import read_stable
from quorumlog.store.file_store import FileStore
from quorumlog.store.vfs import Buffer, OsFiles


class FaultyFiles(OsFiles):
    """Fails the Nth call (counted from arm()) of one operation with EIO (or `err`). Only calls made by
    the test's thread count, so background segment allocation does not shift the count."""

    def __init__(self) -> None:
        self.op: str | None = None
        self.countdown = 0
        self.fired = 0
        self.err = errno.EIO
        self.owner = threading.get_ident()

    def arm(self, op: str, nth: int, err: int = errno.EIO) -> None:
        self.op, self.countdown, self.err = op, nth, err

    def _maybe_fail(self, op: str) -> None:
        if self.op == op and threading.get_ident() == self.owner:
            self.countdown -= 1
            if self.countdown == 0:
                self.op = None
                self.fired += 1
                raise OSError(self.err, f"injected {op} failure")

    def pwrite(self, fd: int, data: Buffer | list[Buffer], offset: int) -> None:
        self._maybe_fail("pwrite")
        super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        self._maybe_fail("fdatasync")
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._maybe_fail("fsync")
        super().fsync(fd)


CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)


def _batches(start: int, rounds: int) -> list[list[bytes]]:
    return [[body(start + 10 * r + i, 100 + 997 * ((r + i) % 4)) for i in range(1 + r % 5)] for r in range(rounds)]


def _assert_failed_stop(s: FileStore, durable: int) -> None:
    assert s.durable_index == durable
    for op in (lambda: s.append([b"x"], 9), lambda: s.flush(), lambda: s.checkpoint(),
               lambda: s.truncate_after(s.end_index - 1), lambda: s.save_vote(9, "n1"),
               lambda: s.append_encoded(b""), lambda: s.expire(-1, 1e12)):
        with pytest.raises(DiskError):
            op()
    assert s.durable_index == durable
    s.close()  # releases files without syncing or checkpointing
    s.close()


def _reopen_and_check(path: Path, reference: MemoryStore, durable: int) -> FileStore:
    s = FileStore(path, CFG)
    got = log_of(s)
    want = log_of(reference)
    assert s.end_index >= durable, "lost entries that were reported durable"
    assert got == want[:len(got)], "recovered entries that were never written as such"
    # the store works again
    a = s.append([b"after"], max(s.end_term, 1))
    assert a.first_index == s.end_index and s.get(s.end_index).body == b"after"
    return s


@pytest.mark.parametrize("op", ["pwrite", "fdatasync"])
@pytest.mark.parametrize("nth", [1, 2, 3, 5, 8, 13])
def test_write_or_sync_failure_fails_stop(tmp_path: Path, op: str, nth: int) -> None:
    files = FaultyFiles()
    ref = MemoryStore(CFG)
    s = FileStore(tmp_path / "s", CFG, files=files)
    for b in _batches(0, 6):
        s.append(b, 1)
        ref.append(b, 1)
    s.set_committed(3)
    durable = s.flush()
    s.checkpoint()
    files.arm(op, nth)
    with pytest.raises(DiskError):
        for r, b in enumerate(_batches(1000, 40)):
            ref.append(b, 2)
            s.append(b, 2)
            if r % 3 == 2:
                s.flush()
                durable = s.durable_index
    assert files.fired == 1
    _assert_failed_stop(s, durable)
    _reopen_and_check(tmp_path / "s", ref, durable).close()


def _follower_of_a_leader(tmp_path: Path) -> tuple[FaultyFiles, MemoryStore, FileStore]:
    """A leader's log of 12 batches, and a follower's FileStore holding its first 5 entries."""
    files = FaultyFiles()
    leader = MemoryStore(CFG)
    for b in _batches(0, 12):
        leader.append(b, 1)
    s = FileStore(tmp_path / "s", CFG, files=files)
    raw, _n = leader.read_raw(0, 5, 1 << 20)
    s.append_encoded(raw)
    return files, leader, s


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_follower_append_write_failure(tmp_path: Path, nth: int) -> None:
    files, leader, s = _follower_of_a_leader(tmp_path)
    durable = s.flush()
    files.arm("pwrite", nth)
    with pytest.raises(DiskError):
        while s.end_index < leader.end_index:
            raw, n = leader.read_raw(s.end_index + 1, 3, 1 << 20)
            s.append_encoded(raw)
    _assert_failed_stop(s, durable)
    _reopen_and_check(tmp_path / "s", leader, durable).close()


def test_failed_fsync_is_not_retried_into_success(tmp_path: Path) -> None:
    """After a failed fdatasync the dirty pages may already be dropped: a retry that 'succeeds'
    proves nothing, so the store must not offer one."""
    files = FaultyFiles()
    s = FileStore(tmp_path / "s", CFG, files=files)
    s.append([b"a"], 1)
    files.arm("fdatasync", 1)
    with pytest.raises(DiskError) as first:
        s.flush()
    with pytest.raises(DiskError, match="failed earlier") as later:
        s.flush()
    assert later.value.__cause__ is first.value  # a later error leads to where the disk failed
    assert s.durable_index == -1
    s.close()


def test_checkpoint_write_failure(tmp_path: Path) -> None:
    files = FaultyFiles()
    ref = MemoryStore(CFG)
    s = FileStore(tmp_path / "s", CFG, files=files)
    for b in _batches(0, 5):
        s.append(b, 1)
        ref.append(b, 1)
    s.set_committed(4)
    durable = s.flush()
    files.arm("fsync", 1)  # the temp file's fsync in the atomic replace
    with pytest.raises(DiskError):
        s.checkpoint()
    _assert_failed_stop(s, durable)
    _reopen_and_check(tmp_path / "s", ref, durable).close()


def test_vote_write_failure_keeps_the_old_vote(tmp_path: Path) -> None:
    files = FaultyFiles()
    s = FileStore(tmp_path / "s", CFG, files=files)
    s.save_vote(2, "n0")
    files.arm("fsync", 1)
    with pytest.raises(DiskError):
        s.save_vote(3, "n1")
    assert s.load_vote() == (2, "n0")
    s.close()
    s = FileStore(tmp_path / "s", CFG)
    assert s.load_vote() == (2, "n0")
    s.close()


def _near_a_segment_end(tmp_path: Path) -> tuple[FaultyFiles, MemoryStore, FileStore, int, list[bytes]]:
    """A store (and its reference) written to 3000 bytes before its first segment's end, flushed; and a
    batch that crosses that end (a blank, then a new segment)."""
    files = FaultyFiles()
    ref = MemoryStore(CFG)
    s = FileStore(tmp_path / "s", CFG, files=files)
    while s.write_pos < CFG.data_segment_bytes - 3000:
        b = [body(s.end_index + 1, 1000)]
        s.append(b, 1)
        ref.append(b, 1)
    return files, ref, s, s.flush(), [body(9000 + i, 2500) for i in range(3)]


def test_failure_while_rolling_to_a_new_segment(tmp_path: Path) -> None:
    files, ref, s, durable, big = _near_a_segment_end(tmp_path)
    files.arm("pwrite", 2)
    ref.append(big, 1)
    with pytest.raises(DiskError):
        s.append(big, 1)
    _assert_failed_stop(s, durable)
    _reopen_and_check(tmp_path / "s", ref, durable).close()


def test_store_error_types(tmp_path: Path) -> None:
    assert issubclass(DiskError, StoreError)
    files: Any = FaultyFiles()
    s = FileStore(tmp_path / "s", CFG, files=files)
    files.arm("pwrite", 1)
    with pytest.raises(DiskError) as info:
        s.append([b"x"], 1)
    assert info.value.code.name == "DISK_ERROR"
    assert isinstance(info.value.__cause__, OSError)
    s.close()


@pytest.mark.parametrize("op", ["pwrite", "fsync"])
def test_no_space_for_the_vote_keeps_the_old_one_and_the_store_goes_on(tmp_path: Path, op: str) -> None:
    """A full disk met by the term and vote (written through a temp file, then renamed) leaves the old
    ones on disk: DiskFullError, the store still works, and the write succeeds once there is room. It
    failed the store, and a node whose disk filled stopped at its next election."""
    files = FaultyFiles()
    s = NodeStore(tmp_path / "s", CFG, files=files, defer_stable=True)  # the server's: written in persist_stable()
    s.save_vote(2, "n0")
    s.persist_stable()
    s.save_vote(3, "n1")
    files.arm(op, 1, errno.ENOSPC)
    with pytest.raises(DiskFullError):
        s.persist_stable()
    assert s.stable_unsaved and s.load_vote() == (3, "n1")
    assert s.append([b"x"], 3).first_index == 0 and s.flush() == 0  # not failed
    on_disk = read_stable(str(tmp_path / "s"))
    assert (on_disk.term, on_disk.voted_for) == (2, "n0")
    s.persist_stable()
    assert not s.stable_unsaved
    s.close()
    with FileStore(tmp_path / "s", CFG) as again:
        assert again.load_vote() == (3, "n1") and again.end_index == 0
    plain = FileStore(tmp_path / "p", CFG, files=files)  # and the plain store's synchronous save_vote
    plain.save_vote(2, "n0")
    files.arm(op, 1, errno.ENOSPC)
    with pytest.raises(DiskFullError):
        plain.save_vote(3, "n1")
    assert plain.load_vote() == (2, "n0")
    plain.save_vote(3, "n1")
    plain.close()


def test_no_space_for_the_checkpoint_keeps_the_old_one_and_the_store_goes_on(tmp_path: Path) -> None:
    files = FaultyFiles()
    s = FileStore(tmp_path / "s", CFG, files=files)
    for b in _batches(0, 5):
        s.append(b, 1)
    s.set_committed(4)
    s.flush()
    files.arm("pwrite", 1, errno.ENOSPC)  # the checkpoint's temp file
    with pytest.raises(DiskFullError):
        s.checkpoint()
    s.append([b"after"], 1)
    s.flush()
    s.checkpoint()
    end = s.end_index
    s.close()
    with FileStore(tmp_path / "s", CFG) as again:
        assert again.end_index == end and again.committed_index == 4


@pytest.mark.parametrize("nth", [1, 2, 3, 4, 5, 6])
def test_no_space_in_an_append_that_took_nothing_refuses_it_and_the_store_goes_on(tmp_path: Path, nth: int) -> None:
    """ENOSPC writing entries (a disk filled to its last block, where nothing was allocated ahead): before any
    entry is taken the append is DiskFullError, the end unmoved, and the same append succeeds once there is
    room; once part of a batch split at a segment end was taken, the store fails as on any write error."""
    files, ref, s, durable, big = _near_a_segment_end(tmp_path)
    ref.append(big, 1)
    end, pos = s.end_index, s.write_pos
    files.arm("pwrite", nth, errno.ENOSPC)
    try:
        s.append(big, 1)
    except DiskFullError:
        assert (s.end_index, s.write_pos) == (end, pos)
        assert s.append(big, 1).first_index == end + 1
        s.flush()
        s.close()
        _reopen_and_check(tmp_path / "s", ref, s.end_index).close()
        return
    except DiskError:
        assert s.end_index > end, "failed although no entry was taken"
        _assert_failed_stop(s, durable)
        _reopen_and_check(tmp_path / "s", ref, durable).close()
        return
    assert files.fired == 0  # the batch needed fewer writes than nth: it simply succeeded
    files.op = None
    s.close()


@pytest.mark.parametrize("nth", [1, 2])
def test_no_space_in_a_follower_append_refuses_it_and_the_store_goes_on(tmp_path: Path, nth: int) -> None:
    files, leader, s = _follower_of_a_leader(tmp_path)
    end = s.end_index
    raw, n = leader.read_raw(end + 1, 3, 1 << 20)
    files.arm("pwrite", nth, errno.ENOSPC)
    with pytest.raises(DiskFullError):
        s.append_encoded(raw)
    assert s.end_index == end
    while s.end_index < leader.end_index:
        raw, n = leader.read_raw(s.end_index + 1, 3, 1 << 20)
        s.append_encoded(raw)
    s.flush()
    s.close()
    _reopen_and_check(tmp_path / "s", leader, leader.end_index).close()
