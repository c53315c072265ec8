"""The LogStore contract, shared by the file and memory stores, and the layout rules both follow."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, Protocol

from ..entry import (
    BLANK_SIZE,
    BODY_CRC_AT,
    CHAIN_SPAN,
    HEADER,
    HEADER_META_SIZE,
    HEADER_SIZE,
    INDEX_UNIT,
    INDEX_UNIT_SIZE,
    MAGIC_NORMAL,
    META_SIZE,
    VALID_MAGICS,
    Entry,
    check_entry,
)
from ..errors import CorruptEntryError, InvalidArgumentError, StoreError

if TYPE_CHECKING:
    from ..config import StoreConfig


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
    """Entries this store lost although it may have acknowledged them: found corrupt or missing at
    recovery at or below the checkpoint's committed index or durable end, or by a read (mark_damaged).

    `committed_index` is the highest index the node must re-fetch before it votes or leads again (the
    higher of the committed index and the durable end it had); `first_bad_index` the first one lost.
    """

    first_bad_index: int
    committed_index: int
    reason: str


class LogStore(Protocol):
    """A replica's log of one group. Indexes are dense from `begin_index` to `end_index`.

    An empty log has end_index == begin_index - 1 (a fresh one: begin 0, end -1) and end_term ==
    begin_term (0 for a fresh one). Every method that changes the log raises DiskError once a write or
    sync has failed: the store is then failed-stop and must be reopened (recovery decides what survived).
    """

    config: StoreConfig  # the settings it was opened with
    # The first entry a recovery cut as a torn tail without knowing it was never acknowledged (None:
    # nothing so cut): a bad entry past the checkpoint's durable end in a store without a valid durable
    # mark (durable_mark.py), which may as well be rot in an entry flushed, and acknowledged, since.
    # Remembered across restarts until `clear_tail_cut`. (Damage, which recovery does know of: `damage`.)
    tail_cut: int | None

    @property
    def begin_index(self) -> int:
        """Index of the first entry held (end_index + 1 when empty)."""
        ...

    @property
    def begin_term(self) -> int:
        """Term of the entry at begin_index - 1 (0 for a log that starts at index 0); term_at answers it."""
        ...

    @property
    def begin_pos(self) -> int:
        """Byte position where the entry at begin_index starts (or would start)."""
        ...

    @property
    def begin_chain(self) -> int:
        """Chain CRC of the entry at begin_index - 1 (0 for a log that starts at index 0)."""
        ...

    @property
    def end_index(self) -> int:
        """Index of the last entry written (not necessarily durable); -1 for a fresh log."""
        ...

    @property
    def end_term(self) -> int:
        """Term of the last entry; begin_term when the log is empty."""
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
        """Entries lost at recovery or by mark_damaged, until the end is back at damage.committed_index
        (append_encoded then clears it and restores the committed index); else None."""
        ...

    @property
    def identity(self) -> str | None:
        """The recorded group identity; None for a pristine store (nothing ever written: no identity,
        term, vote or entries); "" for a store that holds a term, vote or entries but no identity (written
        before identities existed), so that the caller can record one."""
        ...

    def set_identity(self, identity: str) -> None:
        """Record the group identity, durably before returning. The identity is opaque: a non-empty
        string without newline, '=' or NUL (else InvalidArgumentError)."""
        ...

    def producer_snapshot(self) -> bytes | None:
        """The producer table last saved beside the log (core/producer_snapshot.py), as saved; None if none."""
        ...

    def save_producer_snapshot(self, blob: bytes) -> None:
        """Keep `blob` as the producer snapshot, durably before returning (replacing the last one whole)."""
        ...

    def append(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL,
               metas: Mapping[int, bytes] | None = None) -> Appended:
        """Leader append: encode `bodies` as entries end_index+1.. of `term`, write them. `metas` maps an
        offset in `bodies` to that entry's metadata run (META_SIZE bytes, entry.pack_meta).

        A CONFIG append (magic MAGIC_CONFIG) holds exactly one body and no metadata; it is added to
        `configs` (FileStore: durably, before the entry is written).

        Raises InvalidArgumentError (nothing written) for a body over the maximum (metadata aside), bad
        metadata, a CONFIG append of other than one body, or a term below end_term, DiskFullError past
        disk_full_ratio. Durable only after flush() (flush "sync").
        """
        ...

    def append_encoded(self, data: bytes | bytearray | memoryview) -> int:
        """Follower append of concatenated encoded entries, written as they are; returns end_index.

        Checks each entry's CRCs, its chain to the previous entry, that indexes continue
        end_index+1.., that terms never decrease and that `pos` is where this store would put it.
        Raises CorruptEntryError (nothing written) when any check fails. Every CONFIG entry of the run is
        added to `configs`, with its body as pushed.
        """
        ...

    def append_encoded_metas(self, data: bytes | bytearray | memoryview) -> tuple[int, list[tuple[int, bytes]]]:
        """append_encoded, also returning (index, metadata run) of each appended entry that carries
        producer metadata, in index order."""
        ...

    def get(self, index: int) -> Entry:
        """The entry at `index`, CRC-checked. IndexOutOfRangeError outside [begin, end].

        Every read raises CorruptEntryError with `index` set to the stored entry that failed its checks."""
        ...

    def read(self, start: int, max_count: int, max_bytes: int, include_control: bool = True) -> list[Entry]:
        """Entries from `start`, at most max_count and about max_bytes of bodies (at least one entry
        when start is in range). Control entries (NOOP, CONFIG) are skipped unless include_control.
        IndexOutOfRangeError below begin_index; nothing past end_index."""
        ...

    def read_raw(self, start: int, max_count: int, max_bytes: int) -> tuple[bytes | memoryview, int]:
        """Encoded entries from `start` (no blanks) as one bytes-like, and how many there are. A view
        is of memory the store never writes again.
        IndexOutOfRangeError below begin_index (expired entries are never served); nothing past end."""
        ...

    def read_raw_parts(self, start: int, max_count: int, max_bytes: int,
                       control: bool = True) -> tuple[list[bytes | memoryview], int]:
        """read_raw's entries in parts that read_raw would join (no copy: views into the store may be
        among them, valid until the store next changes), control entries left out unless `control`;
        the count is of the indexes read, control entries included."""
        ...

    def end_pos(self, index: int) -> int:
        """The byte position just past the entry at `index` (begin_pos for begin_index - 1): a
        primary/backup offset. IndexOutOfRangeError outside [begin - 1, end]."""
        ...

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`; begin_term for begin_index - 1. IndexOutOfRangeError otherwise
        outside [begin, end]. Never a term the data does not hold (CorruptEntryError instead)."""
        ...

    def set_committed(self, index: int) -> None:
        """Raise the committed index (ignored when not higher); clamped to end_index."""
        ...

    def truncate_after(self, index: int) -> None:
        """Drop every entry after `index`. Refuses (StoreError) to drop committed entries."""
        ...

    def discard_after(self, index: int) -> None:
        """Drop every entry after `index`, committed ones too (the committed index drops with them). For a
        primary/backup replica whose tail its new primary does not hold: entries an ASYNC primary
        acknowledged, or ones no SYNC producer was told of (docs/replication.md)."""
        ...

    def reset(self, begin_index: int, begin_pos: int, begin_chain: int, begin_term: int) -> None:
        """Discard every entry and start the log, empty, at begin_index (there are no snapshots: the log
        is the state). The next entry goes at byte begin_pos and chains to begin_chain, so a leader's
        entries begin_index.. verify and land byte for byte as the leader holds them. After it:
        end_index == committed_index == durable_index == begin_index - 1, end_term == begin_term, and
        no damage. Durable before returning. Refuses (StoreError) when committed_index >= begin_index, or
        when the arguments cannot start a log (negative, a chain over 32 bits, no room for an entry at
        begin_pos in its segment)."""
        ...

    @property
    def configs(self) -> tuple[tuple[int, int, bytes], ...]:
        """The log's CONFIG entries as (index, term, body), oldest first. The first may lie below begin_index:
        the configuration in force at the log's begin, kept when its entry expired or was reset away.
        Empty when the log never held one.

        Every cut (truncate_after, discard_after, mark_damaged, a torn tail or damage cut at recovery)
        drops the entries past the new end; expire keeps, of those that fall below the new begin, only the
        last; reset drops those at or past its begin and keeps the last below it. Read from what the store
        keeps beside the log (FileStore: the `configs` file, checked against the log at open), never by
        scanning the log."""
        ...

    def set_base_config(self, index: int, term: int, body: bytes) -> None:
        """Record the configuration in force below begin_index (after a reset: the leader's, sent with the
        reset): replaces any kept entry below begin_index; index must be < begin_index (and index, term
        >= 0: else InvalidArgumentError). Durable on return."""
        ...

    def clear_base_config(self) -> None:
        """Record that no CONFIG entry is in force below begin_index (after a reset from a leader that
        holds none there: the configured members are): drops any kept entry below begin_index, which may be
        one of this log's own that the leader's log never held. Durable on return."""
        ...

    def clear_damage(self) -> None:
        """The node holds again everything it owed (it committed up to the end of a leader elected
        without it, which holds every committed entry): forget the damage, durably. Entries it owed past
        that leader's log were never committed and are gone for good, so `end_index` may stay below
        `damage.committed_index`."""
        ...

    def clear_tail_cut(self) -> None:
        """The node holds again what it may have acknowledged before its recovery cut the tail: forget
        `tail_cut`, durably."""
        ...

    def mark_damaged(self, index: int, reason: str) -> None:
        """A read found the stored entry `index` corrupt while running: cut the log to end before it
        (the one cut allowed below the committed index; to begin_index - 1 when index <= begin_index, and
        further down past entries that do not read back either), record and persist Damage(first cut
        index, the higher of the old committed and old end index, reason). The store stays writable so
        that append_encoded can re-fetch the range. IndexOutOfRangeError when index > end_index."""
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
        """Take (term, voted for): durable before returning, or with `defer_stable` once `persist_stable`
        returns (`stable_unsaved` until then; core/driver.py holds every message meanwhile). voted_for is a
        member id, None, or "*" (abstained: this term's vote counts as cast); InvalidArgumentError for a
        string no state file can hold (empty, several lines, '=' or NUL)."""
        ...

    @property
    def stable_unsaved(self) -> bool:
        """The term, vote or recovery flag changed and is not durable yet (only with defer_stable)."""
        ...

    def persist_stable(self) -> None:
        """Make the term, vote and recovery flag durable (any thread; a no-op when they are already).
        DiskFullError or OutOfFilesError leave the old state on disk: the call may be made again."""
        ...

    @property
    def recovering(self) -> bool:
        """The persisted protocol-aware-recovery flag (see set_recovering)."""
        ...

    def set_recovering(self, recovering: bool) -> None:
        """Take, durable as save_vote's and beside the term and vote, whether the node is in
        protocol-aware recovery: it lost committed entries and may neither vote nor lead until the
        node decides it holds them again (`damage` alone clears as soon as the end index is back)."""
        ...

    def expire(self, safe_index: int, now_s: float) -> int:
        """Drop whole old data segments (by position; never the one being written) whose entries are all
        <= min(safe_index, committed, durable), safe_index being an index every peer holds; begin_index,
        begin_pos, begin_chain and begin_term move to the first entry kept. A segment goes when last
        written file_reserved_hours or more before now_s (FileStore: its file's mtime; MemoryStore: its
        clock), or, in a FileStore, while disk use is at or past disk_clean_ratio. The new begin is
        persisted before anything goes. Returns how many entries were dropped."""
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


