"""Entries and their byte layout: the 48-byte entry header and the 32-byte index unit (DESIGN §2).

The same bytes are on disk and on the wire: a leader pushes what its store holds and a follower
writes what it receives, after checking both CRCs. All integers are big-endian.

Header (48 bytes): magic i32, size i32, index i64, term i64, pos i64, channel i32,
chain_crc u32, body_crc u32, body_size i32.

chain_crc is the CRC32 of header bytes 0..35 and then of body_crc (bytes 40..43), seeded with the previous
entry's chain_crc (0 before index 0). Covering body_crc makes an entry's chain CRC a digest of the whole
log up to it, bodies included: two replicas with the same chain CRC at an index hold the same entries.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import CorruptEntryError

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

_crc32 = zlib.crc32
_unpack_header = HEADER.unpack_from
_pack_head = _HEAD36.pack_into
_pack_tail = _TAIL12.pack_into
_pack_chain = struct.Struct(">I").pack_into

assert HEADER_SIZE == 48 and INDEX_UNIT_SIZE == 32


@dataclass(slots=True)
class Entry:
    """One log entry as readers see it. Not frozen: a frozen dataclass costs four times as much
    to build, and the read path builds one per entry."""

    index: int
    term: int
    pos: int
    body: bytes
    magic: int = MAGIC_NORMAL

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


def encode_into(buf: bytearray | memoryview, off: int, magic: int, index: int, term: int, pos: int,
                body: bytes | memoryview, prev_chain: int) -> int:
    """Write one entry (header + body) at buf[off:]; return its chain CRC. buf must have room."""
    n = len(body)
    end = off + HEADER_SIZE + n
    _pack_head(buf, off, magic, HEADER_SIZE + n, index, term, pos, 0)
    _pack_tail(buf, off + CHAIN_SPAN, 0, _crc32(body), n)
    mv = memoryview(buf)
    chain = _crc32(mv[off + BODY_CRC_AT:off + HEADER_SIZE - 4], _crc32(mv[off:off + CHAIN_SPAN], prev_chain))
    _pack_chain(buf, off + CHAIN_SPAN, chain)
    buf[off + HEADER_SIZE:end] = body
    return chain


def encode_entry(magic: int, index: int, term: int, pos: int, body: bytes, prev_chain: int) -> tuple[bytes, int]:
    """Encode one entry; return (bytes, chain_crc)."""
    buf = bytearray(HEADER_SIZE + len(body))
    chain = encode_into(buf, 0, magic, index, term, pos, body, prev_chain)
    return bytes(buf), chain


def encode_run(bodies: Sequence[bytes], magic: int, first_index: int, term: int, first_pos: int,
               prev_chain: int, positions: list[int]) -> tuple[bytearray, bytearray, int]:
    """Encode contiguous entries into one data buffer and one index buffer.

    Returns (data, index_units, last_chain) and appends each entry's position to `positions`.
    Each body is copied exactly once, into `data`.
    """
    data = bytearray(sum(map(len, bodies)) + HEADER_SIZE * len(bodies))
    units = bytearray(INDEX_UNIT_SIZE * len(bodies))
    mv = memoryview(data)
    pack_unit = INDEX_UNIT.pack_into
    add_pos = positions.append
    off = 0
    chain = prev_chain
    index = first_index
    for body in bodies:
        n = len(body)
        size = HEADER_SIZE + n
        pos = first_pos + off
        add_pos(pos)
        _pack_head(data, off, magic, size, index, term, pos, 0)
        _pack_tail(data, off + CHAIN_SPAN, 0, _crc32(body), n)
        chain = _crc32(mv[off + BODY_CRC_AT:off + HEADER_SIZE - 4], _crc32(mv[off:off + CHAIN_SPAN], chain))
        _pack_chain(data, off + CHAIN_SPAN, chain)
        mv[off + HEADER_SIZE:off + size] = body
        pack_unit(units, (index - first_index) * INDEX_UNIT_SIZE, magic, pos, size, index, term)
        off += size
        index += 1
    return data, units, chain


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
    magic, size, _index, _term, _pos, _channel, chain, body_crc, body_size = h
    if magic not in VALID_MAGICS:
        raise CorruptEntryError(f"bad magic {magic}")
    if body_size < 0 or body_size > max_body or size != HEADER_SIZE + body_size:
        raise CorruptEntryError(f"bad sizes: size {size}, body_size {body_size}")
    if avail < size:
        raise CorruptEntryError(f"truncated body: {avail - HEADER_SIZE} of {body_size} bytes")
    mv = memoryview(buf)
    if prev_chain is not None and chain_of(mv, off, prev_chain) != chain:
        raise CorruptEntryError("chain CRC mismatch")
    if _crc32(mv[off + HEADER_SIZE:off + size]) != body_crc:
        raise CorruptEntryError("body CRC mismatch")
    return h


def decode_entries(buf: bytes | bytearray | memoryview, max_body: int,
                   prev_chain: int | None = None) -> list[Entry]:
    """Decode and verify concatenated entries (as pushed between nodes)."""
    out = []
    off = 0
    n = len(buf)
    while off < n:
        magic, size, index, term, pos, _c, chain, _b, _s = check_entry(buf, off, prev_chain, max_body)
        out.append(Entry(index, term, pos, bytes(buf[off + HEADER_SIZE:off + size]), magic))
        prev_chain = chain
        off += size
    return out


def replica_digest(entries: Iterable[Entry]) -> str:
    """SHA-256 over each entry's (index i64, term i64, magic i32, body): equal logs, equal digests."""
    h = hashlib.sha256()
    pack = struct.Struct(">qqi").pack
    for e in entries:
        h.update(pack(e.index, e.term, e.magic))
        h.update(e.body)
    return h.hexdigest()
