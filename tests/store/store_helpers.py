"""Helpers of the store suite: small segment geometry and a factory that opens either store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quorumlog.config import StoreConfig
from quorumlog.entry import HEADER_SIZE, INDEX_UNIT_SIZE
from quorumlog.store import MemoryStore
from quorumlog.store.file_store import FileStore

SEG = 64 * 1024  # data segment bytes
INDEX_SEG = INDEX_UNIT_SIZE * 256  # 256 index units per index segment
MAX_BODY = 16 * 1024  # a max entry (16 KiB + 48) fits a 64 KiB segment several times


def small_config(**overrides: Any) -> StoreConfig:
    values: dict[str, Any] = dict(data_segment_bytes=SEG, index_segment_bytes=INDEX_SEG, max_body_bytes=MAX_BODY)
    values.update(overrides)
    return StoreConfig(**values)


class StoreFactory:
    """Opens one store of a kind; `reopen()` gives the same log after a clean close (FileStore:
    close + open the same directory; MemoryStore: the same object, which close() leaves usable)."""

    def __init__(self, kind: str, directory: Path, config: StoreConfig) -> None:
        self.kind = kind
        self.dir = directory
        self.config = config
        self.store: Any = None
        self.opened: list[Any] = []

    def open(self, **kwargs: Any) -> Any:
        if self.kind == "memory":
            if self.store is None:
                # Segments age by the wall clock, as the file store's files do.
                self.store = MemoryStore(self.config, clock=time.time)
        else:
            self.store = FileStore(self.dir, self.config, **kwargs)
            self.opened.append(self.store)
        return self.store

    def reopen(self, **kwargs: Any) -> Any:
        """kwargs go to FileStore (e.g. repair=True)."""
        if self.kind == "memory":
            self.store.close()
            return self.store
        self.store.close()
        return self.open(**kwargs)

    def close_all(self) -> None:
        for s in self.opened:
            try:
                s.close()
            except Exception:
                s.abandon()


def body(i: int, n: int | None = None) -> bytes:
    """A recognisable body of n bytes (default: a few dozen) for entry number i."""
    if n is None:
        n = 10 + (i * 7) % 50
    pattern = f"<{i}>".encode()
    return (pattern * (n // len(pattern) + 1))[:n]


def log_of(store: Any) -> list[tuple[int, int, int, int, bytes]]:
    """The whole log as (index, term, pos, magic, body) tuples."""
    if store.end_index < store.begin_index:
        return []
    return [(e.index, e.term, e.pos, e.magic, e.body)
            for e in store.read(store.begin_index, 1 << 30, 1 << 40)]


def state_of(store: Any) -> tuple[int, int, int, int, int]:
    return (store.begin_index, store.end_index, store.end_term, store.committed_index, store.write_pos)


def bounds_of(store: Any) -> tuple[int, int, int, int]:
    """Where the log begins: (begin_index, begin_pos, begin_chain, begin_term)."""
    return store.begin_index, store.begin_pos, store.begin_chain, store.begin_term


def entry_span(store: Any, index: int) -> tuple[int, int]:
    """(pos, size) of an entry."""
    e = store.get(index)
    return e.pos, HEADER_SIZE + len(e.body)


def reopen_same(factory: StoreFactory, **kwargs: Any) -> Any:
    """Reopen and check nothing changed (committed survives only up to the last checkpoint, and close()
    checkpoints)."""
    s = factory.store
    before_state, before_log = state_of(s), log_of(s)
    s = factory.reopen(**kwargs)
    assert state_of(s) == before_state
    assert log_of(s) == before_log
    return s


def fill(s: Any, n: int, term: int = 1, size: int | None = None, batch: int = 7) -> None:
    i = 0
    while i < n:
        k = min(batch, n - i)
        s.append([body(s.end_index + 1 + j, size) for j in range(k)], term)
        i += k
