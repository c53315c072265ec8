"""FileStore's removals (mixed into it): truncation, a cut at a damaged entry, a reset to another
log's begin, and expiry of whole segments. Each names the new state in the checkpoint before any file
changes, so a crash part way is recovered as the new log, never as lost entries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import StoreConfig
from ..entry import HEADER_SIZE, INDEX_UNIT_SIZE, MAGIC_BLANK
from ..errors import CorruptEntryError, IndexOutOfRangeError, StoreError
from .base import Damage, check_reset, expiry_point
from .configs import Config, ConfigLog
from .durable_mark import DurableMark
from .file_reads import FileReads
from .vfs import OsFiles


class FileCuts(FileReads):
    """truncate_after, mark_damaged, reset and expire of a FileStore."""

    config: StoreConfig
    files: OsFiles
    _disk_usage: Callable[[str], float]
    _state_lock: threading.Lock
    _epoch: int
    _end_term: int
    _chain: int
    _write_pos: int
    _flushed: int
    _committed: int
    _cp_end: int
    _cp_committed: int
    _damage: Damage | None
    _end_floor: int
    _committed_floor: int
    _mark: DurableMark
    _configs: ConfigLog

    if TYPE_CHECKING:  # FileStore's own, used here
        def _commit_configs(self, before: tuple[Config, ...]) -> None: ...
        def _sync_configs(self) -> None: ...
        def _check_writable(self) -> None: ...
        def _before_entries(self) -> None: ...
        def _checkpoint(self, flushed: int, committed: int | None = None) -> None: ...
        def checkpoint(self) -> None: ...
        def _fail(self, e: OSError) -> None: ...
        def _set_mark(self, end: int) -> None: ...

    def truncate_after(self, index: int) -> None:
        self._check_writable()
        if index >= self._end:
            return
        if index < self._committed:
            raise StoreError(f"refusing to truncate after {index}: entries up to {self._committed} are committed")
        if index < self._begin - 1:
            raise IndexOutOfRangeError(f"cannot truncate after {index}: log begins at {self._begin}")
        if index < self._cp_end:
            # Only the durable end changes: the truncated entries were never committed.
            self._checkpoint(min(self._flushed, index), self._cp_committed)
        self._cut(index)

    def discard_after(self, index: int) -> None:
        self._check_writable()
        if index >= self._end:
            return
        if index < self._begin - 1:
            raise IndexOutOfRangeError(f"cannot discard after {index}: log begins at {self._begin}")
        self._checkpoint(min(self._flushed, index), min(self._cp_committed, index))
        self._cut(index)

    def _lower_mark(self, end: int) -> None:
        """Before a removal changes any file: the durable mark names nothing past `end` (durable_mark.py)."""
        with self._state_lock:
            if self._mark.end is None or end < self._mark.end:
                self._set_mark(end)

    def _cut(self, keep: int) -> None:
        """Drop every entry after `keep`; the caller has made the checkpoint stop naming them as
        durable, so that a crash part way cannot make recovery take the cut for lost entries."""
        self._lower_mark(keep)
        if keep >= self._begin:
            _m, pos, size, _i, term = self._unit(keep)
            new_wp, chain = pos + size, self._chain_at(pos)
        else:
            new_wp, term, chain = self._begin_pos, self._begin_term, self._begin_chain
        try:
            old_wp = self._write_pos
            if self.data.find(old_wp) is self.data.find(new_wp):
                self.data.zero(new_wp, old_wp)
            else:
                self.data.zero(new_wp, new_wp - new_wp % self._seg + self._seg)
                self.data.drop_after(new_wp)
            # Index units past the end are never read (reads stop at end_index) and are
            # overwritten by the next appends, so only whole later segments go.
            self.index.drop_after(max((keep + 1) * INDEX_UNIT_SIZE, self.index.start))
        except OSError as e:
            self._fail(e)
        self._recent.clear()
        with self._state_lock:
            self._epoch += 1
            self._end = keep
            self._end_term = term
            self._chain = chain
            self._write_pos = new_wp
            self._flushed = min(self._flushed, keep)
        self._committed = min(self._committed, keep)
        self._configs.cut_after(keep)
        self._sync_configs()

    def mark_damaged(self, index: int, reason: str) -> None:
        self._check_writable()
        if index > self._end:
            raise IndexOutOfRangeError(f"cannot mark entry {index} damaged: the log ends at {self._end}")
        keep = self._last_sound(max(index, self._begin) - 1)
        # The node may have acknowledged everything up to its end: all of it is owed until re-fetched.
        self._end_floor = max(self._end, self._end_floor)
        self._committed_floor = max(self._committed, self._committed_floor)
        self._damage = Damage(keep + 1, self._end_floor, reason)
        self._checkpoint(min(self._flushed, keep))  # persists the debt
        self._cut(keep)

    def _last_sound(self, index: int) -> int:
        """The highest index <= `index` whose entry (and chain to its predecessor) reads back intact;
        begin_index - 1 if none: the cut must not leave a corrupt entry at the end."""
        while index >= self._begin:
            try:
                self.read(index, 1, 0)
                return index
            except CorruptEntryError:
                index -= 1
        return self._begin - 1

    def reset(self, begin_index: int, begin_pos: int, begin_chain: int, begin_term: int) -> None:
        self._check_writable()
        check_reset(begin_index, begin_pos, begin_chain, begin_term, self._committed, self._seg)
        self._before_entries()
        # `configs` may still name entries the log lost (a rewrite that failed): they must not become the
        # kept one below the new begin, where open checks nothing against the log.
        self._commit_configs(self._configs.entries)
        self._recent.clear()
        # The mark first: with the new begin in the checkpoint, one still naming the old log's end would
        # make a crash before the files go look like damage to the old entries there, which the new log
        # does not chain to.
        self._lower_mark(begin_index - 1)
        with self._state_lock:
            self._epoch += 1
            self._begin, self._begin_pos, self._begin_chain, self._begin_term = (
                begin_index, begin_pos, begin_chain, begin_term)
            self._end, self._end_term, self._chain = begin_index - 1, begin_term, begin_chain
            self._write_pos = begin_pos
            self._committed = self._flushed = begin_index - 1
            self._damage = None
            self._committed_floor = self._end_floor = -1
        # The checkpoint names the new, empty log before any file goes, so a crash from here on reopens
        # at begin_index. The segments go last first (no hole); bytes a crash leaves at begin_pos are
        # kept only if they chain to begin_chain (the same log), else cut as a torn tail.
        self._checkpoint(self._flushed)
        # After the checkpoint: a crash before this rewrite leaves the old list, which open cuts to the new
        # begin as this does (configs.py ConfigLog.validate).
        self._configs.reset_to(begin_index)
        self._sync_configs()
        try:
            self.data.clear()
            self.index.clear()
        except OSError as e:
            self._fail(e)

    def expire(self, safe_index: int, now_s: float) -> int:
        """Remove whole data segments (never the one being written) whose entries are all committed
        and <= safe_index, when last written file_reserved_hours before now_s or while disk use is at
        or past disk_clean_ratio. Returns how many entries were removed."""
        self._check_writable()
        paths = {seg.start: seg.path for seg in self.data.segments}
        point = expiry_point(list(paths), self._first_index_in, lambda start: now_s - self.files.mtime(paths[start]),
                             min(safe_index, self._committed, self._flushed),  # never unsynced entries
                             self.config.file_reserved_hours * 3600,
                             self._disk_usage(self.dir) >= self.config.disk_clean_ratio)
        if point is None:
            return 0
        self._commit_configs(self._configs.entries)  # as reset's: nothing stale may fall below the begin
        new_begin, new_pos = point
        removed = new_begin - self._begin  # 0 when the first segment held only a blank record
        if removed:
            _m, ppos, _s, _i, pterm = self._unit(new_begin - 1)  # read before its segment goes
            self._begin_chain, self._begin_term = self._chain_at(ppos), pterm
        self._begin, self._begin_pos = new_begin, new_pos
        self._recent.drop_before(new_begin)
        # The checkpoint names the new begin before any file goes, so a crash in between is harmless.
        self.checkpoint()
        # Then `configs` keeps, of the entries below the new begin, the last: a crash before this rewrite
        # leaves the old list, which open cuts to the begin alike (configs.py ConfigLog.validate).
        self._configs.expire_before(new_begin)
        self._sync_configs()
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
