"""Where a group's flushes run. One `store.flush()` at a time covers everything written before it
started (group commit). It runs in the group's worker thread, where the loop goes on meanwhile; or, when
it is small and flushes are fast, on the loop at once, one per loop turn among the node's groups (many
groups' small flushes in one turn would otherwise run one after another on the loop, where their worker
threads overlap them). Handing a small flush to the thread and back cost more than the fdatasync itself:
0.1-0.3 ms for the thread's wake-up and the loop's on a 2-core VM (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Callable

from .metrics import GroupStats
from .store import NodeStore

# A flush of at most this many bytes runs on the loop while the flushes' average stays below
# INLINE_FLUSH_MAX_S: one append at a time then waits for one fdatasync, and nothing else.
INLINE_FLUSH_BYTES = 64 << 10
INLINE_FLUSH_MAX_S = 0.001

# (durable index, or -1 with the error; the perf_counter time the flush was asked for)
Flushed = Callable[[int, BaseException | None, float], None]


class LoopTurn:
    """One flush on the loop per loop turn, shared by a node's groups."""

    __slots__ = ("_loop", "_taken")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._taken = False

    def take(self) -> bool:
        if self._taken:
            return False
        self._taken = True
        self._loop.call_soon(self._release)  # runs once this turn's callbacks are done
        return True

    def _release(self) -> None:
        self._taken = False


class Flusher:
    """Runs one group's flushes (see the module docstring) and hands each result to `done` on the loop."""

    __slots__ = ("_done", "_executor", "_loop", "_store", "_turn", "average_s", "stats")

    def __init__(self, store: NodeStore, executor: concurrent.futures.ThreadPoolExecutor, turn: LoopTurn,
                 stats: GroupStats, done: Flushed) -> None:
        self._store = store
        self._executor = executor
        self._turn = turn
        self._loop = asyncio.get_running_loop()
        self._done = done
        self.stats = stats
        self.average_s = 0.0  # moving average of store.flush()'s duration, wherever it ran

    def start(self) -> None:
        """Flush now on the loop (never waiting for the worker's lock), or in the worker thread."""
        t0 = time.perf_counter()
        store = self._store
        if (self.average_s < INLINE_FLUSH_MAX_S and store.unsynced_bytes <= INLINE_FLUSH_BYTES
                and self._turn.take() and store.io_lock.acquire(blocking=False)):
            try:
                durable, error = self._flush()
            finally:
                store.io_lock.release()
            self.stats.flushes_on_loop += 1
            self._done(durable, error, t0)
        else:
            self._executor.submit(self._job, t0)

    def _flush(self) -> tuple[int, BaseException | None]:
        t = time.perf_counter()
        try:
            return self._store.flush(), None
        except BaseException as e:
            return -1, e
        finally:
            self.average_s += (time.perf_counter() - t - self.average_s) / 8

    def _job(self, t0: float) -> None:
        """In the worker thread: flush, then hand the result to the loop in one callback (one turn)."""
        durable, error = self._flush()
        with contextlib.suppress(RuntimeError):  # the loop is closed: the node is gone
            self._loop.call_soon_threadsafe(self._done, durable, error, t0)
