"""The producer table saved beside the log, so that a start reads the log's tail, not the whole log.

The table is a pure function of the log (producers.py), and rebuilding it reads every request's metadata:
about a second per million single-entry requests, so a node with a long log served nothing for minutes.
A snapshot is the table as of the log's end E, named by E's index, term and chain CRC; the chain CRC
covers every entry up to E, so a log whose entry E carries the same three values holds the same entries
up to E (a cut and rewrite, a reset to another log, a wiped store all change them), and the table as of E
is the snapshot's. A start then takes it and reads E + 1 onwards. The part up to E is still read once, as
the rebuild read it, for damage (bit rot below the checkpoint, which recovery does not read): through the
store's checked reads, whole runs at a time, with no per-entry Python.

Anything that does not match (no snapshot, another format or window, E past the log's end or below its
begin, another entry at E) rebuilds from the whole log, as before. A snapshot costs nothing to be stale:
its E is only ever checked against the log.

This module holds what concerns the log (the mark at E, the checked read up to it); the table encodes and
restores itself (ProducerTable.encode, ProducerTable.restore).
"""

from __future__ import annotations

from ..entry import HEADER
from ..store.base import LogStore

VERSION = 1
_VERIFY_ENTRIES = 1 << 16
_VERIFY_BYTES = 64 << 20


def mark(store: LogStore, index: int) -> tuple[int, int] | None:
    """(term, chain CRC) of the entry at `index` (of the log's start, for begin - 1); None if outside."""
    if index == store.begin_index - 1:
        return store.begin_term, store.begin_chain
    if not store.begin_index <= index <= store.end_index:
        return None
    raw, n = store.read_raw(index, 1, 1 << 30)
    if n != 1:
        return None
    h = HEADER.unpack_from(raw, 0)
    return h[3], h[6]


def verify(store: LogStore, first: int, last: int) -> None:
    """Read first..last through the store's checked reads (raises CorruptEntryError at damage)."""
    index = max(first, store.begin_index)
    while index <= last:
        _raw, n = store.read_raw(index, min(_VERIFY_ENTRIES, last - index + 1), _VERIFY_BYTES)
        if n == 0:
            return
        index += n
