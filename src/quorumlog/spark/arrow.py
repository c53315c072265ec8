"""Encoded entries (as READ answers carry them) to Arrow record batches, without a Python object per row.

One pass in Python finds where each entry starts (and checks its body CRC); everything else is Arrow
kernels over the answer's one buffer: the entries are viewed as a binary array whose offsets are the
entry starts, header fields are byte slices of it (taken in reverse to turn big-endian into
little-endian), and the body column is one slice past the 48-byte header, or past the header and the
producer metadata run in entries that carry one (an entry's body is its last body_size bytes).
"""

from __future__ import annotations

import struct
import zlib
from array import array

import pyarrow as pa
import pyarrow.compute as pc

from ..entry import HEADER, HEADER_META_SIZE, HEADER_SIZE, MAGIC_NORMAL, META_SIZE
from ..errors import CorruptEntryError

SCHEMA = pa.schema([
    pa.field("group", pa.string()),
    pa.field("index", pa.int64()),
    pa.field("term", pa.int64()),
    pa.field("pos", pa.int64()),
    pa.field("body", pa.binary()),
])
# The same schema as Spark DDL (nullable columns, as Spark declares them).
SCHEMA_DDL = "`group` string, `index` bigint, `term` bigint, `pos` bigint, `body` binary"

_size_at = struct.Struct(">i").unpack_from
_header = HEADER.unpack_from
_crc32 = zlib.crc32
_TO_END = (1 << 31) - 1  # a slice stop past any entry's end


def entry_starts(data: bytes, check_crc: bool = True) -> array[int]:
    """Offsets of each entry in `data` plus the end offset (int32, as Arrow binary offsets)."""
    n = len(data)
    if n >= 1 << 31:
        raise ValueError("an answer above 2 GiB cannot be one Arrow binary array")
    starts = array("i")
    push = starts.append
    off = 0
    if check_crc:
        mv = memoryview(data)
        while off < n:
            magic, size, index, _t, _p, channel, _chain, body_crc, body_size = _header(data, off)
            end = off + size
            if size != HEADER_SIZE + channel + body_size or channel not in (0, META_SIZE) or end > n \
                    or magic != MAGIC_NORMAL:
                raise CorruptEntryError(f"entry {index}: bad header at offset {off} of a READ answer")
            if _crc32(mv[off + HEADER_SIZE:end]) != body_crc:  # metadata run and body
                raise CorruptEntryError(f"entry {index}: body CRC mismatch")
            push(off)
            off = end
    else:
        while off < n:
            size = _size_at(data, off + 4)[0]
            if size < HEADER_SIZE:
                raise CorruptEntryError(f"bad entry size {size} at offset {off} of a READ answer")
            push(off)
            off += size
        if off != n:
            raise CorruptEntryError("a READ answer ends inside an entry")
    push(n)
    return starts


def _be_int(entries: pa.Array, at: int, type_: pa.DataType) -> pa.Array:
    """The big-endian integer of `type_` (int32 or int64) at byte `at` (> 0) of every entry."""
    le = pc.binary_slice(entries, at + type_.bit_width // 8 - 1, at - 1, -1)
    bufs = le.buffers()
    return pa.Array.from_buffers(type_, len(le), [None, bufs[2]])


def _bodies(entries: pa.Array, check_sizes: bool) -> pa.Array:
    """The body column: each entry past its header, and past its metadata run if it has one (then
    size - body_size is HEADER_META_SIZE). `check_sizes` refuses an entry with any other layout."""
    body_at = pc.subtract(pc.binary_length(entries), _be_int(entries, 44, pa.int32()))
    with_meta = pc.equal(body_at, HEADER_META_SIZE)
    if check_sizes and not pc.all(pc.or_(with_meta, pc.equal(body_at, HEADER_SIZE))).as_py():
        raise CorruptEntryError("an entry of a READ answer has a bad body_size")
    plain = pc.binary_slice(entries, HEADER_SIZE, _TO_END)
    if not pc.any(with_meta).as_py():
        return plain
    return pc.if_else(with_meta, pc.binary_slice(entries, HEADER_META_SIZE, _TO_END), plain)


def entries_batch(group: str, data: bytes, check_crc: bool = True) -> pa.RecordBatch:
    """A record batch (SCHEMA) of the encoded normal entries in `data`."""
    starts = entry_starts(data, check_crc)
    count = len(starts) - 1
    if count == 0:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA)
    entries = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(starts), pa.py_buffer(data)])
    body = _bodies(entries, not check_crc)  # entry_starts has checked the sizes when check_crc
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(group, pa.string()), count), _be_int(entries, 8, pa.int64()),
         _be_int(entries, 16, pa.int64()), _be_int(entries, 24, pa.int64()), body],
        schema=SCHEMA)
