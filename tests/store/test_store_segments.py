"""Sparse segments and the window zero-filled ahead of the writes (store/segments.py), on real files."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from quorumlog.config import StoreConfig
from quorumlog.store import segments
from quorumlog.store.file_store import FileStore
from quorumlog.store.segments import SegmentList
from quorumlog.store.vfs import Buffer, OsFiles

MiB = 1 << 20


def _allocated(path: Path) -> int:
    return sum(os.stat(p).st_blocks * 512 for p in path.iterdir())


def test_a_new_segment_is_sparse_and_the_filler_stays_a_window_ahead(tmp_path: Path) -> None:
    seg = SegmentList(str(tmp_path), 64 * MiB, OsFiles())
    try:
        seg.write(0, b"x" * 4096)
        assert seg.wait_filled(30)
        used = _allocated(tmp_path)
        # The window and the data, not the segment: 64 MiB of file, the smallest window (+ a block)
        # allocated, for a writer that wrote one page.
        assert os.path.getsize(tmp_path / f"{0:020d}") == 64 * MiB
        assert segments.FILL_MIN_AHEAD <= used <= segments.FILL_MIN_AHEAD + 2 * 4096, used
        # The writer moves on, fast: the window grows to its largest and follows, into the next segment.
        seg.write(4096, bytes(40 * MiB))
        assert seg.ahead == segments.FILL_AHEAD
        assert seg.wait_filled(30)
        # The next segment was created ahead of the writer (off its path), and the window reaches into
        # it: the data and the window allocated, plus at most the file system's own blocks (with written
        # and allocated-unwritten extents side by side, ext4 may need an extent block outside the inode).
        assert os.path.getsize(tmp_path / f"{64 * MiB:020d}") == 64 * MiB
        end = 4096 + 40 * MiB + segments.FILL_AHEAD
        assert end - 4096 <= _allocated(tmp_path) <= end + 3 * 4096, _allocated(tmp_path) - end
    finally:
        seg.close()


def test_the_window_ahead_follows_the_write_rate(tmp_path: Path) -> None:
    """A slow writer keeps the smallest window; one that writes fast gets FILL_AHEAD_S of its rate; a pause
    halves it at most per judgement (an empty group's replica takes about a MiB per list, issue 36)."""
    seg = SegmentList(str(tmp_path), 64 * MiB, OsFiles())
    try:
        off = 0
        for _ in range(20):  # 20 x 16 KiB over 0.4 s: 0.8 MiB/s
            seg.write(off, bytes(16 * 1024))
            off += 16 * 1024
            time.sleep(0.02)
        assert seg.ahead == segments.FILL_MIN_AHEAD
        assert seg.wait_filled(30) and _allocated(tmp_path) <= off + segments.FILL_MIN_AHEAD + 2 * 4096
        for _ in range(64):  # 16 MiB at memory speed
            seg.write(off, bytes(256 * 1024))
            off += 256 * 1024
        assert seg.ahead == segments.FILL_AHEAD
        time.sleep(2.0)  # a pause, then one slow judgement (under 8 MiB/s): half the window, not the smallest
        seg.write(off, bytes(segments.FILL_AHEAD // 4))
        assert seg.ahead == segments.FILL_AHEAD // 2
    finally:
        seg.close()


def test_segments_smaller_than_a_block_settle(tmp_path: Path) -> None:
    """Index segments smaller than one block (tests use them): there is no block to allocate, and a
    store reopened over them settles at once (wait_filled waited its whole timeout, the next fill
    always pointing at a block that did not fit into the segment)."""
    cfg = StoreConfig(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
    s = FileStore(tmp_path, cfg)
    for _ in range(40):
        s.append([b"x" * 700], 3)
    s.close()
    s = FileStore(tmp_path, cfg)
    try:
        t0 = time.monotonic()
        assert s.index.wait_filled(5) and s.data.wait_filled(5) and time.monotonic() - t0 < 2
    finally:
        s.close()


@pytest.mark.parametrize("prewrite", [False, True])
def test_the_filler_never_overwrites_what_the_writer_wrote(tmp_path: Path, monkeypatch: object,
                                                           prewrite: bool) -> None:
    """Writes race the filler over a window small enough that it is always just ahead: every byte
    written must read back (a zero chunk landing on data would show here). With `prewrite`, the writer's
    own zeros ahead are judged at every write and always slow."""
    monkeypatch.setattr(segments, "FILL_AHEAD", 64 * 1024)  # type: ignore[attr-defined]
    monkeypatch.setattr(segments, "FILL_PAUSE_S", 0.0)  # type: ignore[attr-defined]
    monkeypatch.setattr(segments, "PREWRITE_AHEAD", 16 * 1024)  # type: ignore[attr-defined]
    monkeypatch.setattr(segments, "PREWRITE_RATE", 1 << 60)  # type: ignore[attr-defined]
    size = 8 * MiB
    seg = SegmentList(str(tmp_path), size, OsFiles(), prewrite=prewrite)
    written = bytearray()
    try:
        off = 0
        n = 0
        while off + 3000 < 2 * size:
            if off // size != (off + 3000) // size:
                off = (off // size + 1) * size  # no write crosses a segment end
                written.extend(bytes(off - len(written)))
            chunk = bytes([n % 251 + 1]) * (1000 + n % 2000)
            seg.write(off, chunk)
            written.extend(chunk)
            off += len(chunk)
            n += 1
        seg.sync()
        for start in range(0, len(written), size):
            piece = bytes(seg.view(start, min(size, len(written) - start)))
            assert piece == bytes(written[start:start + size]), f"data lost in the segment at {start}"
    finally:
        seg.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("fill:")], "the filler outlived close()"


class _Recording(OsFiles):
    def __init__(self) -> None:
        self.writes: list[tuple[int, int]] = []  # (offset, length) of every pwrite into a segment

    def pwrite(self, fd: int, data: Buffer | list[Buffer], offset: int) -> None:
        self.writes.append((offset, sum(len(d) for d in data) if isinstance(data, list) else len(data)))
        super().pwrite(fd, data, offset)


def test_writes_end_on_a_page_boundary_with_zeros_after_the_data(tmp_path: Path) -> None:
    """A write ends its last page with zeros (no read of that page from disk before it is written): the
    bytes past the data read as zeros, stale ones included, and nothing past that page or the segment's
    end is touched."""
    files = _Recording()
    size = 5 * 4096 + 100  # a segment that does not end on a page
    seg = SegmentList(str(tmp_path), size, files, preallocate=False)
    try:
        seg.write(0, b"s" * (3 * 4096))  # stale bytes that a truncation left past the log's end
        seg.write(100, b"a" * 5000)  # ends at 5100, inside the second page
        assert bytes(seg.view(0, 100)) == b"s" * 100
        assert bytes(seg.view(100, 5000)) == b"a" * 5000
        assert bytes(seg.view(5100, 8192 - 5100)) == bytes(8192 - 5100)  # padded to the page's end
        assert bytes(seg.view(8192, 4096)) == b"s" * 4096  # the next page untouched
        assert all((off + n) % 4096 == 0 for off, n in files.writes)
        seg.write(5 * 4096, b"z" * 50)  # the segment's last, partial page: padded to the segment's end only
        assert bytes(seg.view(5 * 4096, 100)) == b"z" * 50 + bytes(50)
        assert files.writes[-1] == (5 * 4096, 100)
    finally:
        seg.close()


def _cached(fd: int, offset: int) -> bool:
    """Whether the page at `offset` is in the page cache: a RWF_NOWAIT read fails where it is not."""
    try:
        os.preadv(fd, [bytearray(4096)], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return False
    return True


def test_synced_pages_far_behind_the_writer_leave_the_page_cache(tmp_path: Path, monkeypatch: object) -> None:
    """Pages synced more than CACHE_BEHIND behind the write position are dropped (mapped ones too), the
    recent ones stay cached, every byte still reads back, and a rewritten tail is cached again."""
    if not hasattr(os, "RWF_NOWAIT"):
        import pytest

        pytest.skip("no RWF_NOWAIT here to observe the page cache")
    monkeypatch.setattr(segments, "CACHE_BEHIND", 256 * 1024)  # type: ignore[attr-defined]
    monkeypatch.setattr(segments, "DROP_STEP", 64 * 1024)  # type: ignore[attr-defined]
    seg = SegmentList(str(tmp_path), 1 * MiB, OsFiles(), preallocate=False)
    chunk = 64 * 1024
    data = os.urandom(2 * MiB)
    try:
        seg.write(0, data[:chunk])
        seg.sync()
        assert bytes(seg.view(0, 16)) == data[:16]  # page 0 now mapped by a reader as well
        fd = os.open(tmp_path / f"{0:020d}", os.O_RDONLY)
        try:
            if not _cached(fd, 0):
                import pytest

                pytest.skip("this file system does not answer RWF_NOWAIT reads from its cache")
            for at in range(chunk, 2 * MiB, chunk):
                seg.write(at, data[at:at + chunk])
                seg.sync()
            assert not _cached(fd, 0) and not _cached(fd, MiB - 4096)
        finally:
            os.close(fd)
        fd = os.open(tmp_path / f"{MiB:020d}", os.O_RDONLY)
        try:  # the last 256 KiB stay
            assert not _cached(fd, 0) and _cached(fd, MiB - 256 * 1024) and _cached(fd, MiB - 4096)
        finally:
            os.close(fd)
        assert bytes(seg.view(0, MiB)) == data[:MiB] and bytes(seg.view(MiB, MiB)) == data[MiB:]
        seg.write(0, data[:chunk])  # a truncated log written again from its start: tracked afresh
        assert seg._dropped == 0
    finally:
        seg.close()


def test_a_short_pwritev_is_finished(tmp_path: Path, monkeypatch: object) -> None:
    """pwritev may write less than asked (a signal, a full quota); the rest is written after it."""
    real = os.pwritev

    def short(fd: int, buffers: list[bytes], offset: int) -> int:
        return real(fd, [memoryview(buffers[0])[:3]], offset)

    monkeypatch.setattr(os, "pwritev", short)  # type: ignore[attr-defined]
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        OsFiles().pwrite(fd, [b"abcdef", b"ghij"], 2)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"\0\0abcdefghij"


class _FullDisk(OsFiles):
    def allocate(self, fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")


def test_the_window_ahead_reads_as_zeros_and_a_full_disk_only_stops_it(tmp_path: Path) -> None:
    """The blocks allocated ahead read as zeros. Where the disk cannot give them, the filler stops with
    the error and appends go on into holes."""
    seg = SegmentList(str(tmp_path), 64 * MiB, OsFiles())
    try:
        seg.write(0, b"x" * 4096)
        assert seg.wait_filled(30) and seg.fill_error is None
        assert bytes(seg.view(16 * MiB, 4096)) == bytes(4096)
    finally:
        seg.close()
    full = SegmentList(str(tmp_path / "full"), 1 * MiB, _FullDisk())
    os.mkdir(tmp_path / "full")
    try:
        full.write(0, b"y" * 100)
        deadline = time.monotonic() + 10
        while full.fill_error is None:
            assert time.monotonic() < deadline, "the filler did not report the full disk"
            time.sleep(0.01)
        assert isinstance(full.fill_error, OSError) and full.fill_error.errno == 28
        full.write(100, b"z" * 100)
        assert bytes(full.view(0, 200)) == b"y" * 100 + b"z" * 100
    finally:
        full.close()


_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_FLAG_SYNC = 0x1
_FIEMAP_EXTENT_UNWRITTEN = 0x800


def _written_blocks(path: Path, start: int, length: int) -> int:
    """Bytes of [start, start + length) in blocks that hold written data (FIEMAP: mapped extents that are
    not unwritten; fallocated blocks and holes do not count)."""
    count = 256
    req = bytearray(struct.pack("=QQIIII", start, length, _FIEMAP_FLAG_SYNC, 0, count, 0) + bytes(56 * count))
    with open(path, "rb") as f:
        try:
            fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, req)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.ENOTTY):
                pytest.skip("this file system has no FIEMAP")
            raise
    mapped = struct.unpack_from("=I", req, 20)[0]
    total = 0
    for i in range(mapped):
        logical, _phys, n = struct.unpack_from("=QQQ", req, 32 + 56 * i)
        flags = struct.unpack_from("=I", req, 32 + 56 * i + 40)[0]
        if not flags & _FIEMAP_EXTENT_UNWRITTEN:
            total += max(0, min(logical + n, start + length) - max(logical, start))
    return total


def test_a_slow_writer_writes_zeros_ahead_into_its_allocated_blocks(tmp_path: Path) -> None:
    """Small appends at a few per second: the blocks after the data are written (zeros, read as zeros), so
    the next appends' fdatasyncs convert no extents; an fdatasync with them reads back the same."""
    seg = SegmentList(str(tmp_path), 64 * MiB, OsFiles(), prewrite=True)
    path = tmp_path / f"{0:020d}"
    try:
        seg.write(0, b"a" * 100)
        assert seg.wait_filled(30)  # (with the data ending inside a block: it once waited for ever)
        off = 100
        for i in range(5):  # the first writes found the filler behind; once it is ahead, zeros follow
            time.sleep(0.02)
            seg.write(off, bytes([98 + i]) * 100)
            off += 100
        seg.sync()
        ahead = segments.PREWRITE_AHEAD
        assert _written_blocks(path, 0, 4096 + ahead) == 4096 + ahead  # the data's page, then the zeros
        assert bytes(seg.view(off, ahead)) == bytes(ahead)
        assert _written_blocks(path, 4096 + ahead, 8 * MiB) == 0  # past them: allocated, never written
        assert bytes(seg.view(0, off)) == b"a" * 100 + b"".join(bytes([98 + i]) * 100 for i in range(5))
    finally:
        seg.close()


def test_a_fast_writer_writes_no_zeros_ahead(tmp_path: Path) -> None:
    """64 KiB writes back to back (far over PREWRITE_RATE): past the first judgement, the blocks ahead
    of the data stay allocated and unwritten, and the bytes written are the data's."""
    files = _Recording()
    seg = SegmentList(str(tmp_path), 64 * MiB, files, prewrite=True)
    path = tmp_path / f"{0:020d}"
    chunk = b"f" * (64 * 1024)
    try:
        seg.write(0, chunk)
        assert seg.wait_filled(30)
        end = 16 * MiB
        for off in range(len(chunk), end, len(chunk)):
            seg.write(off, chunk)
        seg.sync()
        assert _written_blocks(path, end, 4 * MiB) == 0
        assert sum(n for off, n in files.writes if off >= 1 * MiB) == end - 1 * MiB
        # At most one run of zeros, at the start (the first judgement follows the wait for the filler).
        assert _written_blocks(path, 0, 64 * MiB) <= end + segments.PREWRITE_AHEAD
    finally:
        seg.close()


@pytest.mark.parametrize("size", [8 * MiB, 32 * 335_544])  # within the window; the second as an index's
def test_a_writer_near_the_last_segments_end_does_not_wake_the_filler_again_and_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """With the segment allocated as far as the filler can go (its end, or its last whole block), the
    filler has nothing to do until the writer makes a new segment: a write must not wake it. It once did
    on every write (a thread switch, an open and a close per append, on every replica)."""
    chunks = 0
    fill_chunk = SegmentList._fill_chunk

    def counting(self: SegmentList) -> bool:
        nonlocal chunks
        chunks += 1
        return fill_chunk(self)

    monkeypatch.setattr(SegmentList, "_fill_chunk", counting)
    monkeypatch.setattr(segments, "FILL_MIN_AHEAD", segments.FILL_AHEAD)  # the window reaches the end at once
    seg = SegmentList(str(tmp_path), size, OsFiles())
    try:
        seg.write(0, b"i" * 32)
        assert seg.wait_filled(30)
        assert _allocated(tmp_path) >= size - size % segments.FILL_ALIGN
        time.sleep(0.05)  # the filler's last look done
        before = chunks
        for i in range(1, 101):  # appends one at a time
            seg.write(32 * i, b"i" * 32)
            time.sleep(0.001)
        assert chunks - before <= 1, chunks - before
        assert bytes(seg.view(0, 32 * 101)) == b"i" * (32 * 101)
    finally:
        seg.close()


def test_the_filler_goes_on_into_the_next_segment_when_the_size_is_no_multiple_of_a_block(tmp_path: Path) -> None:
    """An index segment's size is a multiple of its 32-byte units, not of the block: the filler once
    stopped at the first segment's last whole block, and every later segment was written into holes."""
    size = 32 * 335_544  # 10 MiB + 1,792 bytes: 2,621 whole blocks and a tail
    seg = SegmentList(str(tmp_path), size, OsFiles())
    try:
        seg.write(0, b"i" * 32)
        seg.write(size, b"j" * 32)  # the second segment
        assert seg.wait_filled(30)
        second = tmp_path / f"{size:020d}"
        assert os.stat(second).st_blocks * 512 >= size - size % segments.FILL_ALIGN
        assert bytes(seg.view(size, 32)) == b"j" * 32 and bytes(seg.view(0, 32)) == b"i" * 32
    finally:
        seg.close()


def test_pages_are_dropped_in_each_files_own_pages_when_the_size_is_no_multiple_of_a_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments of 1 MiB + 256 bytes (an index's size is counted in 32-byte units): the second segment
    starts inside a page of the offset space. The drop once passed madvise that unaligned offset; EINVAL
    failed the store, and `quorumlog local-cluster` lost all its nodes at once after ~2.9M entries."""
    monkeypatch.setattr(segments, "CACHE_BEHIND", 256 * 1024)
    monkeypatch.setattr(segments, "DROP_STEP", 64 * 1024)
    size = 32 * 32_776
    seg = SegmentList(str(tmp_path), size, OsFiles(), preallocate=False)
    data = os.urandom(4 * size)
    try:
        at = 0
        while at < len(data):
            n = min(60_000, (at // size + 1) * size - at, len(data) - at)  # never across a segment's end
            seg.write(at, data[at:at + n])
            seg.sync()
            at += n
        assert seg.drop_error is None
        fd = os.open(tmp_path / f"{size:020d}", os.O_RDONLY)
        try:
            last = size - size % 4096  # the file's last page, partly beyond its end
            if hasattr(os, "RWF_NOWAIT") and _cached(fd, 0):  # (a file system that shows its cache)
                pytest.fail("the second segment's first page stayed cached")
            if hasattr(os, "RWF_NOWAIT") and (_cached(fd, last - 4096) or _cached(fd, last)):
                pytest.fail("the second segment's last pages stayed cached")
        finally:
            os.close(fd)
        for k in range(4):
            assert bytes(seg.view(k * size, size)) == data[k * size:(k + 1) * size]
    finally:
        seg.close()


def test_a_failed_drop_of_cached_pages_stops_dropping_never_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping cached pages only saves memory: its error is kept (drop_error), the writes and syncs go on."""
    monkeypatch.setattr(segments, "CACHE_BEHIND", 64 * 1024)
    monkeypatch.setattr(segments, "DROP_STEP", 16 * 1024)

    class NoDrop(OsFiles):
        calls = 0

        def drop_cache(self, fd: int, mapped: object, offset: int, length: int) -> None:  # type: ignore[override]
            NoDrop.calls += 1
            raise OSError(errno.EINVAL, "Invalid argument")

    seg = SegmentList(str(tmp_path), 1 * MiB, NoDrop(), preallocate=False)
    try:
        for i in range(16):
            seg.write(i * 16384, bytes([i]) * 16384)
            seg.sync()
        assert isinstance(seg.drop_error, OSError) and NoDrop.calls == 1
        assert bytes(seg.view(15 * 16384, 16384)) == bytes([15]) * 16384
    finally:
        seg.close()


def test_the_filler_makes_the_next_segment_so_the_writer_never_waits_for_its_fsyncs(tmp_path: Path) -> None:
    """Creating a segment costs two fsyncs (the file's, the directory's: 15-40 ms under load); once the
    window ahead reaches the last segment's end the filler makes the next one, at most one ahead, and
    the writer moving into it finds it made."""
    class Creations(OsFiles):
        def __init__(self) -> None:
            self.by: list[str] = []  # the thread of every segment creation

        def extend(self, fd: int, size: int) -> None:
            self.by.append(threading.current_thread().name)
            super().extend(fd, size)

    files = Creations()
    size = 1 * MiB
    seg = SegmentList(str(tmp_path), size, files)
    try:
        seg.write(0, b"a" * 4096)  # the first segment is the writer's to make
        assert seg.wait_filled(30)
        assert len(seg.segments) == 2 and files.by[0] == threading.current_thread().name
        for k in range(1, 6):  # into each segment made ahead: the next is made ahead again
            seg.write(k * size, bytes([k]) * 4096)
            assert seg.wait_filled(30)
            assert len(seg.segments) == k + 2  # (the window of 32 MiB would reach further: one ahead)
        assert all(name.startswith("fill:") for name in files.by[1:]), files.by
        assert [bytes(seg.view(k * size, 4096)) for k in range(1, 6)] == [bytes([k]) * 4096 for k in range(1, 6)]
    finally:
        seg.close()
    reloaded = SegmentList(str(tmp_path), size, OsFiles(), preallocate=False)
    try:  # the one made ahead and never written is gone at load: a lost segment before it is a lost tail
        assert reloaded.load() == [] and len(reloaded.segments) == 6
    finally:
        reloaded.close()
