"""Entries and their byte layout: the 48-byte entry header and the 32-byte index unit (docs/design.md §3).

The same bytes are on disk and on the wire: a leader pushes what its store holds and a follower
writes what it receives, after checking both CRCs. All integers are big-endian.

Header (48 bytes): magic i32, size i32, index i64, term i64, pos i64, channel i32,
chain_crc u32, body_crc u32, body_size i32. An entry is the header, an optional metadata run of
`channel` bytes (0, or META_SIZE: an idempotent producer's request, PRODUCER_META), then the body: the
body is always the entry's last body_size bytes, and size = 48 + channel + body_size. body_crc covers
the metadata run and the body together; the chain CRC covers `channel`, so a damaged body_size can
never move the boundary unnoticed. An entry without metadata is laid out and checked as before.

chain_crc is the CRC32 of header bytes 0..35 and then of body_crc (bytes 40..43), seeded with the previous
entry's chain_crc (0 before index 0). Covering body_crc makes an entry's chain CRC a digest of the whole
log up to it, bodies included: two replicas with the same chain CRC at an index hold the same entries.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .errors import CorruptEntryError, InvalidArgumentError

MAGIC_NORMAL = 1
MAGIC_NOOP = 2
MAGIC_CONFIG = 3
MAGIC_BLANK = -1
VALID_MAGICS = frozenset((MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG))

HEADER = struct.Struct(">iiqqqiIIi")
HEADER_SIZE = HEADER.size  # 48
_HEAD36 = struct.Struct(">iiqqqi")  # the bytes the chain CRC covers
_TAIL12 = struct.Struct(">IIi")  # chain_crc, body_crc, body_size
CHAIN_SPAN = _HEAD36.size  # 36: header bytes 0..35 ...
BODY_CRC_AT = CHAIN_SPAN + 4  # ... then body_crc, bytes 40..43, are what the chain CRC covers
INDEX_UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term
INDEX_UNIT_SIZE = INDEX_UNIT.size  # 32
BLANK = struct.Struct(">ii")  # magic -1, length of the blank run (to the segment's end)
BLANK_SIZE = BLANK.size  # 8
# Producer metadata: producer id i64 (> 0), sequence i64 (>= 0), count i32 (>= 1: the entries of the
# request this entry begins), wall_ms i64 (the leader's wall clock at append).
PRODUCER_META = struct.Struct(">qqiq")
META_SIZE = PRODUCER_META.size  # 28
HEADER_META_SIZE = HEADER_SIZE + META_SIZE  # where the body starts in an entry with metadata
_CHANNELS = (0, META_SIZE)  # the metadata run's length, kept in the header's channel field
# Set in the magic a replica digest hashes for an entry with metadata (no valid magic has it).
META_FLAG = 1 << 16
_DIGEST_KEY = struct.Struct(">qqi").pack

_crc32 = zlib.crc32
_unpack_header = HEADER.unpack_from
_pack_head = _HEAD36.pack_into
_pack_tail = _TAIL12.pack_into
_pack_chain = struct.Struct(">I").pack_into

assert HEADER_SIZE == 48 and INDEX_UNIT_SIZE == 32 and META_SIZE == 28


@dataclass(slots=True)
class Entry:
    """One log entry as readers see it. Not frozen: a frozen dataclass costs four times as much
    to build, and the read path builds one per entry."""

    index: int
    term: int
    pos: int
    body: bytes
    magic: int = MAGIC_NORMAL
    meta: bytes = b""  # the producer metadata run (pack_meta), b"" when the entry has none

    @property
    def is_control(self) -> bool:
        """NOOP and CONFIG entries hold an index but carry no client data."""
        return self.magic != MAGIC_NORMAL


@dataclass(frozen=True, slots=True)
class Header:
    """A decoded entry header."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


def pack_meta(producer: int, seq: int, count: int, wall_ms: int) -> bytes:
    """The metadata run of an entry that begins a producer's request (see PRODUCER_META)."""
    return PRODUCER_META.pack(producer, seq, count, wall_ms)


