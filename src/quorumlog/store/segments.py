"""SegmentList: fixed-size files named by their 20-digit start offset (DLedger's MmapFileList). Written
with pwrite, read through a read-only shared mmap of each file.

A segment is created sparse (its full size at once, no blocks), so a new store starts at once and an
empty one takes no disk. Writes into holes would make every fdatasync also commit block allocation, so a
background filler allocates a bounded window ahead of the write position (FILL_AHEAD, in paced chunks,
each allocation made durable by the filler itself) with `posix_fallocate`: blocks reserved, nothing
written. Appends then land in allocated blocks and the disk holds the data plus that window. Zeros written
ahead (O_DIRECT) did the same but wrote every byte twice: with three replicas on one disk the appends
got half its bandwidth (docs/performance.md). The filler never touches a byte below one the writer may
have written: both take `_fill_lock` around any write at or past `_filled`. The window grows with the
write rate (FILL_AHEAD_S of it), so a store that is not written takes little more than its data."""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
from dataclasses import dataclass, field

from ..errors import StoreError
from .vfs import NO_SPACE, OUT_OF_FILES, OsFiles

NAME_DIGITS = 20
SPARE_SUFFIX = ".spare"  # segments allocated ahead by earlier versions: removed at load
# The window allocated ahead of the write position follows the write rate: FILL_AHEAD_S of writing at the
# rate last judged, between FILL_MIN_AHEAD and FILL_AHEAD. An idle or new store (a group that only holds
# its leader's first entry) so takes about one MiB per list, not a fast writer's 32 (issue 36: 300 empty
# groups took 47 GB before the first append); a fast writer's window grows within its first MiB.
FILL_AHEAD = 32 << 20
FILL_MIN_AHEAD = 1 << 20
FILL_AHEAD_S = 1.0
FILL_CHUNK = 4 << 20  # one fallocate and one fdatasync
FILL_ALIGN = 4096  # whole blocks
PAGE = 4096  # appends end on a page boundary (zeros after the data): see SegmentList.write
FILL_PAUSE_S = 0.002  # between chunks once the window is half full: the appends keep most of the disk
# Synced pages further than this behind the write position are dropped from the page cache, a step at a
# time. The kernel then hands the same pages to the next appends: writing into freshly allocated page
# cache cost 1.7 ms of CPU per MiB with three writers on this VM, into recycled pages 0.34 ms
# (docs/performance.md). Readers of older data read it from disk; recent data is also in memory.
CACHE_BEHIND = 64 << 20
DROP_STEP = 8 << 20
# A slow writer (under PREWRITE_RATE) writes zeros this far past its data, in the same pwritev, so its
# next appends land in written blocks: an fdatasync after a write into fallocated (unwritten) blocks also
# commits the extent's conversion to the journal, and the replicas' commits queue on the one journal.
# Three replicas appending 4 KiB + fdatasync each: p50 0.26 ms into fallocated blocks, 0.17 ms into written
# ones (docs/performance.md). A fast writer's flushes are large and few, and zeros would double its bytes.
PREWRITE_AHEAD = 256 << 10
PREWRITE_RATE = 16 << 20  # bytes/s
_ZEROS_AHEAD = memoryview(bytes(PREWRITE_AHEAD + PAGE))


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

    def __init__(self, directory: str, segment_bytes: int, files: OsFiles, preallocate: bool = True,
                 prewrite: bool = False) -> None:
        self.dir = directory
        self.size = segment_bytes
        self.files = files
        self.segments: list[Segment] = []
        self.dirty: set[Segment] = set()
        self.lock = threading.Lock()  # guards closing segments against a concurrent flush
        # Guards `dirty` alone, held only for a set operation: a writer adding a segment while a flush
        # swaps the set must not add it to the set the flush has already taken.
        self._dirty_lock = threading.Lock()
        self.preallocate = preallocate  # fill ahead (False: a read-only verifier never writes)
        self._filled = 0  # bytes below this offset have blocks (data, or allocated ahead); above may be holes
        self.ahead = min(FILL_MIN_AHEAD, FILL_AHEAD)  # the window allocated ahead (_judge_rate)
        self._rate_at = -1  # the write rate was last judged at this offset (-1: from the first write on) ...
        self._rate_t = 0.0  # ... and this time
        self._write_end = 0  # the end of the latest write
        self._dropped = 0  # page cache below this offset has been dropped (see CACHE_BEHIND)
        self._synced = 0  # what the last sync made durable ends here
        self.prewrite = prewrite  # zeros past a slow writer's data (PREWRITE_AHEAD): the data segments
        self._prewrite_at = 0  # the rate was last judged at this offset ...
        self._prewrite_t = 0.0  # ... and this time
        self._prewrite_next = 0  # a write reaching this offset is judged (about PREWRITE_AHEAD / 2 apart)
        self._fill_lock = threading.Lock()
        self._create_lock = threading.Lock()  # one segment created at a time: the writer's or the filler's
        self._fill_wanted = threading.Event()
        self._filler: threading.Thread | None = None
        self._closing = False
        self.fill_error: BaseException | None = None  # the filler's last failure (the appends still work)
        self.drop_error: OSError | None = None  # dropping cached pages stopped (see CACHE_BEHIND)

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
        # Segments the filler created ahead of the writer that it never reached: their first page is zeros,
        # where a written segment starts with an entry (or index unit) header. Removed, so that one lost
        # to damage before them reads as a lost tail (recovery's to judge), not as a hole; the first one
        # is kept, as it holds the list's start.
        while len(names) > 1 and not int(names[-1]) % self.size and self._unused(os.path.join(self.dir, names[-1])):
            self.files.unlink(os.path.join(self.dir, names.pop()))
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
                # A file written before segments were created sparse, cut short by a crash.
                notes.append(f"{path}: completed a partial allocation ({actual} of {self.size} bytes)")
                self.files.extend(fd, self.size)
            self.segments.append(Segment(start, path, fd, self.files.map(fd, self.size)))
            prev = start
        return notes

    def _unused(self, path: str) -> bool:
        fd = self.files.open(path)
        try:
            page = os.pread(fd, PAGE, 0)
        finally:
            self.files.close(fd)
        return page == bytes(len(page))

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
        """The segment holding `offset`, creating (sparse) segments up to it."""
        seg = self.find(offset)
        if seg is not None:
            return seg
        base = offset - offset % self.size
        if self.segments and base < self.segments[0].start:
            raise StoreError(f"{self.dir}: offset {offset} is before the first segment")
        with self._create_lock:  # (the filler may be creating the next one: then it is there after)
            while True:
                seg = self.find(offset)
                if seg is not None:
                    return seg
                nxt = self.end if self.segments else base
                seg = self._create(nxt)
                with self.lock:
                    self.segments.append(seg)

    def _create(self, start: int) -> Segment:
        """Create the segment starting at `start` (under `_create_lock`): sparse, at its full size, and
        durable before any write lands in it; on failure (no descriptor for the directory) it is not
        taken, and the next attempt opens and syncs it again."""
        path = os.path.join(self.dir, f"{start:0{NAME_DIGITS}d}")
        fd = self._open_allocated(path)
        try:
            mapped = self.files.map(fd, self.size)
            try:
                self.files.fsync_dir(self.dir)
            except BaseException:
                mapped.close()
                raise
        except BaseException:
            self.files.close(fd)
            raise
        return Segment(start, path, fd, mapped)

    def _create_next(self) -> bool:
        """In the filler: create the segment after the last, where the writer will go next, so that its
        fsyncs (the file's and the directory's, over 20 ms at times under load) are not on the writer's path; False
        when none is wanted. At most one segment ahead of the writer's."""
        with self._create_lock:
            with self.lock:
                if not self._next_wanted():
                    return False
                start = self.end
            try:
                seg = self._create(start)
            except OSError as e:
                if e.errno in OUT_OF_FILES:
                    return False  # no descriptor free now: the writer makes it, or the filler later
                raise
            with self.lock:
                if self.end == start and not self._closing:
                    self.segments.append(seg)
                    return True
            # A truncation or close meanwhile: the file is nobody's (creating is under _create_lock).
            self._close(seg)
            self.files.unlink(seg.path)
            return False

    def _next_wanted(self) -> bool:
        """Whether the filler should create the next segment: the writer is in the last one, and the
        window ahead of it passes that one's end."""
        return (not self._closing and bool(self.segments) and self.segments[-1].start <= self._write_end
                and self.end < self._write_end + self.ahead)

    def _open_allocated(self, path: str) -> int:
        """Open (creating) `path` at the segment size, sparse and durable; its fd."""
        fd = self.files.open(path)
        try:
            self.files.extend(fd, self.size)
        except BaseException:
            self.files.close(fd)
            raise
        return fd

    # -- filling ahead -------------------------------------------------------------------------
    def _wake_filler(self) -> None:
        if not self.preallocate or self._closing:
            return
        if self._filler is None:
            self._filler = threading.Thread(target=self._fill, name=f"fill:{self.dir}", daemon=True)
            self._filler.start()
        self._fill_wanted.set()

    def _fill(self) -> None:
        while not self._closing:
            self._fill_wanted.wait()
            self._fill_wanted.clear()
            try:
                while not self._closing and self._fill_chunk():
                    if self._filled - self._write_end > self.ahead // 2:
                        time.sleep(FILL_PAUSE_S)  # comfortably ahead: leave the disk to the appends
                self.fill_error = None
            except OSError as e:  # appends allocate as they write meanwhile
                self.fill_error = e
                if e.errno not in NO_SPACE:
                    return  # no more filling ahead
                # A full disk: the writer's next wake-up tries again (the store refuses appends while
                # disk use is past disk_full_ratio, so that is once it has room).

    def _fill_chunk(self) -> bool:
        """Allocate the next aligned chunk ahead of the writer, durably; False when the window is full.

        Through an fd of its own: a segment dropped meanwhile only gets blocks in its unlinked file. The
        flush (`lock`) never waits for the filler's I/O, the writer (`_fill_lock`) only for its
        fallocate."""
        with self.lock:
            plan = self._next_fill()
            if plan is not None:
                seg, start = plan
                end = self._write_end + self.ahead
                try:
                    fd = os.open(seg.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
                except OSError as e:
                    if e.errno in OUT_OF_FILES:
                        return False  # no descriptor free now: fill again at the writer's next wake-up
                    raise
        if plan is None:  # ahead far enough, or at the last segment's end: then the next one is made
            return self._create_next()
        try:
            with self._fill_lock:
                if self._filled > start:
                    return True  # the writer went past meanwhile: look again
                n = min(FILL_CHUNK, seg.start + self.size - start, end - start) // FILL_ALIGN * FILL_ALIGN
                if n <= 0:
                    return False
                self.files.allocate(fd, start - seg.start, n)
                self._filled = start + n
            self.files.fdatasync(fd)  # the allocation durable now, not in an append's fdatasync
        finally:
            os.close(fd)
        return True

    def _next_fill(self) -> tuple[Segment, int] | None:
        """Where the filler allocates next: the first whole block (counted from its segment's start) at
        or past `_filled`, in the next segment when this one has none left; None when the window ahead of
        the writer ends before it, no segment holds it yet, or a segment is smaller than one block."""
        if self.size < FILL_ALIGN:
            return None
        seg = self.find(self._filled)
        if seg is None:
            return None
        rel = -(-(self._filled - seg.start) // FILL_ALIGN) * FILL_ALIGN  # the writer's block is allocated
        if rel + FILL_ALIGN > self.size:  # (a size that is no multiple of the block leaves a tail)
            seg, rel = self.find(seg.start + self.size), 0
            if seg is None:
                return None
        start = seg.start + rel
        return (seg, start) if start + FILL_ALIGN <= self._write_end + self.ahead else None

    @property
    def unsynced_bytes(self) -> int:
        """Bytes written since the last sync began (what the next one will write out, about)."""
        return max(0, self._write_end - self._synced)

    def wait_filled(self, timeout: float = 60.0) -> bool:
        """Block (bounded) until the window ahead of the write position is filled, the next segment made
        if the window reaches it (benchmarks, tests)."""
        deadline = time.monotonic() + timeout
        if self.segments:
            self._wake_filler()  # (a writer wakes it only once the window is half used)
        while time.monotonic() < deadline:
            with self.lock, self._fill_lock:
                if not self.preallocate or self.fill_error is not None or (
                        self._next_fill() is None and not self._next_wanted()):
                    return True
            time.sleep(0.01)
        return False

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """pwrite `data` at `offset`; it must not cross a segment boundary."""
        seg = self.ensure(offset)
        rel = offset - seg.start
        end = offset + len(data)
        if rel + len(data) > self.size:
            raise StoreError(f"{self.dir}: write of {len(data)} bytes at {offset} crosses a segment end")
        # The last page is written whole, zeros after the data (what reads there already, or stale bytes
        # past the log's end): a page partly written that is not in the page cache is first read from
        # disk, synchronously, which doubled a batch's pwrite when written blocks lay ahead.
        tail_at = end - end % PAGE
        pad = min(tail_at + PAGE, seg.start + self.size) - end if end != tail_at else 0
        written = end + pad
        if self.prewrite and written >= self._prewrite_next:
            pad += self._zeros_ahead(seg, written)
            written = end + pad
        parts = [data, _ZEROS_AHEAD[:pad]] if pad else data  # one pwritev
        if written <= self._filled:  # below the filler's mark: it never writes there
            self.files.pwrite(seg.fd, parts, rel)
        else:
            with self._fill_lock:
                self.files.pwrite(seg.fd, parts, rel)
                self._filled = max(self._filled, written)
        self._write_end = end
        if self._rate_at < 0:
            self._rate_at, self._rate_t = offset, time.monotonic()
        if end - self._rate_at >= self.ahead // 4:
            self._judge_rate(end)
        if offset < self._dropped:  # rewriting a truncated tail: its pages are cached again
            self._dropped = offset - offset % PAGE
        with self._dirty_lock:
            self.dirty.add(seg)
        # Only when there is a block to allocate or, from the last segment, the next one to make: woken
        # with nothing to do, it once cost every append a thread switch, an open and a close.
        if self._filled < end + self.ahead // 2 and (
                self._filled + FILL_ALIGN <= self.end - self.size % FILL_ALIGN or seg is self.segments[-1]):
            self._wake_filler()

    def _judge_rate(self, end: int) -> None:
        """Size the window ahead to FILL_AHEAD_S of writing at the rate since the last judgement (every
        quarter window written), a power of two within [FILL_MIN_AHEAD, FILL_AHEAD]; it shrinks by half at
        most per judgement, so a writer's pauses do not cost it its window."""
        now = time.monotonic()
        rate = (end - self._rate_at) / max(now - self._rate_t, 1e-6)
        want = 1 << max(0, int(rate * FILL_AHEAD_S) - 1).bit_length()
        self.ahead = max(min(FILL_MIN_AHEAD, FILL_AHEAD), min(FILL_AHEAD, max(want, self.ahead // 2)))
        self._rate_at, self._rate_t = end, now

    def _zeros_ahead(self, seg: Segment, written: int) -> int:
        """How many zeros to write after `written` (page-aligned): up to PREWRITE_AHEAD when the writer
        wrote under PREWRITE_RATE since this was last judged; only into blocks the filler allocated (the
        zeros never need a block: no ENOSPC) and within the segment; else none."""
        now = time.monotonic()
        slow = written - self._prewrite_at < PREWRITE_RATE * (now - self._prewrite_t)
        self._prewrite_at, self._prewrite_t = written, now
        if not slow:
            self._prewrite_next = written + PREWRITE_AHEAD // 2
            return 0
        stop = min(written + PREWRITE_AHEAD, seg.start + self.size, self._filled)
        stop -= stop % PAGE
        # Again when half of them are used; at once when the filler has not allocated that far yet.
        self._prewrite_next = max(written, stop - PREWRITE_AHEAD // 2)
        return max(0, stop - written)

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
        """fdatasync every segment written since the last sync; then drop the page cache far behind."""
        synced = self._write_end  # written before the sync began: durable once it returns
        with self.lock:
            with self._dirty_lock:
                dirty, self.dirty = self.dirty, set()
            for seg in sorted(dirty, key=lambda s: s.start):
                if seg in self.segments:
                    self.files.fdatasync(seg.fd)
            self._synced = synced
            upto = synced - CACHE_BEHIND
            if upto - self._dropped >= DROP_STEP:
                self._drop_cache(upto - upto % PAGE)

    def _drop_cache(self, upto: int) -> None:
        """Drop cached pages of [max(_dropped, start), upto) (under `lock`)."""
        self._drop_range(max(self._dropped, self.start), upto)
        self._dropped = max(self._dropped, upto)

    def drop_cold(self, offset: int, end: int) -> None:
        """Drop cached pages of [offset, end) if all of it lies below what sync() has dropped behind the
        writer already (a scrub's reads of old segments: on the loop, which alone releases segments)."""
        if end <= self._dropped:
            self._drop_range(max(offset, self.start), end)

    def _drop_range(self, at: int, upto: int) -> None:
        """Drop cached pages of [at, upto), segment by segment.

        In each file's own pages: a segment size that is no multiple of the page (an index's, counted in
        32-byte units) starts later segments inside a page of the offset space, and an unaligned start
        made madvise fail. Dropping only saves memory: a failure stops it (drop_error), never the store."""
        while at < upto and self.drop_error is None:
            seg = self.find(at)
            if seg is None:
                break
            stop = min(upto, seg.start + self.size)
            rel, rel_stop = at - seg.start, stop - seg.start
            rel -= rel % PAGE  # the page left at the last step's end (synced long ago, like all here)
            if stop == seg.start + self.size:  # the file's last page too (the kernel keeps partial ones)
                rel_stop += -rel_stop % PAGE
            else:
                rel_stop -= rel_stop % PAGE
            try:
                if rel < rel_stop:
                    self.files.drop_cache(seg.fd, seg.map, rel, rel_stop - rel)
            except OSError as e:
                self.drop_error = e
            at = stop

    # -- removing ------------------------------------------------------------------------------
    def drop_after(self, offset: int) -> None:
        """Delete whole segments that start after the segment holding `offset`."""
        with self.lock:
            while self.segments and self.segments[-1].start > offset - offset % self.size:
                self._release(self.segments.pop())
            self._forget_filled()
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
            self._forget_filled()
        self.files.fsync_dir(self.dir)

    def _forget_filled(self) -> None:
        """Segments went: a segment created again where they were starts with holes."""
        with self._fill_lock:
            self._filled = min(self._filled, self.end)
            self._write_end = min(self._write_end, self.end)
        self._prewrite_next = min(self._prewrite_next, self.end)
        self._dropped = min(self._dropped, self.end)
        self._synced = min(self._synced, self.end)

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

    def close(self) -> None:
        self._closing = True
        self._fill_wanted.set()
        if self._filler is not None:
            self._filler.join()
        with self.lock:
            for seg in self.segments:
                self._close(seg)
            self.segments = []
            self.dirty = set()
