"""The read path: checked entries from the data segments, and the recent batches a leader encoded."""

from __future__ import annotations

import struct
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
_magic_size = struct.Struct(">ii").unpack_from


def _problem(view: memoryview, rel: int, h: tuple[int, ...], index: int, pos: int, chain: int | None,
             seg_bytes: int, max_body: int) -> str:
    """What is wrong with the entry at `rel` of `view` (header `h`), expected as entry `index` at `pos`
    after `chain`; "" when nothing is."""
    magic, size = h[0], h[1]
    if magic not in VALID_MAGICS or not 0 <= h[8] <= max_body \
            or h[5] not in (0, META_SIZE) or size != HEADER_SIZE + h[5] + h[8] or rel + size > seg_bytes:
        return f"bad header (magic {magic}, size {size}, body_size {h[8]})"
    if h[2] != index or h[4] != pos:
        return f"header says index {h[2]} pos {h[4]}"
    if chain is not None and zlib.crc32(view[rel + BODY_CRC_AT:rel + HEADER_SIZE - 4],
                                        zlib.crc32(view[rel:rel + CHAIN_SPAN], chain)) != h[6]:
        return "chain CRC mismatch"
    if zlib.crc32(view[rel + HEADER_SIZE:rel + size]) != h[7]:
        return "body CRC mismatch"
    return ""


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
        if magic not in VALID_MAGICS or not 0 <= h[8] <= max_body \
                or h[5] not in (0, META_SIZE) or size != HEADER_SIZE + h[5] + h[8] or rel + size > seg_bytes \
                or h[2] != index or h[4] != pos \
                or chain is not None and crc32(view[rel + BODY_CRC_AT:rel + HEADER_SIZE - 4],
                                               crc32(view[rel:rel + CHAIN_SPAN], chain)) != h[6] \
                or crc32(view[rel + HEADER_SIZE:rel + size]) != h[7]:
            problem = _problem(view, rel, h, index, pos, chain, seg_bytes, max_body)
            raise CorruptEntryError(f"entry {index} at pos {pos}: {problem}", index=index)
        if control or magic == MAGIC_NORMAL:
            add((view, rel, h))
        chain = h[6]
        used += h[8] if bodies else size
        pos += size
        index += 1
    return out


def checked_runs(data: SegmentList, pos: int, start: int, end: int, chain: int | None, max_count: int,
                 max_bytes: int, control: bool, max_body: int) -> tuple[list[memoryview], int]:
    """Entries start..end from `pos`, checked as read_checked checks them, as runs of consecutive
    entries (views into the segments: use them before the store changes) and how many indexes were
    walked. max_count and max_bytes count every entry walked (whole entries), at least one; control
    entries are left out of the runs unless `control`.

    The raw read path (READ answers, pushes): the same checks as read_checked with the constants
    and the current segment kept in locals, and no tuple per entry."""
    runs: list[memoryview] = []
    index = start
    last = min(end, start + max_count - 1)
    if last < start:
        return runs, 0
    used = 0
    seg = data.find(pos)
    if seg is None:
        raise CorruptEntryError(f"entry {index} at pos {pos} is outside the data segments", index=index)
    view, base = seg.view, seg.start
    rel = pos - base
    run_start = run_end = -1  # the open run: view[run_start:run_end]
    seg_bytes = data.size
    unpack = _unpack_header
    crc32 = zlib.crc32
    add = runs.append
    header_size, chain_span, body_crc_at = HEADER_SIZE, CHAIN_SPAN, BODY_CRC_AT
    valid, normal, blank, meta_size = VALID_MAGICS, MAGIC_NORMAL, MAGIC_BLANK, META_SIZE
    while index <= last and (used < max_bytes or index == start):
        if rel + header_size > seg_bytes:
            h: tuple[int, ...] = (int.from_bytes(view[rel:rel + 4], "big", signed=True), 0, 0, 0, 0, 0, 0, 0, 0)
        else:
            h = unpack(view, rel)
        if h[0] == blank:  # the rest of the segment is unused: the next entry starts the next one
            if run_end >= 0:
                add(view[run_start:run_end])
                run_start = run_end = -1
            seg = data.find(base + seg_bytes)
            if seg is None:
                raise CorruptEntryError(f"entry {index} at pos {base + seg_bytes} is outside the data segments",
                                        index=index)
            view, base, rel = seg.view, seg.start, 0
            continue
        magic, size, h_index, _term, h_pos, channel, h_chain, body_crc, body_size = h
        end_rel = rel + size
        if magic not in valid or not 0 <= body_size <= max_body or (channel != 0 and channel != meta_size) \
                or size != header_size + channel + body_size or end_rel > seg_bytes \
                or h_index != index or h_pos != base + rel \
                or chain is not None and crc32(view[rel + body_crc_at:rel + header_size - 4],
                                               crc32(view[rel:rel + chain_span], chain)) != h_chain \
                or crc32(view[rel + header_size:end_rel]) != body_crc:
            problem = _problem(view, rel, h, index, base + rel, chain, seg_bytes, max_body)
            raise CorruptEntryError(f"entry {index} at pos {base + rel}: {problem}", index=index)
        if control or magic == normal:
            if rel != run_end:
                if run_end >= 0:
                    add(view[run_start:run_end])
                run_start = rel
            run_end = end_rel
        chain = h_chain
        used += size
        rel = end_rel
        index += 1
    if run_end >= 0:
        add(view[run_start:run_end])
    return runs, index - start


def drop_control(data: bytes | memoryview) -> bytes | memoryview:
    """Encoded entries minus NOOP/CONFIG ones (rare: one NOOP per term), without decoding bodies."""
    keep: list[memoryview] = []
    mv = memoryview(data)
    off = 0
    run = 0
    n = len(data)
    dropped = False
    while off < n:
        magic, size = _magic_size(data, off)
        if magic != MAGIC_NORMAL:
            dropped = True
            if off > run:
                keep.append(mv[run:off])
            run = off + size
        off += size
    if not dropped:
        return data
    if n > run:
        keep.append(mv[run:n])
    return b"".join(keep)


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

    def slice(self, index: int, max_count: int, max_bytes: int) -> tuple[memoryview, int] | None:
        """Encoded entries from `index` within one remembered batch, cut as read_raw cuts (whole
        entries while the bytes before them stay under max_bytes, at least one); None if not held.
        A view, not a copy: a batch's buffer is never written again once remembered."""
        for first, last, data, positions in reversed(self._runs):
            if first <= index <= last:
                i = index - first
                j = min(last - first + 1, i + max_count)
                base = positions[0]
                k = max(i + 1, bisect_left(positions, positions[i] + max_bytes, i, j))
                stop = positions[k] - base if k < len(positions) else len(data)
                return memoryview(data)[positions[i] - base:stop], k - i
        return None
