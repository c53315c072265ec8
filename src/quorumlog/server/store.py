"""The node's FileStore: serialises the worker thread's flush and checkpoint with the loop's truncations
and expiry.

The node runs `flush()` (and `checkpoint()`) in a worker thread while the event loop keeps stepping the
Raft core, which may append to the same store meanwhile. FileStore itself keeps a flush and a concurrent
append or truncation consistent; a checkpoint reads index units and segments that an expiry may remove,
so those are serialised here. Truncations and expiry are rare, so the loop simply waits for an in-flight
sync.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..store.file_store import FileStore
from .events import RECOVERY, RESET


class NodeStore(FileStore):
    """FileStore whose flush/checkpoint (worker thread) never overlap truncate/expire (loop thread).

    Its one read cache is the store's: the batches a leader encoded last (store/reader.py RecentBatches),
    which its dispatchers push to every follower as views, neither copied nor checked again.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.io_lock = threading.RLock()  # re-entrant: expire() and close() checkpoint and flush
        # Told (kind, text) of every cut once the store is open: the node's events (events.py).
        self.on_cut: Callable[[str, str], None] | None = None
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def flush(self) -> int:
        with self.io_lock:
            return super().flush()

    def checkpoint(self) -> None:
        with self.io_lock:
            super().checkpoint()

    def truncate_after(self, index: int) -> None:
        end = self.end_index
        with self.io_lock:
            super().truncate_after(index)
        self._report_cut(RESET, end, f"log truncated after entry {index} to match the leader's")

    def discard_after(self, index: int) -> None:
        end = self.end_index
        with self.io_lock:
            super().discard_after(index)
        self._report_cut(RESET, end, f"log cut after entry {index}, to be fetched again from the primary")

    def reset(self, begin_index: int, begin_pos: int, begin_chain: int, begin_term: int) -> None:
        with self.io_lock:
            super().reset(begin_index, begin_pos, begin_chain, begin_term)
        if self.on_cut is not None:
            self.on_cut(RESET, f"log reset to start at the leader's first entry {begin_index}")

    def mark_damaged(self, index: int, reason: str) -> None:
        end = self.end_index
        with self.io_lock:
            super().mark_damaged(index, reason)
        if self.on_cut is not None:
            self.on_cut(RECOVERY, f"damaged entry {index} ({reason}): cut {end - self.end_index} entries, "
                        "re-fetching them from the peers")

    def _report_cut(self, kind: str, end_before: int, text: str) -> None:
        dropped = end_before - self.end_index
        if dropped > 0 and self.on_cut is not None:
            self.on_cut(kind, f"{text}: {dropped} entries dropped")

    def expire(self, safe_index: int, now_s: float) -> int:
        with self.io_lock:
            return super().expire(safe_index, now_s)
