"""Recovery's tail scan: walk the data segments from a trusted point, verifying every entry
(magic, sizes, both CRCs, chain, index and position) and the index unit that points at it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..entry import HEADER_SIZE, INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_BLANK, check_entry
from ..errors import CorruptCommittedError, CorruptEntryError
from .base import Damage
from .checkpoint import Checkpoint
from .segments import SegmentList

_ZERO_HEADER = bytes(HEADER_SIZE)


@dataclass(slots=True)
class Scan:
    """What the scan found: the log ends at next_index - 1."""

    next_index: int
    write_pos: int
    chain: int
    end_term: int
    error: str | None = None  # why the scan stopped early (a torn or corrupt entry), if it did
    dirty_tail: bool = False  # non-zero bytes may lie past write_pos in its segment
    rebuilt: int = 0  # index units rewritten from the data
    notes: list[str] = field(default_factory=list)


def _anchor_ok(data: SegmentList, index: SegmentList, cp: Checkpoint, max_body: int) -> bool:
    """Is the checkpoint's anchor entry intact, and does the index cover everything up to it?"""
    if cp.anchor_index < cp.begin_index or cp.anchor_pos < 0:
        return False
    if not index.segments or index.start > cp.begin_index * INDEX_UNIT_SIZE \
            or index.end < (cp.anchor_index + 1) * INDEX_UNIT_SIZE:
        return False
    seg = data.find(cp.anchor_pos)
    if seg is None:
        return False
    try:
        h = check_entry(seg.view, cp.anchor_pos - seg.start, None, max_body)
    except CorruptEntryError:
        return False
    if h[2] != cp.anchor_index or h[4] != cp.anchor_pos or h[6] != cp.anchor_chain:
        return False
    # The scan rebuilds only units after the anchor: a damaged anchor unit means a damaged index.
    uoff = cp.anchor_index * INDEX_UNIT_SIZE
    useg = index.find(uoff)
    unit = INDEX_UNIT.pack(h[0], cp.anchor_pos, h[1], h[2], h[3])
    return useg is not None and useg.view[uoff - useg.start:uoff - useg.start + INDEX_UNIT_SIZE] == unit


def scan(data: SegmentList, index: SegmentList, cp: Checkpoint, max_body: int) -> Scan:
    """Scan from the checkpoint's anchor (or from the log's beginning when the anchor is not
    usable), rebuilding index units that disagree with the data."""
    notes: list[str] = []
    if _anchor_ok(data, index, cp, max_body):
        seg = data.find(cp.anchor_pos)
        assert seg is not None
        rel = cp.anchor_pos - seg.start
        size = int.from_bytes(seg.view[rel + 4:rel + 8], "big")
        term = int.from_bytes(seg.view[rel + 16:rel + 24], "big")
        pos, idx, chain = cp.anchor_pos + size, cp.anchor_index + 1, cp.anchor_chain
    else:
        if cp.anchor_index >= cp.begin_index:
            notes.append("checkpoint anchor unusable or index incomplete: scanned the whole log")
        if index.segments and index.start > cp.begin_index * INDEX_UNIT_SIZE:
            index.drop_before(index.end)  # an index with a hole at its start is rebuilt whole
        pos, idx, chain, term = cp.begin_pos, cp.begin_index, cp.begin_chain, cp.begin_term
    result = Scan(idx, pos, chain, term, notes=notes)
    _walk(data, index, result, max_body)
    if result.rebuilt:
        notes.append(f"rebuilt {result.rebuilt} index units from the data files")
    return result


class WalkError(Exception):
    """The walk met bytes that are not the entry it expected at `pos`."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(message)
        self.pos = pos


def walk(data: SegmentList, pos: int, index: int, chain: int | None, term: int,
         max_body: int) -> Iterator[tuple[memoryview, int, tuple[int, ...]]]:
    """Yield (segment view, offset in it, header) for each intact entry from `pos`, which should
    hold entry `index`; skip blank records; stop at a zero header or the last segment's end.
    Raises WalkError at the first entry that fails a check (chain unchecked when chain is None)."""
    size = data.size
    while True:
        seg = data.find(pos)
        if seg is None:
            return
        view = seg.view
        rel = pos - seg.start
        magic = int.from_bytes(view[rel:rel + 4], "big", signed=True)
        if magic == MAGIC_BLANK:
            if int.from_bytes(view[rel + 4:rel + 8], "big") != size - rel:
                raise WalkError(pos, f"bad blank record at pos {pos}")
            pos = seg.start + size
            continue
        if magic == 0 and (size - rel < HEADER_SIZE or view[rel:rel + HEADER_SIZE] == _ZERO_HEADER):
            return  # clean end of the log
        try:
            h = check_entry(view, rel, chain, max_body)
        except CorruptEntryError as e:
            raise WalkError(pos, f"entry {index} at pos {pos}: {e}") from None
        if h[2] != index or h[4] != pos:
            raise WalkError(pos, f"entry at pos {pos} says index {h[2]} pos {h[4]}, expected index {index}")
        if h[3] < term:
            raise WalkError(pos, f"entry {index} has term {h[3]} below the previous entry's {term}")
        yield view, rel, h
        chain, term = h[6], h[3]
        index += 1
        pos += h[1]


def _walk(data: SegmentList, index: SegmentList, r: Scan, max_body: int) -> None:
    pack_unit = INDEX_UNIT.pack
    try:
        for _view, _rel, h in walk(data, r.write_pos, r.next_index, r.chain, r.end_term, max_body):
            unit = pack_unit(h[0], h[4], h[1], h[2], h[3])
            uoff = h[2] * INDEX_UNIT_SIZE
            useg = index.find(uoff)
            if useg is None or useg.view[uoff - useg.start:uoff - useg.start + INDEX_UNIT_SIZE] != unit:
                index.write(uoff, unit)
                r.rebuilt += 1
            r.chain, r.end_term = h[6], h[3]
            r.next_index += 1
            r.write_pos = h[4] + h[1]
    except WalkError as e:
        # The log ends after its last good entry, not at the bad one: that may lie past a blank the walk
        # skipped (a roll to the next segment), and an append must go where any replica would put it (the
        # leader's positions are checked by its followers). The blank and what follows are cleared.
        r.error, r.dirty_tail = str(e), True


def judge(directory: str, result: Scan, cp: Checkpoint, repair: bool, notes: list[str]) -> Damage | None:
    """Did the scan stop short of entries this node may have acknowledged (at or below the checkpoint's
    committed index or durable end)? Those were lost, not torn, and are never cut silently: raise
    CorruptCommittedError, or with `repair` return the Damage to record. Past the durable end a bad
    entry is a torn write, cut without a word here."""
    owed = max(cp.committed_index, cp.end_index)
    first = result.next_index
    if first > owed:
        return None
    kind = "committed" if first <= cp.committed_index else "durable"
    if result.error is not None:
        msg = (f"{directory}: {kind} entry {first} is damaged (committed index {cp.committed_index}, "
               f"durable end {cp.end_index}): {result.error}")
    else:
        msg = (f"{directory}: log ends at {first - 1} but entries up to {owed} were durable "
               f"(committed index {cp.committed_index})")
    if not repair:
        raise CorruptCommittedError(msg, first)
    notes.append(msg + "; cut there, to be re-fetched from the leader")
    return Damage(first, owed, result.error or "missing durable entries")