def check_reset(begin_index: int, begin_pos: int, begin_chain: int, begin_term: int, committed_index: int,
                segment_bytes: int) -> None:
    """The checks of LogStore.reset, shared by both stores. begin_pos must be where an entry can start:
    an empty one and a blank record after it fit in the rest of its segment."""
    if begin_index < 0 or begin_pos < 0 or begin_term < 0 or not 0 <= begin_chain < 1 << 32 \
            or place(begin_pos, HEADER_SIZE, segment_bytes) != begin_pos:
        raise StoreError(f"refusing to reset the log: begin index {begin_index}, pos {begin_pos}, "
                         f"chain {begin_chain}, term {begin_term} cannot start a log")
    if committed_index >= begin_index:
        raise StoreError(f"refusing to reset the log to begin at {begin_index}: entries up to "
                         f"{committed_index} are committed")


def expiry_point(starts: Sequence[int], first_index: Callable[[int], int | None], age_s: Callable[[int], float],
                 limit: int, max_age_s: float, forced: bool) -> tuple[int, int] | None:
    """The rule of LogStore.expire over the data segments starting at `starts` (in order): the new
    (begin_index, begin_pos), or None when nothing expires. A segment goes with every one before it when
    a later segment exists (never the one being written), the next segment's first entry is <= limit, and
    it is old (age_s(start) >= max_age_s) or `forced`. The new first entry itself must be within the limit
    (committed), not only the one before it: the log's begin position is where that entry lies, and an
    uncommitted entry may yet be truncated and replaced by the leader's, placed elsewhere."""
    point = None
    for start, nxt in zip(starts, starts[1:], strict=False):
        first_next = first_index(nxt)
        if first_next is None or first_next > limit or (not forced and age_s(start) < max_age_s):
            break
        point = (first_next, nxt)
    return point


