"""Reads of committed entries, as the wire carries them: encoded entries back to back.

Any node serves reads up to its own commit index (committed entries are immutable). NOOP and CONFIG
entries keep their indexes but are left out unless asked for.
"""

from __future__ import annotations

import struct

from ..entry import MAGIC_NORMAL
from ..errors import IndexOutOfRangeError, QuorumLogError, ResponseCode
from ..store.base import LogStore

_magic_size = struct.Struct(">ii").unpack_from


class IndexBelowBeginError(QuorumLogError):
    """The index was expired from this node's log."""

    code = ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN


def read_committed(store: LogStore, start: int, max_entries: int, max_bytes: int,
                   include_control: bool) -> tuple[bytes, int, int]:
    """Encoded committed entries from `start`: (entries, next index to read, committed index).

    Past the commit index the answer is empty with next == start (the reader polls or tails).
    """
    committed = store.committed_index
    if start < store.begin_index:
        raise IndexBelowBeginError(f"index {start} is below this node's first index {store.begin_index}")
    if start > committed or max_entries <= 0:
        return b"", start, committed
    count = min(max_entries, committed - start + 1)
    data, n = store.read_raw(start, count, max(max_bytes, 1))
    if not include_control and data:
        data = drop_control(data)
    return data, start + n, committed


def drop_control(data: bytes) -> bytes:
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


def get_committed(store: LogStore, index: int) -> bytes:
    """One committed entry, encoded (control entries too: GET names an index)."""
    if index < store.begin_index:
        raise IndexBelowBeginError(f"index {index} is below this node's first index {store.begin_index}")
    if index > store.committed_index:
        raise IndexOutOfRangeError(f"index {index} is not committed (committed index {store.committed_index})")
    data, n = store.read_raw(index, 1, 1)
    if n != 1:
        raise IndexOutOfRangeError(f"index {index} is not held by this node")
    return data
