"""SegmentList: fixed-size, pre-allocated files named by their 20-digit start offset (DLedger's
MmapFileList). Written with pwrite, read through a read-only shared mmap of each file."""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from dataclasses import dataclass, field

from ..errors import StoreError
from .vfs import OsFiles

NAME_DIGITS = 20
SPARE_SUFFIX = ".spare"


@dataclass(eq=False)
class Segment:
    """One segment file: bytes [start, start + size) of the list's offset space."""

    start: int
    path: str
    fd: int
    map: mmap.mmap
    view: memoryview = field(init=False)

    def __post_init__(self) -> None:
        self.view = memoryview(self.map)


class SegmentList:
    """A contiguous run of equal-size segments covering offsets [first.start, last.start + size)."""

    def __init__(self, directory: str, segment_bytes: int, files: OsFiles, preallocate: bool = True) -> None:
        self.dir = directory
        self.size = segment_bytes
        self.files = files
        self.segments: list[Segment] = []
        self.dirty: set[Segment] = set()
        self.lock = threading.Lock()  # guards closing segments against a concurrent flush
        # Guards `dirty` alone, held only for a set operation: a writer adding a segment while a flush
        # swaps the set must not add it to the set the flush has already taken.
        self._dirty_lock = threading.Lock()
        self.preallocate = preallocate
        self._spare: tuple[str, threading.Thread, list[int | BaseException]] | None = None

    # -- loading -------------------------------------------------------------------------------
    def load(self, cache: bool = False) -> list[str]:
        """Open the segment files found; return problems that were repaired.

        With `cache` (the index, which is rebuilt from data), segments after a gap are removed
        instead of refusing the list: recovery rebuilds what they held."""
        notes = []
        names = []
        for name in self.files.listdir(self.dir):
            if name.endswith(SPARE_SUFFIX):
                # A spare segment allocated ahead of need; it may be incomplete, so start over.
                self.files.unlink(os.path.join(self.dir, name))
                continue
            if len(name) != NAME_DIGITS or not name.isdigit():
                raise StoreError(f"{os.path.join(self.dir, name)}: not a segment file name")
            names.append(name)
        names.sort()
        prev = None
        for name in names:
            start = int(name)
            path = os.path.join(self.dir, name)
            if start % self.size:
                raise StoreError(f"{path}: start offset is not a multiple of the segment size {self.size}")
            if prev is not None and start != prev + self.size:
                if not cache:
                    raise StoreError(f"{path}: segment missing before it (previous starts at {prev})")
                notes.append(f"{path}: removed, a segment is missing before it (rebuilt from data)")
                self.files.unlink(path)
                continue
            fd = self.files.open(path)
            actual = self.files.size(fd)
            if actual > self.size:
                self.files.close(fd)
                raise StoreError(f"{path}: {actual} bytes, larger than the segment size {self.size}")
            if actual < self.size:
                # A crash while the file was being allocated: finish the allocation.
                notes.append(f"{path}: completed a partial allocation ({actual} of {self.size} bytes)")
                self.files.allocate(fd, self.size)
            self.segments.append(Segment(start, path, fd, self.files.map(fd, self.size)))
            prev = start
        return notes

    # -- geometry ------------------------------------------------------------------------------
    @property
    def start(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def end(self) -> int:
        return self.segments[-1].start + self.size if self.segments else 0

    def find(self, offset: int) -> Segment | None:
        """The segment holding `offset`, or None."""
        if not self.segments:
            return None
        i = (offset - self.segments[0].start) // self.size
        if 0 <= i < len(self.segments):
            return self.segments[i]
        return None

    def view(self, offset: int, n: int) -> memoryview:
        """A read-only view of [offset, offset + n), which must lie in one existing segment."""
        seg = self.find(offset)
        rel = offset - seg.start if seg else -1
        if seg is None or rel + n > self.size:
            raise StoreError(f"{self.dir}: read of {n} bytes at {offset} outside the segments")
        return seg.view[rel:rel + n]

    # -- writing -------------------------------------------------------------------------------
    def ensure(self, offset: int) -> Segment:
        """The segment holding `offset`, creating (pre-allocated) segments up to it."""
        seg = self.find(offset)
        if seg is not None:
            return seg
        base = offset - offset % self.size
        if self.segments and base < self.segments[0].start:
            raise StoreError(f"{self.dir}: offset {offset} is before the first segment")
        nxt = self.end if self.segments else base
        while True:
            path = os.path.join(self.dir, f"{nxt:0{NAME_DIGITS}d}")
            fd = self._take_spare(path)
            if fd is None:
                fd = self._open_allocated(path)
            try:
                mapped = self.files.map(fd, self.size)
            except BaseException:
                self.files.close(fd)
                raise
            seg = Segment(nxt, path, fd, mapped)
            with self.lock:
                self.segments.append(seg)
            self.files.fsync_dir(self.dir)
            if nxt == base:
                self._start_spare()
                return seg
            nxt += self.size

    def _open_allocated(self, path: str) -> int:
        """Open (creating) `path` and zero-fill it to the segment size; its fd."""
        fd = self.files.open(path)
        try:
            self.files.allocate(fd, self.size)
        except BaseException:
            self.files.close(fd)
            raise
        return fd

    # A spare segment is zero-filled in a background thread while the current one fills, so a
    # roll costs a rename rather than writing a whole segment of zeros (RocketMQ allocates ahead too).
    def _start_spare(self) -> None:
        if not self.preallocate:
            return
        path = os.path.join(self.dir, f"{self.end:0{NAME_DIGITS}d}{SPARE_SUFFIX}")
        result: list[int | BaseException] = []

        def allocate() -> None:
            try:
                result.append(self._open_allocated(path))
            except BaseException as e:  # reported when the spare is taken
                result.append(e)

        thread = threading.Thread(target=allocate, name=f"allocate:{path}", daemon=True)
        thread.start()
        self._spare = (path, thread, result)

    def wait_spare(self) -> None:
        """Block until the spare segment being allocated ahead (if any) is ready."""
        if self._spare is not None:
            self._spare[1].join()

    def _take_spare(self, path: str) -> int | None:
        """The spare's fd renamed to `path`, if the spare is for it; None to allocate in line."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        spare_path, thread, result = spare
        thread.join()
        outcome = result[0] if result else None
        if spare_path != path + SPARE_SUFFIX or not isinstance(outcome, int):
            if isinstance(outcome, int):
                self.files.close(outcome)
            with contextlib.suppress(OSError):
                self.files.unlink(spare_path)
            if isinstance(outcome, OSError):
                raise outcome
            return None
        os.replace(spare_path, path)
        return outcome

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """pwrite `data` at `offset`; it must not cross a segment boundary."""
        seg = self.ensure(offset)
        rel = offset - seg.start
        if rel + len(data) > self.size:
            raise StoreError(f"{self.dir}: write of {len(data)} bytes at {offset} crosses a segment end")
        self.files.pwrite(seg.fd, data, rel)
        with self._dirty_lock:
            self.dirty.add(seg)

    def zero(self, offset: int, end: int) -> None:
        """Write zeros over [offset, end) within existing segments (stale bytes must not survive)."""
        zeros = bytes(min(max(end - offset, 0), 1 << 20))
        while offset < end:
            seg = self.find(offset)
            if seg is None:
                return
            stop = min(end, seg.start + self.size)
            while offset < stop:
                n = min(len(zeros), stop - offset)
                self.files.pwrite(seg.fd, memoryview(zeros)[:n], offset - seg.start)
                offset += n
            with self._dirty_lock:
                self.dirty.add(seg)

    def sync(self) -> None:
        """fdatasync every segment written since the last sync."""
        with self.lock:
            with self._dirty_lock:
                dirty, self.dirty = self.dirty, set()
            for seg in sorted(dirty, key=lambda s: s.start):
                if seg in self.segments:
                    self.files.fdatasync(seg.fd)

    # -- removing ------------------------------------------------------------------------------
    def drop_after(self, offset: int) -> None:
        """Delete whole segments that start after the segment holding `offset`."""
        with self.lock:
            while self.segments and self.segments[-1].start > offset - offset % self.size:
                self._release(self.segments.pop())
        self.files.fsync_dir(self.dir)

    def drop_before(self, offset: int) -> int:
        """Delete whole segments that end at or before `offset`; return how many."""
        n = 0
        with self.lock:
            while self.segments and self.segments[0].start + self.size <= offset:
                self._release(self.segments.pop(0))
                n += 1
        if n:
            self.files.fsync_dir(self.dir)
        return n

    def clear(self) -> None:
        """Delete every segment, the last first: a crash part way leaves a contiguous run from the start,
        never one with a hole."""
        with self.lock:
            while self.segments:
                self._release(self.segments.pop())
        self.files.fsync_dir(self.dir)

    def _release(self, seg: Segment) -> None:
        self._close(seg)
        with self._dirty_lock:
            self.dirty.discard(seg)
        self.files.unlink(seg.path)

    def _close(self, seg: Segment) -> None:
        seg.view.release()
        # A reader may still hold a view into it; the mapping then goes when that view does.
        with contextlib.suppress(BufferError):
            seg.map.close()
        self.files.close(seg.fd)

    def _drop_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            path, thread, result = spare
            thread.join()
            if result and isinstance(result[0], int):
                self.files.close(result[0])
            with contextlib.suppress(OSError):
                self.files.unlink(path)

    def close(self) -> None:
        self._drop_spare()
        with self.lock:
            for seg in self.segments:
                self._close(seg)
            self.segments = []
            self.dirty = set()