def check_bodies(bodies: Sequence[bytes], max_body: int) -> None:
    if bodies and max(map(len, bodies)) > max_body:
        size = max(map(len, bodies))
        raise InvalidArgumentError(f"entry body of {size} bytes exceeds the maximum of {max_body}")


Run = list[tuple[int, int, int, int, int, int]]  # (offset, pos, size, index, term, magic) of each entry


def verify_run(data: bytes | bytearray | memoryview, first_index: int, write_pos: int, prev_chain: int | None,
               end_term: int, segment_bytes: int, max_body: int) -> tuple[Run, list[tuple[int, bytes]]]:
    """Check pushed entries against the log they extend; return (offset, pos, size, index, term, magic)
    for each, and (index, metadata run) of those that carry metadata. Raises CorruptEntryError naming
    the entry and what is wrong.

    This is a follower's per-entry cost, so check_entry's checks and place() are inlined; on any
    failure the entry is checked again the slow way, for the message."""
    out: Run = []
    add = out.append
    metas: list[tuple[int, bytes]] = []
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
        magic, size, eindex, term, pos, channel, echain, body_crc, body_size = unpack(data, off)
        plain = channel == 0
        if magic not in VALID_MAGICS or not 0 <= body_size <= max_body \
                or (not plain and channel != META_SIZE) or size != HEADER_SIZE + channel + body_size \
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
        if not plain:
            metas.append((index, bytes(mv[off + HEADER_SIZE:off + HEADER_META_SIZE])))
        chain = echain
        term_floor = term
        write_pos = pos + size
        off += size
        index += 1
    return out, metas


