"""Encoded entries (as READ answers carry them) to Arrow record batches, without a Python object per row.

One pass in Python finds where each entry starts (and checks its body CRC); everything else is Arrow
kernels over the answer's one buffer: the entries are viewed as a binary array whose offsets are the
entry starts, header fields are byte slices of it (taken in reverse to turn big-endian into
little-endian), and the body column is one slice past the 48-byte header.
"""

from __future__ import annotations

import struct
import zlib
from array import array

import pyarrow as pa
import pyarrow.compute as pc

from ..entry import HEADER, HEADER_SIZE, MAGIC_NORMAL
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
            magic, size, index, _t, _p, _c, _chain, body_crc, body_size = _header(data, off)
            end = off + size
            if size != HEADER_SIZE + body_size or end > n or magic != MAGIC_NORMAL:
                raise CorruptEntryError(f"entry {index}: bad header at offset {off} of a READ answer")
            if _crc32(mv[off + HEADER_SIZE:end]) != body_crc:
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


def _be_int64(entries: pa.Array, at: int) -> pa.Array:
    """The big-endian int64 at byte `at` of every entry, as an int64 array."""
    le = pc.binary_slice(entries, at + 7, at - 1, -1)
    bufs = le.buffers()
    return pa.Array.from_buffers(pa.int64(), len(le), [None, bufs[2]])


def entries_batch(group: str, data: bytes, check_crc: bool = True) -> pa.RecordBatch:
    """A record batch (SCHEMA) of the encoded normal entries in `data`."""
    starts = entry_starts(data, check_crc)
    count = len(starts) - 1
    if count == 0:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA)
    entries = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(starts), pa.py_buffer(data)])
    body = pc.binary_slice(entries, HEADER_SIZE, (1 << 31) - 1)
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(group, pa.string()), count), _be_int64(entries, 8), _be_int64(entries, 16),
         _be_int64(entries, 24), body],
        schema=SCHEMA)
