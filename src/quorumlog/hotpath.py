"""The per-entry hot paths, in C when quorumlog._hotpath is built (native/), else in Python.

encode_run (a leader's batch), verify_run (a follower's checks of a push), index_units (a follower's
index units of it) and checked_runs (the raw read walk) are chosen once, at import: the C versions
return and raise exactly what the Python ones (entry.encode_run, store.base.verify_run and index_units,
store.reader.checked_runs: the reference) do. QUORUMLOG_PURE=1
in the environment keeps the Python ones; NATIVE tells which are in use.
"""

from __future__ import annotations

import os
from types import ModuleType

from .entry import HEADER_SIZE
from .entry import encode_run as py_encode_run
from .errors import CorruptEntryError
from .store.base import index_units as py_index_units
from .store.base import verify_run as py_verify_run
from .store.reader import _problem, _unpack_header
from .store.reader import checked_runs as py_checked_runs
from .store.segments import SegmentList


def _load() -> ModuleType | None:
    if os.environ.get("QUORUMLOG_PURE", "") not in ("", "0"):
        return None
    try:
        from . import _hotpath
    except ImportError:  # not built (no compiler at install), or built for another interpreter
        return None
    return _hotpath


_native = _load()
NATIVE = _native is not None


def native_checked_runs(data: SegmentList, pos: int, start: int, end: int, chain: int | None, max_count: int,
                        max_bytes: int, control: bool, max_body: int) -> tuple[list[memoryview], int]:
    """store.reader.checked_runs with each segment walked in C (_hotpath.walk_segment); the segment
    switches and the error messages stay here, as in the reference."""
    assert _native is not None
    walk = _native.walk_segment
    runs: list[memoryview] = []
    last = min(end, start + max_count - 1)
    if last < start:
        return runs, 0
    seg = data.find(pos)
    if seg is None:
        raise CorruptEntryError(f"entry {start} at pos {pos} is outside the data segments", index=start)
    seg_bytes = data.size
    rel, index, used, at_chain = pos - seg.start, start, 0, chain
    while True:
        status, rel, index, used, at_chain = walk(seg.view, rel, seg_bytes, seg.start, index, last, start, used,
                                                  max_bytes, at_chain, control, max_body, runs)
        if status == _native.WALK_DONE:
            return runs, index - start
        if status == _native.WALK_BLANK:  # the rest of the segment is unused: the next entry starts the next one
            nxt = seg.start + seg_bytes
            seg = data.find(nxt)
            if seg is None:
                raise CorruptEntryError(f"entry {index} at pos {nxt} is outside the data segments", index=index)
            rel = 0
            continue
        if status == _native.WALK_BAD:
            view = seg.view
            h = (_unpack_header(view, rel) if rel + HEADER_SIZE <= seg_bytes
                 else (int.from_bytes(view[rel:rel + 4], "big", signed=True), 0, 0, 0, 0, 0, 0, 0, 0))
            problem = _problem(view, rel, h, index, seg.start + rel, at_chain, seg_bytes, max_body)
            raise CorruptEntryError(f"entry {index} at pos {seg.start + rel}: {problem}", index=index)
        # Arguments outside what the C walk takes (integers past 64 bits, a view not of the segment's
        # size): the reference answers, from the start.
        return py_checked_runs(data, pos, start, end, chain, max_count, max_bytes, control, max_body)


# The Python versions first: their signatures are the ones the callers are checked against.
encode_run = py_encode_run
verify_run = py_verify_run
index_units = py_index_units
checked_runs = py_checked_runs
if _native is not None:
    encode_run = _native.encode_run
    verify_run = _native.verify_run
    index_units = _native.index_units
    checked_runs = native_checked_runs

__all__ = ["NATIVE", "checked_runs", "encode_run", "index_units", "native_checked_runs", "verify_run"]
