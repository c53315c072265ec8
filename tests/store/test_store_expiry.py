"""Expiry of old segments, disk-full refusal, clear errors for bad directories, async flush."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from store_helpers import log_of, small_config

import quorumlog.store.file_store as file_store_module
from quorumlog.errors import DiskFullError, IndexOutOfRangeError, StoreError
from quorumlog.store import MemoryStore
from quorumlog.store.file_store import FileStore, store_dir

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
SEG = CFG.data_segment_bytes
HOUR = 3600.0


class Usage:
    """An injectable disk-usage probe."""

    def __init__(self, ratio: float = 0.1) -> None:
        self.ratio = ratio
        self.calls = 0

    def __call__(self, path: str) -> float:
        self.calls += 1
        return self.ratio


def _filled(d: Path, usage: Usage, n: int = 60) -> tuple[FileStore, list]:
    s = FileStore(d, CFG, disk_usage=usage)
    for i in range(n):
        s.append([bytes([i % 251 + 1]) * 1500], 1 + i // 20)
    s.flush()
    assert s.data.wait_filled(30)  # the next segment made ahead: the files are settled
    return s, log_of(s)


def _segments(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d / "data") if not n.endswith(".spare"))


def test_expire_only_committed_safe_whole_old_segments(tmp_path: Path) -> None:
    usage = Usage()
    d = tmp_path / "s"
    s, log = _filled(d, usage)
    nsegs = len(_segments(d))
    assert nsegs >= 5
    now = time.time()
    # nothing committed: nothing goes, however old
    assert s.expire(10_000, now + 1000 * HOUR) == 0
    s.set_committed(s.end_index)
    # not old enough and disk not full: nothing goes
    assert s.expire(s.end_index, now) == 0
    # safe_index bounds it: only segments whose entries are all <= 20
    first_in_seg = sorted({e[2] // SEG: e[0] for e in reversed(log)}.items())
    removed = s.expire(20, now + 100 * HOUR)
    assert removed > 0 and s.begin_index == removed
    assert all(e[0] <= 20 for e in log[:removed])
    assert s.begin_index in [idx for _seg, idx in first_in_seg]
    assert s.end_index == log[-1][0]
    # reads below begin are refused; the first kept entry still verifies (its chain seed is kept)
    with pytest.raises(IndexOutOfRangeError):
        s.get(s.begin_index - 1)
    with pytest.raises(IndexOutOfRangeError):
        s.read(0, 10, 1 << 20)
    assert log_of(s) == log[removed:]
    raw, n = s.read_raw(s.begin_index, 5, 1 << 20)
    assert n == 5
    # everything committed and safe: all but the last entry's segment go (and the one created ahead of
    # it, which holds nothing, stays)
    removed2 = s.expire(s.end_index, now + 100 * HOUR)
    kept = _segments(d)
    assert removed2 > 0 and kept[0] == f"{log[-1][2] - log[-1][2] % SEG:020d}" and len(kept) <= 2
    assert s.get(s.end_index).body == log[-1][4]
    begin = s.begin_index
    s.close()
    s = FileStore(d, CFG, disk_usage=usage)
    try:
        assert s.begin_index == begin and log_of(s) == log[begin:]
        a = s.append([b"more"], s.end_term)
        assert a.first_index == log[-1][0] + 1
        # a follower of the same log accepts the new entry (positions and chain continue)
        f = MemoryStore(CFG)
        for e in log:
            f.append([e[4]], e[1])
        f.append_encoded(s.read_raw(a.first_index, 1, 1 << 20)[0])
        assert f.get(a.first_index).body == b"more"
    finally:
        s.close()


def test_expire_forced_by_disk_clean_ratio(tmp_path: Path) -> None:
    usage = Usage(0.1)
    s, log = _filled(tmp_path / "s", usage)
    s.set_committed(s.end_index)
    now = time.time()
    assert s.expire(s.end_index, now) == 0  # young segments, disk fine
    usage.ratio = CFG.disk_clean_ratio
    removed = s.expire(s.end_index, now)
    assert removed > 0 and log_of(s) == log[removed:]
    s.close()


def test_expire_respects_file_reserved_hours(tmp_path: Path) -> None:
    usage = Usage()
    d = tmp_path / "s"
    s, log = _filled(d, usage)
    s.set_committed(s.end_index)
    segs = _segments(d)
    now = time.time()
    # make only the first two segments old
    for name in segs[:2]:
        os.utime(d / "data" / name, (now - 100 * HOUR, now - 100 * HOUR))
    removed = s.expire(s.end_index, now)
    assert removed > 0 and _segments(d) == segs[2:]
    s.close()


def test_truncate_to_begin_minus_one_after_expiry(tmp_path: Path) -> None:
    usage = Usage()
    d = tmp_path / "s"
    s, log = _filled(d, usage)
    s.set_committed(30)
    begin = s.begin_index + s.expire(30, time.time() + 100 * HOUR)
    assert begin > 0
    with pytest.raises((IndexOutOfRangeError, StoreError)):
        s.truncate_after(begin - 2)
    s.close()


def test_disk_full_refuses_appends_until_space_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_store_module, "_DISK_PROBE_INTERVAL_S", 0)
    usage = Usage(0.5)
    d = tmp_path / "s"
    s = FileStore(d, CFG, disk_usage=usage)
    leader = MemoryStore(CFG)
    leader.append([b"a", b"b", b"c"], 1)
    s.append_encoded(leader.read_raw(0, 1, 100)[0])
    usage.ratio = CFG.disk_full_ratio
    before = (s.end_index, s.write_pos, log_of(s))
    with pytest.raises(DiskFullError) as info:
        s.append([b"x"], 1)
    assert info.value.code.name == "DISK_FULL"
    with pytest.raises(DiskFullError):
        s.append_encoded(leader.read_raw(1, 1, 100)[0])
    assert (s.end_index, s.write_pos, log_of(s)) == before
    s.flush()  # reads and flushes still work
    usage.ratio = CFG.disk_full_ratio - 0.01
    s.append_encoded(leader.read_raw(1, 2, 100)[0])
    assert s.end_index == 2
    s.close()
    s = FileStore(d, CFG, disk_usage=usage)
    assert log_of(s) == log_of(leader)
    s.close()


# -- clear errors ------------------------------------------------------------------------------
def test_directory_under_a_regular_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(StoreError, match="cannot create"):
        FileStore(f / "store", CFG)


def test_store_path_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(StoreError):
        FileStore(f, CFG)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes any directory")
def test_unwritable_directory(tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(StoreError):
            FileStore(d / "s", CFG)
    finally:
        d.chmod(0o700)


def test_stray_file_in_data(tmp_path: Path) -> None:
    d = tmp_path / "s"
    FileStore(d, CFG).close()
    (d / "data" / "notes.txt").write_bytes(b"hello")
    with pytest.raises(StoreError, match="notes.txt"):
        FileStore(d, CFG)


@pytest.mark.parametrize("size", [SEG + 1, 2 * SEG])
def test_segment_larger_than_configured(tmp_path: Path, size: int) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.append([b"x"], 1)
    s.close()
    with open(d / "data" / f"{0:020d}", "r+b") as f:
        f.truncate(size)
    with pytest.raises(StoreError, match="segment size"):
        FileStore(d, CFG)


def test_reopen_with_another_segment_size_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.append([b"x" * 100] * 300, 1)  # two segments
    s.close()
    with pytest.raises(StoreError):
        FileStore(d, small_config(data_segment_bytes=8 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096))


def test_misnamed_segment(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.append([b"x"], 1)  # a store in use (a stray segment in a pristine one lacks its currterm first)
    s.close()
    (d / "data" / f"{100:020d}").write_bytes(bytes(SEG))
    with pytest.raises(StoreError, match="multiple"):
        FileStore(d, CFG)


def test_gap_between_data_segments(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    for _ in range(3):
        s.append([b"y" * 4000] * 4, 1)
    s.close()
    os.unlink(d / "data" / f"{SEG:020d}")
    with pytest.raises(StoreError, match="missing"):
        FileStore(d, CFG)


def test_store_dir_layout(tmp_path: Path) -> None:
    p = store_dir(tmp_path, "g0", "n1")
    assert p == os.path.join(tmp_path, "g0", "n1")
    s = FileStore(p, CFG)
    s.append([b"x"], 1)
    s.save_vote(1, "n1")
    s.close()
    names = set(os.listdir(p))
    assert {"data", "index", "checkpoint", "currterm"} <= names
    assert all(len(n) == 20 and n.isdigit() for n in _segments(Path(p)))


def test_closed_store_refuses_writes(tmp_path: Path) -> None:
    s = FileStore(tmp_path / "s", CFG)
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.append([b"x"], 1)


# -- async flush -------------------------------------------------------------------------------
def _wait_for(cond: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.002)
    return cond()


def test_async_flush(tmp_path: Path) -> None:
    synced: list[int] = []
    from quorumlog.store.vfs import OsFiles

    class Counting(OsFiles):
        def fdatasync(self, fd: int) -> None:
            synced.append(fd)
            super().fdatasync(fd)

    cfg = small_config(flush="async", flush_interval_ms=5)
    d = tmp_path / "s"
    s = FileStore(d, cfg, files=Counting())
    s.append([b"a", b"b"], 1)
    assert s.durable_index == s.end_index == 1  # acknowledged from the page cache
    assert _wait_for(lambda: len(synced) > 0), "the background flush never ran"
    flusher = s._flusher
    assert flusher is not None and flusher.is_alive()
    s.close()
    assert not flusher.is_alive()
    n = len(synced)
    time.sleep(0.03)  # after close nothing syncs any more
    assert len(synced) == n
    s = FileStore(d, cfg)
    assert log_of(s)[-1][4] == b"b"
    s.close()


def test_expire_keeps_unflushed_entries(tmp_path: Path) -> None:
    """Entries not yet fdatasync'd are not expired: the checkpoint written by expire() can only name
    a flushed committed index, so expiring past it left committed_index below begin_index - 1
    after a crash."""
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    for i in range(40):
        s.append([bytes([i + 1]) * 1500], 1)
    s.flush()
    flushed = s.durable_index
    for i in range(40):
        s.append([bytes([i + 1]) * 1500], 1)
    s.set_committed(s.end_index)
    removed = s.expire(70, time.time() + 1000 * HOUR)
    assert s.begin_index - 1 <= flushed and removed > 0
    s.abandon()  # crash: no flush, no close
    s = FileStore(d, CFG)
    try:
        assert s.committed_index >= s.begin_index - 1
        assert s.end_index == 79
    finally:
        s.close()


def test_a_fast_writer_is_refused_within_a_mebibyte_of_the_disk_filling(tmp_path: Path) -> None:
    """The disk is probed every 0.1 s and after every MiB written: between two timed probes a fast writer
    on a small disk wrote its whole headroom away, met ENOSPC, and failed the store for good."""
    cfg = small_config(data_segment_bytes=8 << 20, index_segment_bytes=32 * 65536)
    s: FileStore

    def usage(path: str) -> float:  # the disk fills once 3 MiB are written
        return 0.95 if s._write_pos >= 3 << 20 else 0.5

    s = FileStore(tmp_path / "s", cfg, disk_usage=usage)
    try:
        with pytest.raises(DiskFullError):
            for _ in range(2000):  # 200 MB unless refused
                s.append([b"x" * 1000] * 100, 1)
        assert s._write_pos < (3 << 20) + (1 << 20) + 110_000
        assert s.get(s.end_index).body == b"x" * 1000  # refused, not failed
    finally:
        s.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system takes root")
def test_a_small_real_disk_fills_up_to_a_refusal_never_a_failed_store(tmp_path: Path) -> None:
    """On a real 64 MiB file system (tmpfs), appends of 100 KiB as fast as they go end in DiskFullError;
    the store still reads and closes cleanly."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        cfg = small_config(data_segment_bytes=8 << 20, index_segment_bytes=32 * 65536)
        s = FileStore(mnt / "s", cfg)
        try:
            with pytest.raises(DiskFullError):
                for _ in range(2000):
                    s.append([b"x" * 1000] * 100, 1)
                    s.flush()
            assert s.get(s.end_index).body == b"x" * 1000
            end = s.end_index
        finally:
            s.close()
        s = FileStore(mnt / "s", cfg)
        try:
            assert s.end_index == end
        finally:
            s.close()
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
