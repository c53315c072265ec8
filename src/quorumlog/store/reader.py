"""The read path: checked entries from the data segments, and the recent batches a leader encoded."""

from __future__ import annotations

import zlib
from bisect import bisect_left
from collections import deque

from ..entry import (
    BODY_CRC_AT,
    CHAIN_SPAN,
    HEADER,
    HEADER_SIZE,
    MAGIC_BLANK,
    MAGIC_NORMAL,
    META_SIZE,
    VALID_MAGICS,
)
from ..errors import CorruptEntryError
from .segments import SegmentList

_unpack_header = HEADER.unpack_from


def read_checked(data: SegmentList, pos: int, start: int, end: int, chain: int | None, max_count: int,
                 max_bytes: int, control: bool, bodies: bool,
                 max_body: int) -> list[tuple[memoryview, int, tuple[int, ...]]]:
    """Entries start..end from `pos` (where entry `start` lies; `chain` is its predecessor's chain CRC,
    None when unknown), each checked: (segment view, offset in it, header). max_count counts the entries
    returned (control entries are skipped unless `control`); max_bytes counts whole entries, or only
    bodies when `bodies`; at least one entry is returned."""
    out: list[tuple[memoryview, int, tuple[int, ...]]] = []
    index = start
    used = 0
    seg = data.find(pos)
    seg_bytes = data.size
    unpack = _unpack_header
    crc32 = zlib.crc32
    add = out.append
    # The checks of entry.check_entry, inlined: this loop is the read path's per-entry cost.
    while index <= end and len(out) < max_count and (used < max_bytes or not out):
        if seg is None:
            raise CorruptEntryError(f"entry {index} at pos {pos} is outside the data segments", index=index)
        view = seg.view
        rel = pos - seg.start
        if rel + HEADER_SIZE > seg_bytes:
            magic = int.from_bytes(view[rel:rel + 4], "big", signed=True)
            h = (magic, 0, 0, 0, 0, 0, 0, 0, 0)
        else:
            h = unpack(view, rel)
            magic = h[0]
        if magic == MAGIC_BLANK:
            pos = seg.start + seg_bytes
            seg = data.find(pos)
            continue
        size = h[1]
        problem = None
        if magic not in VALID_MAGICS or not 0 <= h[8] <= max_body \
                or h[5] not in (0, META_SIZE) or size != HEADER_SIZE + h[5] + h[8] or rel + size > seg_bytes:
            problem = f"bad header (magic {magic}, size {size}, body_size {h[8]})"
        elif h[2] != index or h[4] != pos:
            problem = f"header says index {h[2]} pos {h[4]}"
        elif chain is not None and crc32(view[rel + BODY_CRC_AT:rel + HEADER_SIZE - 4],
                                         crc32(view[rel:rel + CHAIN_SPAN], chain)) != h[6]:
            problem = "chain CRC mismatch"
        elif crc32(view[rel + HEADER_SIZE:rel + size]) != h[7]:
            problem = "body CRC mismatch"
        if problem is not None:
            raise CorruptEntryError(f"entry {index} at pos {pos}: {problem}", index=index)
        if control or magic == MAGIC_NORMAL:
            add((view, rel, h))
        chain = h[6]
        used += h[8] if bodies else size
        pos += size
        index += 1
    return out


class RecentBatches:
    """The last batches this store encoded as leader, so that pushing them to followers needs no read
    back (and no second CRC check of bytes this process has just computed)."""

    def __init__(self, keep: int) -> None:
        self._runs: deque[tuple[int, int, bytearray, list[int]]] = deque(maxlen=keep)

    def add(self, first: int, last: int, data: bytearray, positions: list[int]) -> None:
        self._runs.append((first, last, data, positions))

    def clear(self) -> None:
        self._runs.clear()

    def drop_before(self, index: int) -> None:
        """Forget batches wholly below `index` (expired entries must never be served)."""
        while self._runs and self._runs[0][1] < index:
            self._runs.popleft()

    def slice(self, index: int, max_count: int, max_bytes: int) -> tuple[bytes, int] | None:
        """Encoded entries from `index` within one remembered batch, cut as read_raw cuts (whole
        entries while the bytes before them stay under max_bytes, at least one); None if not held."""
        for first, last, data, positions in reversed(self._runs):
            if first <= index <= last:
                i = index - first
                j = min(last - first + 1, i + max_count)
                base = positions[0]
                k = max(i + 1, bisect_left(positions, positions[i] + max_bytes, i, j))
                stop = positions[k] - base if k < len(positions) else len(data)
                return bytes(data[positions[i] - base:stop]), k - i
        return None
