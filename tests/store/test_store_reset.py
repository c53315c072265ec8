"""Log reset on disk: the files it leaves, a crash at every step of it, and a follower reset to an
expired leader ending with the same entries and the same check-store digest."""

from __future__ import annotations

import errno
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import body, bounds_of, log_of, small_config

from quorumlog.entry import INDEX_UNIT_SIZE, replica_digest
from quorumlog.errors import DiskError
from quorumlog.store import MemoryStore
from quorumlog.store.file_store import FileStore
from quorumlog.store.verify import verify_store
from quorumlog.store.vfs import OsFiles

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
SEG = CFG.data_segment_bytes
LATER = time.time() + 1e7


def expired_leader(d: Path | str, n: int = 60, size: int = 1500) -> FileStore:
    leader = FileStore(d, CFG)
    leader.save_vote(2, None)
    for i in range(n):
        leader.append([body(i, size)], 1 + i // 15)
    leader.set_committed(leader.end_index)
    leader.flush()
    assert leader.expire(leader.end_index * 2 // 3, LATER) > 0
    return leader


def segment_names(d: Path, sub: str) -> list[str]:
    return sorted(n for n in os.listdir(d / sub) if not n.endswith(".spare"))


def made(d: Path, sub: str, starts: list[int], size: int) -> bool:
    """The segments are those at `starts`, and perhaps the next, which the filler creates ahead."""
    names = segment_names(d, sub)
    want = [f"{start:020d}" for start in starts]
    return names in (want, want + [f"{starts[-1] + size:020d}"])


def test_reset_removes_every_segment_and_the_next_append_makes_the_right_ones(tmp_path: Path) -> None:
    leader = expired_leader(tmp_path / "leader")
    b, p, c, t = bounds_of(leader)
    d = tmp_path / "f"
    s = FileStore(d, CFG)
    for i in range(50):
        s.append([body(1000 + i, 1200)], 1)
    s.reset(b, p, c, t)
    assert segment_names(d, "data") == [] and segment_names(d, "index") == []
    s.close()
    s = FileStore(d, CFG)  # a reset log with no segment yet opens (the checkpoint names no entry)
    assert bounds_of(s) == (b, p, c, t) and s.end_index == b - 1
    s.append_encoded(leader.read_raw(b, 3, 1 << 20)[0])
    assert made(d, "data", [p - p % SEG], SEG)
    isize = CFG.index_segment_bytes
    starts = {i * INDEX_UNIT_SIZE // isize * isize for i in range(b, b + 3)}  # the 3 units may straddle one
    assert made(d, "index", sorted(starts), isize)
    with open(d / "data" / f"{p - p % SEG:020d}", "rb") as f:
        assert f.read(p % SEG) == bytes(p % SEG)  # zero-filled before begin_pos
    s.close()
    leader.close()
    assert verify_store(str(d)).errors == []


class CrashingFiles(OsFiles):
    """Dies at the n-th checkpoint write, segment unlink or directory sync made by the test's thread:
    the operation is done first when `after`, then an OSError stands for the process dying."""

    def __init__(self) -> None:
        self.n = 0
        self.after = False
        self.count = 0
        self.owner = threading.get_ident()

    def _step(self, op: str) -> bool:
        """Count the operation; True when the crash comes after doing it, raises when before."""
        if threading.get_ident() != self.owner or not self.n:
            return False
        self.count += 1
        if self.count != self.n:
            return False
        self.n = 0
        if not self.after:
            raise OSError(errno.EIO, f"crash before {op}")
        return True

    def _die(self, op: str) -> None:
        raise OSError(errno.EIO, f"crash after {op}")

    def write_atomic(self, path: str, data: bytes) -> None:
        crash = self._step("write_atomic")
        super().write_atomic(path, data)
        if crash:
            self._die("write_atomic")

    def unlink(self, path: str) -> None:
        crash = self._step("unlink")
        super().unlink(path)
        if crash:
            self._die("unlink")

    def fsync_dir(self, path: str) -> None:
        crash = self._step("fsync_dir")
        super().fsync_dir(path)
        if crash:
            self._die("fsync_dir")


def _follower(d: Path, files: OsFiles) -> tuple[FileStore, list]:
    s = FileStore(d, CFG, files=files)
    s.save_vote(2, None)
    for i in range(70):  # several data and index segments of a diverging log
        s.append([body(5000 + i, 700)], 1)
    s.set_committed(3)
    s.flush()
    s.checkpoint()
    # The segments made ahead settled, so that every run's reset has the same steps to crash at.
    assert s.data.wait_filled(30) and s.index.wait_filled(30)
    return s, log_of(s)


def _steps_of_a_reset(tmp: Path, leader: FileStore) -> int:
    files = CrashingFiles()
    s, _ = _follower(tmp / "count", files)
    files.n = -1  # count, never crash
    s.reset(*bounds_of(leader))
    files.n = 0
    s.close()
    return files.count


def test_crash_at_every_step_of_a_reset(tmp_path: Path) -> None:
    leader = expired_leader(tmp_path / "leader")
    b = leader.begin_index
    steps = _steps_of_a_reset(tmp_path, leader)
    assert steps >= 8  # the checkpoint, then every segment file and directory sync
    raw, _n = leader.read_raw(b, 1000, 1 << 30)
    for n in range(1, steps + 1):
        for after in (False, True):
            d = tmp_path / f"f{n}{int(after)}"
            files = CrashingFiles()
            s, old_log = _follower(d, files)
            files.n, files.after = n, after
            with pytest.raises(DiskError):
                s.reset(*bounds_of(leader))
            s.abandon()
            s = FileStore(d, CFG)
            try:
                assert s.damage is None
                if s.begin_index != b:  # died before the new checkpoint was in place: the old log
                    assert log_of(s) == old_log and s.committed_index == 3
                    s.reset(*bounds_of(leader))
                assert s.end_index == b - 1 and bounds_of(s) == bounds_of(leader)
                assert s.append_encoded(raw) == leader.end_index
                assert log_of(s) == log_of(leader)
            finally:
                s.close()
            assert verify_store(str(d)).digest == verify_store(str(tmp_path / "leader")).digest
    leader.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 4096), min_size=20, max_size=120), expire_at=st.floats(0.1, 1.0),
       mine=st.integers(0, 30), chunk=st.integers(1, 9))
