"""FileStore: DLedger's segmented data and index files, with CRCs checked on every read.

Layout of one store directory (`<data-dir>/<group>/<node-id>/`):
  data/       fixed-size data segments: entries (48-byte header + body), blank records at segment ends
  index/      fixed-size index segments: a 32-byte unit per entry at offset index * 32
  checkpoint  begin/end/committed index and a recovery anchor, replaced atomically
  currterm    current term and voted-for, replaced atomically before a vote is answered
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

from ..config import StoreConfig
from ..entry import (
    BLANK,
    BLANK_SIZE,
    HEADER,
    HEADER_SIZE,
    INDEX_UNIT,
    INDEX_UNIT_SIZE,
    MAGIC_BLANK,
    MAGIC_NORMAL,
    VALID_MAGICS,
    Entry,
    encode_run,
)
from ..errors import (
    CorruptCommittedError,
    CorruptEntryError,
    DiskError,
    DiskFullError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    StoreError,
)
from .base import Appended, Damage, check_bodies, place, verify_run
from .checkpoint import Checkpoint, StableState, read_checkpoint, read_stable, write_checkpoint, write_stable
from .reader import RecentBatches, read_checked
from .recovery import Scan, WalkError, scan, walk
from .segments import SegmentList
from .vfs import OsFiles

_unit = INDEX_UNIT.unpack_from
_unpack_header = HEADER.unpack_from
_pack_unit = INDEX_UNIT.pack_into
_DISK_PROBE_INTERVAL_S = 0.1


def store_dir(data_dir: str | os.PathLike[str], group: str, node_id: str) -> str:
    """Where the store of (group, node) lives under a node's data directory."""
    return os.path.join(os.fspath(data_dir), group, node_id)


