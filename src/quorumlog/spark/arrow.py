"""Encoded entries (as READ answers carry them) to Arrow record batches, without a Python object per row.

One tight pass in Python walks the entries (each one's size gives the next one's start) and checks each
body CRC; it records two offsets per entry, where the entry starts and where its body starts. Over the
answer's one buffer those offsets make a binary array whose even elements are the entries' headers
(with the producer metadata run, when an entry has one) and odd elements their bodies (an entry's body
is its last body_size bytes). Arrow kernels do the rest: `take` gathers the headers (48 or 76 bytes
each) and the bodies into two contiguous arrays, the header checks run over all headers at once, and
header fields are byte slices of them (taken in reverse to turn big-endian into little-endian).
"""

from __future__ import annotations

import struct
import zlib
from array import array

import pyarrow as pa
import pyarrow.compute as pc

from ..entry import HEADER, HEADER_SIZE, MAGIC_NORMAL, META_SIZE
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

Buffer = bytes | bytearray | memoryview

_size_crc_body = struct.Struct(">4xi32xIi").unpack_from  # size, body_crc, body_size
_size_body = struct.Struct(">4xi36xi").unpack_from  # size, body_size
_header = HEADER.unpack_from
_crc32 = zlib.crc32
_MAX = (1 << 31) - 1  # Arrow binary offsets are int32


def entry_offsets(data: Buffer, check_crc: bool = True) -> array[int]:
    """Where each entry of `data` starts and where its body starts, in turn, then the end (2n + 1
    offsets, int32). Checks that the entries tile `data` and that each body lies inside its entry, and
    each body CRC (which covers the metadata run and the body) when `check_crc`; the other header
    checks are check_headers'."""
    mv = memoryview(data).cast("B")
    n = len(mv)
    if n > _MAX:
        raise ValueError("an answer above 2 GiB cannot be one Arrow binary array")
    out: list[int] = []  # list.append is quicker than array.append
    push = out.append
    off = 0
    last = n - HEADER_SIZE  # the last offset a whole header fits at
    if check_crc:
        crc32 = _crc32
        walk = _size_crc_body
        while off <= last:
            size, body_crc, body_size = walk(mv, off)
            if not 0 <= body_size <= size - HEADER_SIZE:
                raise _bad_header(mv, off)
            end = off + size
            if crc32(mv[off + HEADER_SIZE:end]) != body_crc:
                raise CorruptEntryError(f"entry {_index_at(mv, off)}: body CRC mismatch")
            push(off)
            push(end - body_size)
            off = end
    else:
        walk = _size_body
        while off <= last:
            size, body_size = walk(mv, off)
            if not 0 <= body_size <= size - HEADER_SIZE:
                raise _bad_header(mv, off)
            off += size
            push(off - size)
            push(off - body_size)
    if off != n:
        raise CorruptEntryError("a READ answer ends inside an entry")
    push(n)
    return array("i", out)


def _index_at(mv: memoryview, off: int) -> int | str:
    return _header(mv, off)[2] if off + HEADER_SIZE <= len(mv) else "?"


def _bad_header(mv: memoryview, off: int) -> CorruptEntryError:
    return CorruptEntryError(f"entry {_index_at(mv, off)}: bad header at offset {off} of a READ answer")


_steps: dict[int, pa.Array] = {}


def _every_other(first: int, count: int) -> pa.Array:
    """first, first + 2, ... (count of them), sliced from a cached array (int32)."""
    cached = _steps.get(first)
    if cached is None or len(cached) < count:
        cached = _steps[first] = pa.array(range(first, first + 2 * max(count, 1 << 16), 2), pa.int32())
    return cached.slice(0, count)


def _be_int(fields: pa.Array, at: int, type_: pa.DataType) -> pa.Array:
    """The big-endian integer of `type_` (int32 or int64) at byte `at` (> 0) of every element."""
    le = pc.binary_slice(fields, at + type_.bit_width // 8 - 1, at - 1, -1)
    return pa.Array.from_buffers(type_, len(le), [None, le.buffers()[2]])


def check_headers(headers: pa.Array) -> None:
    """Every header (48 bytes, or 48 + the metadata run) is a normal entry's, and its channel field
    says how long its metadata run is (so size = 48 + channel + body_size, the body its last bytes)."""
    channel = _be_int(headers, 32, pa.int32())
    ok = pc.and_(pc.equal(pc.binary_length(headers), pc.add(channel, HEADER_SIZE)),
                 pc.is_in(channel, pa.array([0, META_SIZE], pa.int32())))
    ok = pc.and_(ok, pc.equal(pc.binary_slice(headers, 0, 4), MAGIC_NORMAL.to_bytes(4, "big")))
    if not pc.all(ok).as_py():
        first = pc.index(ok, False).as_py()
        raise CorruptEntryError(f"entry {_header(headers[first].as_buffer(), 0)[2]}: bad header in a READ answer")


def entries_batch(group: str, data: Buffer, check_crc: bool = True) -> pa.RecordBatch:
    """A record batch (SCHEMA) of the encoded normal entries in `data`. The batch holds no reference to
    `data`: headers and bodies are gathered out of it, once each."""
    data = memoryview(data).cast("B")
    offsets = entry_offsets(data, check_crc)
    count = (len(offsets) - 1) // 2
    if count == 0:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA)
    parts = pa.Array.from_buffers(pa.binary(), 2 * count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    headers = parts.take(_every_other(0, count))
    check_headers(headers)
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(group, pa.string()), count), _be_int(headers, 8, pa.int64()),
         _be_int(headers, 16, pa.int64()), _be_int(headers, 24, pa.int64()), parts.take(_every_other(1, count))],
        schema=SCHEMA)
