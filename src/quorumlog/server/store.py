"""The node's FileStore: serialises the worker thread's fsyncs with the loop's truncations.

The node runs `flush()` (and `checkpoint()`) in a worker thread while the event loop keeps stepping the
Raft core, which may append to the same store meanwhile; appends are safe (flush names only the end it
saw before syncing). A truncation is not: FileStore.flush records the end it captured after syncing, so
a truncation in between would be undone and later entries at the same indexes would count as durable
before they are. Truncations are rare (a follower meeting a new leader), so the loop simply waits for an
in-flight sync before truncating.
"""

from __future__ import annotations

import threading

from ..store.file_store import FileStore


class NodeStore(FileStore):
    """FileStore whose flush/checkpoint (worker thread) never overlap truncate/expire (loop thread)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.io_lock = threading.RLock()  # re-entrant: expire() and close() checkpoint and flush
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def flush(self) -> int:
        with self.io_lock:
            return super().flush()

    def checkpoint(self) -> None:
        with self.io_lock:
            super().checkpoint()

    def truncate_after(self, index: int) -> None:
        with self.io_lock:
            super().truncate_after(index)

    def expire(self, safe_index: int, now_s: float) -> int:
        with self.io_lock:
            return super().expire(safe_index, now_s)
