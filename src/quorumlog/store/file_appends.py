"""FileStore's appends (mixed into it), the path every entry takes: entries encoded here from bodies
(append), or pushed ones written as they came once every check passed (append_encoded), each write split
where a data segment ends (a blank record closes it) and followed by its index units. The segments a write
reaches are opened, and its CONFIG entries recorded, before any of it is written, so a failure leaves the
log's end where it was or fails the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

from .. import hotpath
from ..entry import (
    BLANK,
    BLANK_SIZE,
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    MAGIC_BLANK,
    MAGIC_CONFIG,
    MAGIC_NORMAL,
    META_SIZE,
    check_metas,
)
from ..errors import DiskFullError, InvalidArgumentError
from .base import Appended, check_bodies, place
from .configs import Config, ConfigLog, check_config_append, pushed_configs
from .reader import RecentBatches
from .segments import SegmentList
from .stable import StableFiles
from .vfs import NO_SPACE


def _shifted(metas: Mapping[int, bytes] | None, start: int, stop: int) -> dict[int, bytes] | None:
    """The metadata of bodies[start:stop], keyed by offset in that slice."""
    if not metas:
        return None
    return {i - start: m for i, m in metas.items() if start <= i < stop} or None


class FileAppends:
    """append, append_encoded and append_encoded_metas of a FileStore, and the writes they make."""

    if TYPE_CHECKING:  # FileStore's own, used here
        dir: str
        data: SegmentList
        index: SegmentList
        _seg: int
        _max_body: int
        _end: int
        _end_term: int
        _chain: int
        _write_pos: int
        _recent: RecentBatches
        _stable: StableFiles
        _configs: ConfigLog

        def _check_writable(self) -> None: ...
        def _check_space(self) -> None: ...
        def _heal(self) -> None: ...
        def _commit_configs(self, before: tuple[Config, ...]) -> None: ...
        def _transient_or_fail(self, e: OSError) -> NoReturn: ...
        def _fail(self, e: OSError) -> NoReturn: ...

    def append(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL,
               metas: Mapping[int, bytes] | None = None) -> Appended:
        self._check_writable()
        self._check_space()
        check_bodies(bodies, self._max_body)
        check_config_append(bodies, magic, metas)
        if metas:
            check_metas(metas, len(bodies))
        if term < self._end_term:
            raise InvalidArgumentError(f"term {term} is below the log's end term {self._end_term}")
        first = self._end + 1
        positions: list[int] = []
        if not bodies:
            return Appended(first, term, positions)
        self._before_entries()
        last = first + len(bodies) - 1
        configs = [(first, term, bodies[0])] if magic == MAGIC_CONFIG else None
        wp = self._write_pos
        seg_end = wp - wp % self._seg + self._seg
        total = sum(map(len, bodies)) + HEADER_SIZE * len(bodies) + (META_SIZE * len(metas) if metas else 0)
        if wp + total + BLANK_SIZE <= seg_end:
            self._reserve(wp + total - 1, last, configs)
            try:
                self._write_run(bodies, magic, first, term, wp, positions, metas)
            except OSError as e:
                self._unwritten_or_fail(e, first)
        else:  # the batch crosses a segment end: split it where place() rolls over
            rolls = []  # (offset in bodies, position of the blank that ends the segment)
            for i, body in enumerate(bodies):
                size = HEADER_SIZE + len(body) + (META_SIZE if metas and i in metas else 0)
                pos = place(wp, size, self._seg)
                if pos != wp:
                    rolls.append((i, wp))
                wp = pos + size
            self._reserve(wp - 1, last, configs)
            wp0 = self._write_pos
            try:
                start = 0
                for i, blank_at in rolls:
                    if i > start:
                        self._write_run(bodies[start:i], magic, first + start, term, self._write_pos,
                                        positions, _shifted(metas, start, i))
                        start = i
                    self._write_blank(blank_at)
                    self._write_pos = blank_at - blank_at % self._seg + self._seg
                self._write_run(bodies[start:], magic, first + start, term, self._write_pos, positions,
                                _shifted(metas, start, len(bodies)))
            except OSError as e:
                self._unwritten_or_fail(e, first, wp0)
        self._heal()
        return Appended(first, term, positions)

    def _before_entries(self) -> None:
        """`currterm` exists before the first entry does, so that entries without it mean it was lost."""
        try:
            self._stable.ensure_currterm()
        except OSError as e:
            self._transient_or_fail(e)

    def _reserve(self, last_pos: int, last_index: int, configs: list[Config] | None = None) -> None:
        """Open the data and index segments a write will reach before writing any of it: with no file
        descriptor free, the write then fails whole (nothing written, the store goes on), never midway.
        Then take the write's CONFIG entries, `configs` written (configs.py) before the entries are."""
        try:
            # From where the write starts: an empty list of segments starts at the first one ensured.
            self.data.ensure(self._write_pos)
            self.data.ensure(last_pos)
            self.index.ensure((self._end + 1) * INDEX_UNIT_SIZE)
            self.index.ensure(last_index * INDEX_UNIT_SIZE)
        except OSError as e:
            self._transient_or_fail(e)
        if configs:
            before = self._configs.entries
            self._configs.add(configs)
            self._commit_configs(before)

    def _unwritten_or_fail(self, e: OSError, first: int, write_pos: int | None = None) -> NoReturn:
        """A write of entries from `first` failed. Out of space with none of them taken (the log's end not
        moved: a batch split at a segment end takes its parts one by one) is DiskFullError: the bytes that
        did land lie past the end, where the next append writes again and recovery would cut them; the write
        position goes back to `write_pos` (past a blank written before the first part). Anything else fails
        the store. Either way the CONFIG entries the write would have added go (`configs` names them until
        its next rewrite: open drops them, see configs.py)."""
        self._configs.cut_after(first - 1)
        if e.errno in NO_SPACE and self._end == first - 1:
            if write_pos is not None:
                self._write_pos = write_pos
            raise DiskFullError(f"{self.dir}: {e.strerror}; nothing was written") from None
        self._fail(e)

    def _write_run(self, bodies: Sequence[bytes], magic: int, first: int, term: int, pos: int,
                   positions: list[int], metas: Mapping[int, bytes] | None) -> None:
        data, units, chain = hotpath.encode_run(bodies, magic, first, term, pos, self._chain, positions, metas)
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
        return self.append_encoded_metas(data)[0]

    def append_encoded_metas(self, data: bytes | bytearray | memoryview) -> tuple[int, list[tuple[int, bytes]]]:
        self._check_writable()
        self._check_space()
        run, metas = hotpath.verify_run(data, self._end + 1, self._write_pos, self._chain, self._end_term,
                                self._seg, self._max_body)
        if not run:
            return self._end, metas
        self._before_entries()
        _o, last_pos, last_size, last_index, _t, _m = run[-1]
        mv = memoryview(data)
        units = hotpath.index_units(data, len(run))
        self._reserve(last_pos + last_size - 1, last_index, pushed_configs(mv, run, units, INDEX_UNIT_SIZE))
        first_pos, first = run[0][1], run[0][3]
        try:
            wp = self._write_pos
            if first_pos == wp and last_pos + last_size - wp == len(mv):  # no segment roll: one write
                self.data.write(wp, mv)
                wp += len(mv)
            else:
                chunk_off = chunk_pos = -1
                for off, pos, size, _index, _term, _magic in run:
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
        except OSError as e:  # (nothing of the run is taken before all of it is written)
            self._unwritten_or_fail(e, self._end + 1)
        last_off, last_pos, last_size, last_index, last_term, _m = run[-1]
        self._chain = int.from_bytes(mv[last_off + 36:last_off + 40], "big")
        self._write_pos = wp
        self._end = last_index
        self._end_term = last_term
        self._heal()
        return self._end, metas
