"""Reads of committed entries, as the wire carries them: encoded entries back to back.

Any node serves reads up to its own commit index (committed entries are immutable). NOOP and CONFIG
entries keep their indexes but are left out unless asked for.
"""

from __future__ import annotations

from ..errors import IndexOutOfRangeError, QuorumLogError, ResponseCode
from ..store.base import LogStore


class IndexBelowBeginError(QuorumLogError):
    """The index was expired from this node's log."""

    code = ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN


def read_committed(store: LogStore, start: int, max_entries: int, max_bytes: int,
                   include_control: bool) -> tuple[bytes | memoryview, int, int]:
    """Encoded committed entries from `start`: (entries, next index to read, committed index).

    Past the commit index the answer is empty with next == start (the reader polls or tails). The
    entries may be a view of the store's segments (no copy of the common one-run answer): encode them
    at once, before the store changes.
    """
    committed = store.committed_index
    if start < store.begin_index:
        raise IndexBelowBeginError(f"index {start} is below this node's first index {store.begin_index}")
    if start > committed or max_entries <= 0:
        return b"", start, committed
    count = min(max_entries, committed - start + 1)
    # Control entries are left out during the checked walk, not by a second walk over the answer.
    parts, n = store.read_raw_parts(start, count, max(max_bytes, 1), include_control)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return data, start + n, committed


def get_committed(store: LogStore, index: int) -> bytes | memoryview:
    """One committed entry, encoded (control entries too: GET names an index)."""
    if index < store.begin_index:
        raise IndexBelowBeginError(f"index {index} is below this node's first index {store.begin_index}")
    if index > store.committed_index:
        raise IndexOutOfRangeError(f"index {index} is not committed (committed index {store.committed_index})")
    data, n = store.read_raw(index, 1, 1)
    if n != 1:
        raise IndexOutOfRangeError(f"index {index} is not held by this node")
    return data