def index_units(data: bytes | bytearray | memoryview, count: int) -> bytearray:
    """The index units (magic, pos, size, index, term) of the first `count` entries of `data`, read from
    their headers: entries verify_run passed. ValueError where the bytes hold fewer."""
    if count < 0:
        raise ValueError(f"negative count {count}")
    units = bytearray(INDEX_UNIT_SIZE * count)
    off = 0
    for i in range(count):
        if len(data) - off < HEADER_SIZE:
            raise ValueError(f"entry {i} of {count} is past the data's {len(data)} bytes")
        magic, size, index, term, pos = _unpack_header(data, off)[:5]
        if size < HEADER_SIZE:
            raise ValueError(f"entry {i} of {count} has size {size}, below the header's")
        INDEX_UNIT.pack_into(units, i * INDEX_UNIT_SIZE, magic, pos, size, index, term)
        off += size
    return units


def _fail_run(data: bytes | bytearray | memoryview, off: int, index: int, chain: int | None, max_body: int,
              fallback: str) -> NoReturn:
    try:
        check_entry(data, off, chain, max_body)
    except CorruptEntryError as e:
        raise CorruptEntryError(f"pushed entry {index} (byte {off}): {e}") from None
    raise CorruptEntryError(f"pushed entry {index} (byte {off}): {fallback}")