class FileStore:
    """A LogStore on disk. Open it with FileStore(directory, config); recovery runs on open.

    With repair=False (the default) recovery raises CorruptCommittedError when an entry at or
    below the checkpointed committed index is damaged; with repair=True it cuts the log there and
    reports the loss in `damage`, so the node can re-fetch the range before it votes again.
    """

    def __init__(self, directory: str | os.PathLike[str], config: StoreConfig | None = None, *,
                 files: OsFiles | None = None, repair: bool = False,
                 disk_usage: Callable[[str], float] | None = None) -> None:
        self.config = cfg = config or StoreConfig()
        self.dir = os.fspath(directory)
        self.files = files or OsFiles()
        self._disk_usage = disk_usage or self.files.disk_usage
        self._max_body = cfg.max_body_bytes
        self._seg = cfg.data_segment_bytes
        self._failed: DiskError | None = None
        self._epoch = 0  # bumped by every truncation, so a concurrent flush knows what it synced
        # The last batches this store encoded as leader, kept so that pushing them to followers needs
        # no read back (and no second CRC check of bytes this process has just computed).
        self._recent = RecentBatches(16)
        self._state_lock = threading.Lock()  # a flush's check-and-set of _flushed vs a truncation
        self._closed = False
        self._disk_full = False
        self._next_disk_probe = 0.0
        self.notes: list[str] = []  # what recovery repaired, for logs and check-store
        try:
            os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
            os.makedirs(os.path.join(self.dir, "index"), exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create store directory {self.dir}: {e.strerror}") from None
        if not os.access(self.dir, os.R_OK | os.W_OK | os.X_OK):
            raise StoreError(f"store directory {self.dir} is not readable and writable")
        self.data = SegmentList(os.path.join(self.dir, "data"), self._seg, self.files)
        self.index = SegmentList(os.path.join(self.dir, "index"), cfg.index_segment_bytes, self.files)
        try:
            self._recover(repair)
        except BaseException:
            self.data.close()
            self.index.close()
            raise
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        if cfg.flush == "async":
            self._flusher = threading.Thread(target=self._flush_loop, name=f"flush:{self.dir}", daemon=True)
            self._flusher.start()

    # -- recovery ------------------------------------------------------------------------------
    def _recover(self, repair: bool) -> None:
        self.notes += self.data.load()
        self.notes += self.index.load(cache=True)
        cp = read_checkpoint(self.dir)
        self._stable = read_stable(self.dir)
        # Segments wholly before the checkpointed begin were being expired when the process stopped.
        if self.data.drop_before(cp.begin_pos - cp.begin_pos % self._seg):
            self.notes.append("removed data segments left over from an interrupted expiry")
        result: Scan = scan(self.data, self.index, cp, self._max_body)
        self.notes += result.notes
        self._begin = cp.begin_index
        self._begin_pos = cp.begin_pos
        self._begin_chain = cp.begin_chain
        committed = cp.committed_index
        self._damage: Damage | None = None
        if result.error is not None and result.next_index <= committed:
            msg = (f"{self.dir}: committed entry {result.next_index} is damaged "
                   f"(committed index {committed}): {result.error}")
            if not repair:
                raise CorruptCommittedError(msg, result.next_index)
            self._damage = Damage(result.next_index, committed, result.error)
            self.notes.append(msg + "; cut there, to be re-fetched from the leader")
        elif result.next_index <= committed:
            # Clean end, but entries the checkpoint calls committed are missing.
            msg = f"{self.dir}: log ends at {result.next_index - 1} but entries up to {committed} were committed"
            if not repair:
                raise CorruptCommittedError(msg, result.next_index)
            self._damage = Damage(result.next_index, committed, "missing committed entries")
            self.notes.append(msg + "; to be re-fetched from the leader")
        self._end = result.next_index - 1
        self._end_term = result.end_term
        self._chain = result.chain
        self._write_pos = result.write_pos
        if result.error is not None:
            self.notes.append(f"cut a torn or corrupt tail at entry {result.next_index} "
                              f"(pos {result.write_pos}): {result.error}")
        # Nothing stale may remain past the end: zero the rest of the tail segment if a
        # corrupt tail was cut, and drop any later segments of data and index.
        if result.dirty_tail:
            seg_end = self._write_pos - self._write_pos % self._seg + self._seg
            self.data.zero(self._write_pos, seg_end)
        self.data.drop_after(max(self._write_pos, self.data.start))
        self.index.drop_after(max((self._end + 1) * INDEX_UNIT_SIZE, self.index.start))
        self._committed = min(committed, self._end)
        self._committed_floor = committed if self._damage else -1
        self.data.sync()
        self.index.sync()
        self._flushed = self._end
        if result.error is not None or result.rebuilt or self._damage:
            self.checkpoint()

    # -- state ---------------------------------------------------------------------------------
    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def end_index(self) -> int:
        return self._end

    @property
    def end_term(self) -> int:
        return self._end_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def durable_index(self) -> int:
        return self._flushed if self.config.flush == "sync" else self._end

    @property
    def write_pos(self) -> int:
        return self._write_pos

    @property
    def damage(self) -> Damage | None:
        return self._damage

    # -- writes --------------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._failed is not None:
            raise DiskError(f"store {self.dir} failed earlier and must be reopened: {self._failed}")
        if self._closed:
            raise StoreError(f"store {self.dir} is closed")

    def _check_space(self) -> None:
        now = time.monotonic()
        if now >= self._next_disk_probe:
            self._next_disk_probe = now + _DISK_PROBE_INTERVAL_S
            self._disk_full = self._disk_usage(self.dir) >= self.config.disk_full_ratio
        if self._disk_full:
            raise DiskFullError(f"disk use at {self.dir} is past disk_full_ratio {self.config.disk_full_ratio}")

    def append(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL) -> Appended:
        self._check_writable()
        self._check_space()
        check_bodies(bodies, self._max_body)
        if term < self._end_term:
            raise InvalidArgumentError(f"term {term} is below the log's end term {self._end_term}")
        first = self._end + 1
        positions: list[int] = []
        if not bodies:
            return Appended(first, term, positions)
        try:
            wp = self._write_pos
            seg_end = wp - wp % self._seg + self._seg
            total = sum(map(len, bodies)) + HEADER_SIZE * len(bodies)
            if wp + total + BLANK_SIZE <= seg_end:
                self._write_run(bodies, magic, first, term, wp, positions)
            else:  # the batch crosses a segment end: split it where place() rolls over
                start = 0
                index = first
                for i, body in enumerate(bodies):
                    size = HEADER_SIZE + len(body)
                    pos = place(wp, size, self._seg)
                    if pos != wp:
                        if i > start:
                            self._write_run(bodies[start:i], magic, index, term, self._write_pos, positions)
                            index = first + i
                            start = i
                        self._write_blank(wp)
                        self._write_pos = pos
                    wp = pos + size
                self._write_run(bodies[start:], magic, index, term, self._write_pos, positions)
        except OSError as e:
            self._fail(e)
        return Appended(first, term, positions)

    def _write_run(self, bodies: Sequence[bytes], magic: int, first: int, term: int, pos: int,
                   positions: list[int]) -> None:
        data, units, chain = encode_run(bodies, magic, first, term, pos, self._chain, positions)
        self.data.write(pos, data)
        self._write_units(first, units)
        self._chain = chain
        self._write_pos = pos + len(data)
        self._end = first + len(bodies) - 1
        self._end_term = term
        self._recent.add(first, self._end, data, positions[-len(bodies):])

    def _write_units(self, first: int, units: bytes | bytearray | memoryview) -> None:
        off = first * INDEX_UNIT_SIZE
        view = memoryview(units)
        while view:
            room = self.index.size - off % self.index.size
            self.index.write(off, view[:room])
            off += min(room, len(view))
            view = view[room:]

    def _write_blank(self, pos: int) -> None:
        seg_end = pos - pos % self._seg + self._seg
        self.data.write(pos, BLANK.pack(MAGIC_BLANK, seg_end - pos))

    def append_encoded(self, data: bytes | bytearray | memoryview) -> int:
        self._check_writable()
        self._check_space()
        prev_chain = self._chain if self._end >= self._begin or self._begin == 0 else self._begin_chain
        run = verify_run(data, self._end + 1, self._write_pos, prev_chain, self._end_term,
                         self._seg, self._max_body)
        if not run:
            return self._end
        mv = memoryview(data)
        units = bytearray(INDEX_UNIT_SIZE * len(run))
        first = run[0][3]
        try:
            wp = self._write_pos
            chunk_off = chunk_pos = -1
            for off, pos, size, index, term, magic in run:
                _pack_unit(units, (index - first) * INDEX_UNIT_SIZE, magic, pos, size, index, term)
                if pos != wp:  # rolled to the next segment: write what we have, then a blank
                    if chunk_off >= 0:
                        self.data.write(chunk_pos, mv[chunk_off:off])
                    self._write_blank(wp)
                    chunk_off = -1
                if chunk_off < 0:
                    chunk_off, chunk_pos = off, pos
                wp = pos + size
            self.data.write(chunk_pos, mv[chunk_off:])
            self._write_units(first, units)
        except OSError as e:
            self._fail(e)
        last_off, last_pos, last_size, last_index, last_term, _m = run[-1]
        self._chain = int.from_bytes(mv[last_off + 36:last_off + 40], "big")
        self._write_pos = wp
        self._end = last_index
        self._end_term = last_term
        if self._damage is not None and self._end >= self._damage.committed_index:
            # The lost committed entries are back: they are committed again.
            self._committed = max(self._committed, self._damage.committed_index)
            self._damage = None
            self._committed_floor = -1
        return self._end

    def set_committed(self, index: int) -> None:
        self._committed = max(self._committed, min(index, self._end))

    def truncate_after(self, index: int) -> None:
        self._check_writable()
        if index >= self._end:
            return
        if index < self._committed:
            raise StoreError(f"refusing to truncate after {index}: entries up to {self._committed} are committed")
        if index < self._begin - 1:
            raise IndexOutOfRangeError(f"cannot truncate after {index}: log begins at {self._begin}")
        try:
            if index >= self._begin:
                _m, pos, size, _i, term = self._unit(index)
                new_wp = pos + size
                chain = int.from_bytes(self.data.view(pos + 36, 4), "big")
            else:
                new_wp, term, chain = self._begin_pos, 0, self._begin_chain
            old_wp = self._write_pos
            if self.data.find(old_wp) is self.data.find(new_wp):
                self.data.zero(new_wp, old_wp)
            else:
                self.data.zero(new_wp, new_wp - new_wp % self._seg + self._seg)
                self.data.drop_after(new_wp)
            # Index units past the end are never read (reads stop at end_index) and are
            # overwritten by the next appends, so only whole later segments go.
            self.index.drop_after(max((index + 1) * INDEX_UNIT_SIZE, self.index.start))
        except OSError as e:
            self._fail(e)
        self._recent.clear()
        with self._state_lock:
            self._epoch += 1
            self._end = index
            self._end_term = term
            self._chain = chain
            self._write_pos = new_wp
            self._flushed = min(self._flushed, index)

    def flush(self) -> int:
        self._check_writable()
        # flush() may run in a worker thread while the owner appends or truncates. Capture the end
        # before syncing (appends after it are not covered); a truncation meanwhile (a new epoch) may
        # have replaced entries up to that end with unsynced ones, so then nothing more is claimed.
        epoch = self._epoch
        end = self._end
        try:
            # Only data needs syncing for durability: index units past the checkpoint's anchor are
            # rebuilt from data by recovery, and checkpoint() syncs the index before it names an anchor.
            self.data.sync()
        except OSError as e:
            self._fail(e)
        with self._state_lock:
            if epoch == self._epoch and end > self._flushed:
                self._flushed = end
        return self.durable_index

    def checkpoint(self) -> None:
        self._check_writable()
        # Only what is fsynced may be named: in async mode durable_index runs ahead of the disk.
        committed = max(min(self._committed, self._flushed), self._committed_floor)
        anchor = min(self._committed, self._flushed)
        if anchor >= self._begin:
            _m, apos, _s, _i, _t = self._unit(anchor)
            achain = int.from_bytes(self.data.view(apos + 36, 4), "big")
        else:
            anchor, apos, achain = -1, -1, 0
        try:
            self.index.sync()
            write_checkpoint(self.files, self.dir, Checkpoint(
                begin_index=self._begin, begin_pos=self._begin_pos, begin_chain=self._begin_chain,
                end_index=self._flushed, committed_index=committed,
                anchor_index=anchor, anchor_pos=apos, anchor_chain=achain))
        except OSError as e:
            self._fail(e)

    def load_vote(self) -> tuple[int, str | None]:
        return self._stable.term, self._stable.voted_for

    def save_vote(self, term: int, voted_for: str | None) -> None:
        self._save_stable(StableState(term, voted_for, self._stable.recovering))

    @property
    def recovering(self) -> bool:
        return self._stable.recovering

    def set_recovering(self, recovering: bool) -> None:
        if recovering != self._stable.recovering:
            self._save_stable(StableState(self._stable.term, self._stable.voted_for, recovering))

    def _save_stable(self, state: StableState) -> None:
        self._check_writable()
        try:
            write_stable(self.files, self.dir, state)
        except OSError as e:
            self._fail(e)
        self._stable = state

    def expire(self, safe_index: int, now_s: float) -> int:
        """Remove whole data segments (never the one being written) whose entries are all committed
        and <= safe_index, when older than file_reserved_hours or while disk use is at or past
        disk_clean_ratio. Returns how many entries were removed."""
        self._check_writable()
        limit = min(safe_index, self._committed, self._flushed)  # never unsynced entries
        segs = self.data.segments
        drop = 0  # how many leading segments go
        new_begin, new_pos = self._begin, self._begin_pos
        max_age_s = self.config.file_reserved_hours * 3600
        forced = self._disk_usage(self.dir) >= self.config.disk_clean_ratio
        while drop < len(segs) - 1:
            nxt = segs[drop + 1]
            first_next = self._first_index_in(nxt.start)
            if first_next is None or first_next - 1 > limit:
                break
            if not forced and now_s - self.files.mtime(segs[drop].path) < max_age_s:
                break
            drop += 1
            new_begin, new_pos = first_next, nxt.start
        if drop == 0:
            return 0
        _m, ppos, _s, _i, _t = self._unit(new_begin - 1)
        removed = new_begin - self._begin
        self._begin_chain = int.from_bytes(self.data.view(ppos + 36, 4), "big")
        self._begin, self._begin_pos = new_begin, new_pos
        # The checkpoint names the new begin before any file goes, so a crash in between is harmless.
        self.checkpoint()
        try:
            self.data.drop_before(new_pos)
            self.index.drop_before(new_begin * INDEX_UNIT_SIZE)
        except OSError as e:
            self._fail(e)
        return removed

    def _first_index_in(self, seg_start: int) -> int | None:
        head = self.data.view(seg_start, HEADER_SIZE)
        magic = int.from_bytes(head[0:4], "big", signed=True)
        if magic in (0, MAGIC_BLANK):
            return None
        return int.from_bytes(head[8:16], "big")

    def close(self) -> None:
        if self._closed:
            return
        if self._flusher is not None:
            self._stop.set()
            self._flusher.join()
        if self._failed is None:
            self.flush()
            self.checkpoint()
        self._closed = True
        self.data.close()
        self.index.close()

    def __enter__(self) -> FileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------------
    def _unit(self, index: int) -> tuple[int, int, int, int, int]:
        """The index unit of `index` (magic, pos, size, index, term), checked against the index."""
        if not self._begin <= index <= self._end:
            raise IndexOutOfRangeError(f"index {index} outside [{self._begin}, {self._end}]")
        u = self._raw_unit(index)
        return u if u is not None else self._rebuild_unit(index)

    def _raw_unit(self, index: int) -> tuple[int, int, int, int, int] | None:
        """The index unit of `index` if it looks sound, else None."""
        seg = self.index.find(index * INDEX_UNIT_SIZE)
        if seg is None:
            return None
        u = _unit(seg.view, index * INDEX_UNIT_SIZE - seg.start)
        if u[3] != index or u[2] < HEADER_SIZE or u[0] not in VALID_MAGICS:
            return None
        return u

    def _rebuild_unit(self, index: int) -> tuple[int, int, int, int, int]:
        """Index units are a cache of the data: find the nearest sound unit before `index`, walk the
        data from there and rewrite the units up to `index` (recovery checks only the tail's units)."""
        j = index - 1
        u = None
        while j >= self._begin and (u := self._raw_unit(j)) is None:
            j -= 1
        if u is not None:
            pos = u[1] + u[2]
            chain: int | None = int.from_bytes(self.data.view(u[1] + 36, 4), "big")
            term = u[4]
        else:
            pos, chain, term = self._begin_pos, self._begin_chain, 0
        try:
            for _view, _rel, h in walk(self.data, pos, j + 1, chain, term, self._max_body):
                unit = (h[0], h[4], h[1], h[2], h[3])
                self.index.write(h[2] * INDEX_UNIT_SIZE, INDEX_UNIT.pack(*unit))
                if h[2] == index:
                    self.notes.append(f"rebuilt index units {j + 1}..{index} from the data")
                    return unit
        except (WalkError, OSError) as e:
            raise CorruptEntryError(f"{self.dir}: index unit of entry {index} is damaged and the data "
                                    f"cannot rebuild it: {e}") from None
        raise CorruptEntryError(f"{self.dir}: index unit of entry {index} is damaged; the data ends before it")

    def _prev_chain(self, index: int) -> int | None:
        if index > self._begin:
            _m, pos, _s, _i, _t = self._unit(index - 1)
            return int.from_bytes(self.data.view(pos + 36, 4), "big")
        return self._begin_chain

    def get(self, index: int) -> Entry:
        self._unit(index)  # IndexOutOfRangeError outside [begin, end]
        return self.read(index, 1, 0)[0]

    def term_at(self, index: int) -> int:
        if index == self._begin - 1 and index == -1:
            return 0
        return self._unit(index)[4]

    def _iter_raw(self, start: int, max_count: int, max_bytes: int, control: bool = True,
                  bodies: bool = False) -> list[tuple[memoryview, int, tuple]]:
        """Checked entries from `start`: (segment view, offset in it, header) each. max_count counts
        the entries returned (control entries are skipped unless `control`); max_bytes counts
        whole entries, or only bodies when `bodies`."""
        out: list[tuple[memoryview, int, tuple]] = []
        if max_count <= 0 or start > self._end:
            return out
        _m, pos, _s, _i, _t = self._unit(start)
        chain = self._prev_chain(start)
        try:
            return read_checked(self.data, pos, start, self._end, chain, max_count, max_bytes, control, bodies,
                                self._max_body)
        except CorruptEntryError as e:
            raise CorruptEntryError(f"{self.dir}: {e}") from None

    def read(self, start: int, max_count: int, max_bytes: int, include_control: bool = True) -> list[Entry]:
        return [Entry(h[2], h[3], h[4], bytes(view[rel + HEADER_SIZE:rel + h[1]]), h[0])
                for view, rel, h in self._iter_raw(start, max_count, max_bytes, include_control, True)]

    def read_raw(self, start: int, max_count: int, max_bytes: int) -> tuple[bytes, int]:
        parts: list[bytes] = []
        count = used = 0
        index = start
        # Recently encoded batches first; the disk (with every entry checked) for the rest.
        while count < max_count and (used < max_bytes or not count) and index <= self._end:
            hit = self._recent.slice(index, max_count - count, max_bytes - used)
            if hit is None:
                break
            parts.append(hit[0])
            count += hit[1]
            used += len(hit[0])
            index += hit[1]
        if count < max_count and (used < max_bytes or not count) and index <= self._end:
            chunk, n = self._read_raw_disk(index, max_count - count, max_bytes - used)
            parts.append(chunk)
            count += n
        if len(parts) == 1:
            return parts[0], count
        return b"".join(parts), count

    def _read_raw_disk(self, start: int, max_count: int, max_bytes: int) -> tuple[bytes, int]:
        items = self._iter_raw(start, max_count, max_bytes)
        if not items:
            return b"", 0
        parts = []
        run_view, run_start, run_end = items[0][0], items[0][1], items[0][1]
        for view, rel, h in items:
            if view is not run_view or rel != run_end:
                parts.append(run_view[run_start:run_end])
                run_view, run_start = view, rel
            run_end = rel + h[1]
        parts.append(run_view[run_start:run_end])
        return (bytes(parts[0]) if len(parts) == 1 else b"".join(parts)), len(items)

    # -- failure -------------------------------------------------------------------------------
    def _fail(self, e: OSError) -> None:
        """Fail stop: after a failed write or fdatasync the page cache cannot be trusted."""
        self._failed = DiskError(f"{self.dir}: {e}")
        raise self._failed from e

    def _flush_loop(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        while not self._stop.wait(interval):
            try:
                self.flush()
            except StoreError:
                return

