"""FileStore's read side: entries found through index units that are checked against the entry header
they point at, and read back with every CRC checked."""

from __future__ import annotations

from .. import hotpath
from ..entry import HEADER, HEADER_SIZE, INDEX_UNIT, INDEX_UNIT_SIZE, VALID_MAGICS, Entry, entry_at
from ..errors import CorruptEntryError, IndexOutOfRangeError
from .reader import RecentBatches, drop_control, read_checked
from .recovery import WalkError, walk
from .segments import SegmentList

_unit = INDEX_UNIT.unpack_from
_unpack_header = HEADER.unpack_from

Unit = tuple[int, int, int, int, int]  # magic, pos, size, index, term


class FileReads:
    """Reads of a FileStore (mixed into it): get, read, read_raw, term_at and the index lookups."""

    dir: str
    data: SegmentList
    index: SegmentList
    notes: list[str]
    _begin: int
    _begin_pos: int
    _begin_chain: int
    _begin_term: int
    _end: int
    _end_term: int
    _seg: int
    _max_body: int
    _recent: RecentBatches

    def _check_range(self, index: int) -> None:
        if not self._begin <= index <= self._end:
            raise IndexOutOfRangeError(f"index {index} outside [{self._begin}, {self._end}]")

    def _unit(self, index: int) -> Unit:
        """The index unit of `index` (magic, pos, size, index, term), checked against its entry's header."""
        self._check_range(index)
        u = self._raw_unit(index)
        return u if u is not None else self._rebuild_unit(index)

    def _raw_unit(self, index: int) -> Unit | None:
        """The index unit of `index` if it agrees with the header it points at, else None.

        Units carry no CRC of their own: comparing magic, size, index, term and pos with the entry's
        header (48 bytes through the mmap) catches a damaged unit before anything trusts it."""
        seg = self.index.find(index * INDEX_UNIT_SIZE)
        if seg is None:
            return None
        u = _unit(seg.view, index * INDEX_UNIT_SIZE - seg.start)
        if u[3] != index or u[2] < HEADER_SIZE or u[0] not in VALID_MAGICS:
            return None
        dseg = self.data.find(u[1])
        rel = u[1] - dseg.start if dseg is not None else -1
        if dseg is None or rel + HEADER_SIZE > self._seg:
            return None
        h = _unpack_header(dseg.view, rel)
        if h[0] != u[0] or h[1] != u[2] or h[2] != index or h[3] != u[4] or h[4] != u[1]:
            return None
        return u

    def _rebuild_unit(self, index: int) -> Unit:
        """Index units are a cache of the data: find the nearest sound unit before `index`, walk the
        data from there (checking every entry) and rewrite the units up to `index`."""
        j = index - 1
        u = None
        while j >= self._begin and (u := self._raw_unit(j)) is None:
            j -= 1
        if u is not None:
            pos, chain, term = u[1] + u[2], self._chain_at(u[1]), u[4]
        else:
            pos, chain, term = self._begin_pos, self._begin_chain, self._begin_term
        try:
            for _view, _rel, h in walk(self.data, pos, j + 1, chain, term, self._max_body):
                unit = (h[0], h[4], h[1], h[2], h[3])
                self.index.write(h[2] * INDEX_UNIT_SIZE, INDEX_UNIT.pack(*unit))
                if h[2] == index:
                    self.notes.append(f"rebuilt index units {j + 1}..{index} from the data")
                    return unit
        except (WalkError, OSError) as e:
            raise CorruptEntryError(f"{self.dir}: index unit of entry {index} is damaged and the data "
                                    f"cannot rebuild it: {e}", index=index) from None
        raise CorruptEntryError(f"{self.dir}: index unit of entry {index} is damaged; the data ends before it",
                                index=index)

    def _chain_at(self, pos: int) -> int:
        """The chain CRC in the header of the entry at `pos`."""
        return int.from_bytes(self.data.view(pos + 36, 4), "big")

    def _prev_chain(self, index: int) -> int:
        if index > self._begin:
            return self._chain_at(self._unit(index - 1)[1])
        return self._begin_chain

    def get(self, index: int) -> Entry:
        self._check_range(index)
        return self.read(index, 1, 0)[0]

    def end_pos(self, index: int) -> int:
        if index == self._begin - 1:
            return self._begin_pos
        _m, pos, size, _i, _t = self._unit(index)
        return int(pos + size)

    def term_at(self, index: int) -> int:
        if index == self._begin - 1:
            return self._begin_term
        if index == self._end:  # the one a leader and a follower ask for most, once or twice an append
            return self._end_term
        return self._unit(index)[4]

    def _iter_raw(self, start: int, max_count: int, max_bytes: int, control: bool = True,
                  bodies: bool = False) -> list[tuple[memoryview, int, tuple]]:
        """Checked entries from `start`: (segment view, offset in it, header) each. max_count counts
        the entries returned (control entries are skipped unless `control`); max_bytes counts
        whole entries, or only bodies when `bodies`."""
        if start < self._begin:
            raise IndexOutOfRangeError(f"index {start} is below the log's first index {self._begin}")
        if max_count <= 0 or start > self._end:
            return []
        pos = self._unit(start)[1]
        chain = self._prev_chain(start)
        try:
            return read_checked(self.data, pos, start, self._end, chain, max_count, max_bytes, control, bodies,
                                self._max_body)
        except CorruptEntryError as e:
            raise CorruptEntryError(f"{self.dir}: {e}", index=e.index) from None

    def read(self, start: int, max_count: int, max_bytes: int, include_control: bool = True) -> list[Entry]:
        # An entry without metadata is built inline (the common case, and the read path's per-entry cost).
        return [Entry(h[2], h[3], h[4], bytes(view[rel + HEADER_SIZE:rel + h[1]]), h[0])
                if h[1] - h[8] == HEADER_SIZE else entry_at(view, rel, h)
                for view, rel, h in self._iter_raw(start, max_count, max_bytes, include_control, True)]

    def read_raw(self, start: int, max_count: int, max_bytes: int) -> tuple[bytes | memoryview, int]:
        parts, n = self.read_raw_parts(start, max_count, max_bytes)
        if len(parts) == 1:
            part = parts[0]
            # A recent batch's buffer is never written again: its view needs no copy (a leader's pushes).
            # A segment's bytes past the commit index may be rewritten by a truncation: copy those.
            if isinstance(part, memoryview) and isinstance(part.obj, bytearray):
                return part, n
            return bytes(part), n
        return b"".join(parts), n

    def scrub(self, start: int, last: int, max_bytes: int) -> tuple[int, int]:
        """Check entries start..last (about max_bytes of them, at least one) as a read checks them (header,
        body CRC, chain), from the segments, never from the recent batches in memory: the next index to
        check and the bytes checked. Raises CorruptEntryError naming the first damaged entry.

        A background scrub reads the whole log at a low rate, so damage in entries nobody reads is found
        while the peers still hold good copies. Pages more than CACHE_BEHIND behind the writer, which sync()
        dropped from the page cache, are read from the disk and dropped again after: a pass does not fill
        memory with the log."""
        start = max(start, self._begin)
        last = min(last, self._end)
        if start > last:
            return start, 0
        pos = self._unit(start)[1]
        try:
            _runs, n = hotpath.checked_runs(self.data, pos, start, last, self._prev_chain(start), last - start + 1,
                                            max_bytes, True, self._max_body)
        except CorruptEntryError as e:
            raise CorruptEntryError(f"{self.dir}: {e}", index=e.index) from None
        del _runs  # views into the segments: gone before anything may unmap them
        end = self.end_pos(start + n - 1)
        self.data.drop_cold(pos, end)
        return start + n, end - pos

    def read_raw_parts(self, start: int, max_count: int, max_bytes: int,
                       control: bool = True) -> tuple[list[bytes | memoryview], int]:
        if start < self._begin:
            raise IndexOutOfRangeError(f"index {start} is below the log's first index {self._begin}")
        parts: list[bytes | memoryview] = []
        count = used = 0
        index = start
        # Recently encoded batches first; the disk (with every entry checked) for the rest.
        while count < max_count and (used < max_bytes or not count) and index <= self._end:
            hit = self._recent.slice(index, max_count - count, max_bytes - used)
            if hit is None:
                break
            parts.append(hit[0] if control else drop_control(hit[0]))
            count += hit[1]
            used += len(hit[0])
            index += hit[1]
        if count < max_count and (used < max_bytes or not count) and index <= self._end:
            pos = self._unit(index)[1]
            try:
                runs, n = hotpath.checked_runs(self.data, pos, index, self._end, self._prev_chain(index),
                                               max_count - count, max_bytes - used, control, self._max_body)
            except CorruptEntryError as e:
                raise CorruptEntryError(f"{self.dir}: {e}", index=e.index) from None
            parts += runs
            count += n
        return [p for p in parts if p], count