def test_follower_reset_to_an_expired_leader_converges(sizes: list[int], expire_at: float, mine: int,
                                                        chunk: int) -> None:
    with tempfile.TemporaryDirectory(prefix="qlreset") as tmp:
        leader = FileStore(os.path.join(tmp, "leader"), CFG)
        for i, n in enumerate(sizes):
            leader.append([body(i, n)], 1 + i // 10)
        leader.set_committed(leader.end_index)
        leader.flush()
        leader.expire(int(leader.end_index * expire_at), LATER)
        follower = FileStore(os.path.join(tmp, "follower"), CFG)
        memory = MemoryStore(CFG)
        for f in (follower, memory):
            f.append([body(900 + i, 333) for i in range(mine)], 1)
            f.reset(*bounds_of(leader))
            start = leader.begin_index
            while start <= leader.end_index:
                raw, k = leader.read_raw(start, chunk, 1 << 20)
                assert f.append_encoded(raw) == start + k - 1
                start += k
            assert log_of(f) == log_of(leader) and f.write_pos == leader.write_pos
        leader.close()
        follower.close()
        want = verify_store(os.path.join(tmp, "leader"))
        got = verify_store(os.path.join(tmp, "follower"))
        assert got.errors == [] and want.errors == []
        assert (got.begin_index, got.end_index, got.end_term, got.digest) == \
            (want.begin_index, want.end_index, want.end_term, want.digest)
        assert replica_digest(memory.read(memory.begin_index, 1 << 20, 1 << 40)) == want.digest