def unpack_meta(meta: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """(producer, seq, count, wall_ms) of a metadata run."""
    if len(meta) != META_SIZE:
        raise CorruptEntryError(f"producer metadata of {len(meta)} bytes, expected {META_SIZE}")
    return PRODUCER_META.unpack(meta)


def _bad_meta(meta: bytes | bytearray | memoryview) -> InvalidArgumentError:
    return InvalidArgumentError(f"entry metadata of {len(meta)} bytes, expected {META_SIZE}")


def encode_into(buf: bytearray | memoryview, off: int, magic: int, index: int, term: int, pos: int,
                body: bytes | memoryview, prev_chain: int, meta: bytes = b"") -> int:
    """Write one entry (header, metadata run, body) at buf[off:]; return its chain CRC. buf must have room."""
    n = len(body)
    start = off + HEADER_SIZE  # of the body
    if meta:
        if len(meta) != META_SIZE:
            raise _bad_meta(meta)
        buf[start:start + META_SIZE] = meta
        start += META_SIZE
        body_crc = _crc32(body, _crc32(meta))
    else:
        body_crc = _crc32(body)
    _pack_head(buf, off, magic, start - off + n, index, term, pos, len(meta))
    _pack_tail(buf, off + CHAIN_SPAN, 0, body_crc, n)
    mv = memoryview(buf)
    chain = _crc32(mv[off + BODY_CRC_AT:off + HEADER_SIZE - 4], _crc32(mv[off:off + CHAIN_SPAN], prev_chain))
    _pack_chain(buf, off + CHAIN_SPAN, chain)
    buf[start:start + n] = body
    return chain


def encode_entry(magic: int, index: int, term: int, pos: int, body: bytes, prev_chain: int,
                 meta: bytes = b"") -> tuple[bytes, int]:
    """Encode one entry; return (bytes, chain_crc)."""
    buf = bytearray(HEADER_SIZE + len(meta) + len(body))
    chain = encode_into(buf, 0, magic, index, term, pos, body, prev_chain, meta)
    return bytes(buf), chain


def encode_run(bodies: Sequence[bytes], magic: int, first_index: int, term: int, first_pos: int,
               prev_chain: int, positions: list[int],
               metas: Mapping[int, bytes] | None = None) -> tuple[bytearray, bytearray, int]:
    """Encode contiguous entries into one data buffer and one index buffer.

    Returns (data, index_units, last_chain) and appends each entry's position to `positions`.
    Each body is copied exactly once, into `data`. `metas` maps an offset in `bodies` to that
    entry's metadata run (META_SIZE bytes).
    """
    marks: list[int] = []
    if metas:
        check_metas(metas, len(bodies))
        marks = sorted(metas)
    data = bytearray(sum(map(len, bodies)) + HEADER_SIZE * len(bodies) + META_SIZE * len(marks))
    units = bytearray(INDEX_UNIT_SIZE * len(bodies))
    mv = memoryview(data)
    pack_unit = INDEX_UNIT.pack_into
    add_pos = positions.append
    off = 0
    chain = prev_chain
    index = first_index
    # Entries with metadata are few (the first of each producer's request): one int comparison per
    # entry finds them, and the plain entries keep the plain loop body.
    k = 0
    next_meta = first_index + marks[0] if marks else -1
    for body in bodies:
        pos = first_pos + off
        add_pos(pos)
        if index == next_meta:
            chain = encode_into(data, off, magic, index, term, pos, body, chain, metas[index - first_index])  # type: ignore[index]
            size = HEADER_SIZE + META_SIZE + len(body)
            k += 1
            next_meta = first_index + marks[k] if k < len(marks) else -1
        else:
            n = len(body)
            size = HEADER_SIZE + n
            _pack_head(data, off, magic, size, index, term, pos, 0)
            _pack_tail(data, off + CHAIN_SPAN, 0, _crc32(body), n)
            chain = _crc32(mv[off + BODY_CRC_AT:off + HEADER_SIZE - 4], _crc32(mv[off:off + CHAIN_SPAN], chain))
            _pack_chain(data, off + CHAIN_SPAN, chain)
            mv[off + HEADER_SIZE:off + size] = body
        pack_unit(units, (index - first_index) * INDEX_UNIT_SIZE, magic, pos, size, index, term)
        off += size
        index += 1
    return data, units, chain


def check_metas(metas: Mapping[int, bytes], count: int) -> None:
    """Refuse (InvalidArgumentError) metadata for an offset outside a run of `count` entries, or of
    the wrong length."""
    for i, meta in metas.items():
        if not 0 <= i < count:
            raise InvalidArgumentError(f"entry metadata for offset {i} of a run of {count} entries")
        if len(meta) != META_SIZE:
            raise _bad_meta(meta)


def chain_of(buf: bytes | bytearray | memoryview, off: int, prev_chain: int) -> int:
    """The chain CRC the entry at buf[off:] should carry, given its predecessor's."""
    mv = memoryview(buf)
    return _crc32(mv[off + BODY_CRC_AT:off + HEADER_SIZE - 4], _crc32(mv[off:off + CHAIN_SPAN], prev_chain))


def decode_header(buf: bytes | bytearray | memoryview, off: int = 0) -> Header:
    """Decode a header without checking it."""
    if len(buf) - off < HEADER_SIZE:
        raise CorruptEntryError(f"truncated header at offset {off}: {len(buf) - off} bytes")
    return Header(*_unpack_header(buf, off))


def check_entry(buf: bytes | bytearray | memoryview, off: int, prev_chain: int | None,
                max_body: int) -> tuple[int, int, int, int, int, int, int, int, int]:
    """Verify the entry at buf[off:] and return its raw header tuple.

    Checks magic, sizes, the chain CRC (skipped when prev_chain is None: the predecessor is unknown)
    and the body CRC. Raises CorruptEntryError saying what is wrong.
    """
    avail = len(buf) - off
    if avail < HEADER_SIZE:
        raise CorruptEntryError(f"truncated header: {avail} of {HEADER_SIZE} bytes")
    h = _unpack_header(buf, off)
    magic, size, _index, _term, _pos, channel, chain, body_crc, body_size = h
    if magic not in VALID_MAGICS:
        raise CorruptEntryError(f"bad magic {magic}")
    if body_size < 0 or body_size > max_body or channel not in _CHANNELS or size != HEADER_SIZE + channel + body_size:
        raise CorruptEntryError(f"bad sizes: size {size}, body_size {body_size}")
    if avail < size:
        raise CorruptEntryError(f"truncated entry: {avail} of {size} bytes")
    mv = memoryview(buf)
    if prev_chain is not None and chain_of(mv, off, prev_chain) != chain:
        raise CorruptEntryError("chain CRC mismatch")
    if _crc32(mv[off + HEADER_SIZE:off + size]) != body_crc:
        raise CorruptEntryError("body CRC mismatch")
    return h


def entry_at(buf: bytes | bytearray | memoryview, off: int, h: tuple[int, ...]) -> Entry:
    """The Entry at buf[off:], given its checked header tuple `h`: the body is its last body_size bytes,
    the metadata run what lies between the header and the body."""
    end = off + h[1]
    start = end - h[8]
    meta = bytes(buf[off + HEADER_SIZE:start]) if start != off + HEADER_SIZE else b""
    return Entry(h[2], h[3], h[4], bytes(buf[start:end]), h[0], meta)


def decode_entries(buf: bytes | bytearray | memoryview, max_body: int,
                   prev_chain: int | None = None) -> list[Entry]:
    """Decode and verify concatenated entries (as pushed between nodes)."""
    out = []
    off = 0
    n = len(buf)
    while off < n:
        h = check_entry(buf, off, prev_chain, max_body)
        out.append(entry_at(buf, off, h))
        prev_chain = h[6]
        off += h[1]
    return out


def digest_key(index: int, term: int, magic: int, meta: bytes | bytearray | memoryview) -> bytes:
    """What a replica digest hashes before an entry's body: (index i64, term i64, magic i32), then
    for an entry with metadata the metadata run, with META_FLAG set in the magic so that no entry
    without metadata hashes the same bytes."""
    if meta:
        return _DIGEST_KEY(index, term, magic | META_FLAG) + bytes(meta)
    return _DIGEST_KEY(index, term, magic)


def replica_digest(entries: Iterable[Entry]) -> str:
    """SHA-256 over each entry's digest_key and body: equal logs, equal digests."""
    h = hashlib.sha256()
    for e in entries:
        h.update(digest_key(e.index, e.term, e.magic, e.meta))
        h.update(e.body)
    return h.hexdigest()
