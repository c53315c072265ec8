"""The LogStore contract, shared by the file and memory stores, and the layout rules both follow."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol

from ..entry import (
    BLANK_SIZE,
    BODY_CRC_AT,
    CHAIN_SPAN,
    HEADER,
    HEADER_SIZE,
    MAGIC_NORMAL,
    VALID_MAGICS,
    Entry,
    check_entry,
)
from ..errors import CorruptEntryError, InvalidArgumentError


@dataclass(frozen=True, slots=True)
class Appended:
    """Where a leader append put its entries: indexes first_index.., positions in `positions`."""

    first_index: int
    term: int
    positions: list[int]

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.positions) - 1


@dataclass(frozen=True, slots=True)
class Damage:
    """Committed entries this store lost (found corrupt or missing at recovery and cut away).

    The node must not vote or lead until it has re-fetched up to `committed_index` from a leader.
    """

    first_bad_index: int
    committed_index: int
    reason: str


class LogStore(Protocol):
    """A replica's log of one group. Indexes are dense from `begin_index` to `end_index`.

    An empty log has end_index == begin_index - 1 (a fresh one: begin 0, end -1) and end_term 0.
    Every method that changes the log raises DiskError once a write or sync has failed: the store
    is then failed-stop and must be reopened (recovery decides what survived).
    """

    @property
    def begin_index(self) -> int:
        """Index of the first entry held (end_index + 1 when empty)."""
        ...

    @property
    def end_index(self) -> int:
        """Index of the last entry written (not necessarily durable); -1 for a fresh log."""
        ...

    @property
    def end_term(self) -> int:
        """Term of the last entry, 0 when the log is empty."""
        ...

    @property
    def committed_index(self) -> int:
        """Highest index known committed; never above end_index, never decreases while open."""
        ...

    @property
    def durable_index(self) -> int:
        """Highest index that survives a crash: the last flushed index with flush "sync";
        end_index with flush "async" (DLedger's trade: acknowledged from the page cache)."""
        ...

    @property
    def write_pos(self) -> int:
        """Byte position the next entry would start at (before any segment roll)."""
        ...

    @property
    def damage(self) -> Damage | None:
        """Committed entries lost at recovery, until they are written again; else None."""
        ...

    def append(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL) -> Appended:
        """Leader append: encode `bodies` as entries end_index+1.. of `term`, write them.

        Raises InvalidArgumentError for a body over the maximum or a term below end_term,
        DiskFullError past disk_full_ratio. Durable only after flush() (flush "sync").
        """
        ...

    def append_encoded(self, data: bytes | bytearray | memoryview) -> int:
        """Follower append of concatenated encoded entries, written as they are; returns end_index.

        Checks each entry's CRCs, its chain to the previous entry, that indexes continue
        end_index+1.., that terms never decrease and that `pos` is where this store would put it.
        Raises CorruptEntryError (nothing written) when any check fails.
        """
        ...

    def get(self, index: int) -> Entry:
        """The entry at `index`, CRC-checked. IndexOutOfRangeError outside [begin, end]."""
        ...

    def read(self, start: int, max_count: int, max_bytes: int, include_control: bool = True) -> list[Entry]:
        """Entries from `start`, at most max_count and about max_bytes of bodies (at least one entry
        when start is in range). Control entries (NOOP, CONFIG) are skipped unless include_control."""
        ...

    def read_raw(self, start: int, max_count: int, max_bytes: int) -> tuple[bytes, int]:
        """Encoded entries from `start` (no blanks) as one bytes-like, and how many there are."""
        ...

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`; 0 for index begin_index-1 when that is -1 (before any entry)."""
        ...

    def set_committed(self, index: int) -> None:
        """Raise the committed index (ignored when not higher); clamped to end_index."""
        ...

    def truncate_after(self, index: int) -> None:
        """Drop every entry after `index`. Refuses (StoreError) to drop committed entries."""
        ...

    def flush(self) -> int:
        """fdatasync data and index written so far; return the new durable index."""
        ...

    def checkpoint(self) -> None:
        """Persist end and committed index (atomically), so recovery starts near the end."""
        ...

    def load_vote(self) -> tuple[int, str | None]:
        """The persisted (current term, voted for)."""
        ...

    def save_vote(self, term: int, voted_for: str | None) -> None:
        """Persist (term, voted for) durably before returning."""
        ...

    @property
    def recovering(self) -> bool:
        """The persisted protocol-aware-recovery flag (see set_recovering)."""
        ...

    def set_recovering(self, recovering: bool) -> None:
        """Persist, durably before returning and beside the term and vote, whether the node is in
        protocol-aware recovery: it lost committed entries and may neither vote nor lead until the
        node decides it holds them again (`damage` alone clears as soon as the end index is back)."""
        ...

    def expire(self, safe_index: int, now_s: float) -> int:
        """Drop whole old segments whose entries are all <= safe_index (an index every peer holds)
        and committed; return how many entries were dropped."""
        ...

    def close(self) -> None:
        """Flush, checkpoint and release files. Idempotent."""
        ...


_unpack_header = HEADER.unpack_from


def place(write_pos: int, size: int, segment_bytes: int) -> int:
    """Where an entry of `size` bytes starts: at write_pos, or at the next segment when the entry
    plus a blank record would not fit (the rest of the segment then holds a blank record)."""
    seg_end = (write_pos // segment_bytes + 1) * segment_bytes
    return seg_end if write_pos + size + BLANK_SIZE > seg_end else write_pos


def check_bodies(bodies: Sequence[bytes], max_body: int) -> None:
    if bodies and max(map(len, bodies)) > max_body:
        size = max(map(len, bodies))
        raise InvalidArgumentError(f"entry body of {size} bytes exceeds the maximum of {max_body}")


def verify_run(data: bytes | bytearray | memoryview, first_index: int, write_pos: int, prev_chain: int | None,
               end_term: int, segment_bytes: int, max_body: int) -> list[tuple[int, int, int, int, int, int]]:
    """Check pushed entries against the log they extend; return (offset, pos, size, index, term, magic)
    for each. Raises CorruptEntryError naming the entry and what is wrong.

    This is a follower's per-entry cost, so check_entry's checks and place() are inlined; on any
    failure the entry is checked again the slow way, for the message."""
    out: list[tuple[int, int, int, int, int, int]] = []
    add = out.append
    mv = memoryview(data)
    n = len(data)
    off = 0
    index = first_index
    term_floor = end_term
    chain = prev_chain
    seg_end = write_pos - write_pos % segment_bytes + segment_bytes
    unpack = _unpack_header
    crc32 = zlib.crc32
    while off < n:
        if n - off < HEADER_SIZE:
            _fail_run(data, off, index, chain, max_body, "truncated header")
        magic, size, eindex, term, pos, _c, echain, body_crc, body_size = unpack(data, off)
        if magic not in VALID_MAGICS or not 0 <= body_size <= max_body or size != HEADER_SIZE + body_size \
                or off + size > n or (chain is not None
                     and crc32(mv[off + BODY_CRC_AT:off + HEADER_SIZE - 4], crc32(mv[off:off + CHAIN_SPAN], chain))
                     != echain) \
                or crc32(mv[off + HEADER_SIZE:off + size]) != body_crc:
            _fail_run(data, off, index, chain, max_body, "bad entry")
        if eindex != index:
            raise CorruptEntryError(f"pushed entry at byte {off} has index {eindex}, expected {index}")
        if term < term_floor:
            raise CorruptEntryError(f"pushed entry {index} has term {term} below the previous {term_floor}")
        if write_pos + size + BLANK_SIZE > seg_end:  # place(): the entry starts the next segment
            write_pos = seg_end
            seg_end += segment_bytes
        if pos != write_pos:
            raise CorruptEntryError(f"pushed entry {index} has pos {pos}, this log would put it at {write_pos}")
        add((off, pos, size, index, term, magic))
        chain = echain
        term_floor = term
        write_pos = pos + size
        off += size
        index += 1
    return out


def _fail_run(data: bytes | bytearray | memoryview, off: int, index: int, chain: int | None, max_body: int,
              fallback: str) -> NoReturn:
    try:
        check_entry(data, off, chain, max_body)
    except CorruptEntryError as e:
        raise CorruptEntryError(f"pushed entry {index} (byte {off}): {e}") from None
    raise CorruptEntryError(f"pushed entry {index} (byte {off}): {fallback}")


def entry_from(buf: bytes | bytearray | memoryview, off: int, size: int, h: tuple) -> Entry:
    """Build an Entry from a checked header tuple and its bytes."""
    return Entry(h[2], h[3], h[4], bytes(buf[off + HEADER_SIZE:off + size]), h[0])
