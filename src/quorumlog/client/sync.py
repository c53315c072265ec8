"""Client: the synchronous client, for scripts and Spark workers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Future as ConcurrentFuture
from concurrent.futures import InvalidStateError
from typing import Any, TypeVar

from ..entry import Entry
from ..errors import QuorumLogError, ResponseCode
from ..net.loop import loop_factory
from .aio import AsyncClient
from .members import Members
from .results import AppendResult, EndInfo, Metadata

T = TypeVar("T")


class Client:
    """The synchronous client: the same operations as AsyncClient, run on a private event loop in a
    background thread (so it also works inside programs that already run an asyncio loop).

    Calls from any number of threads queue their coroutines; the loop is woken once per burst (one
    cross-thread wake-up, not one per call) and starts everything queued by then.

    `read_your_writes` (default True): reads never return less than the client has seen committed (its
    appends, its earlier reads, end()), whichever node answers; False: what the answering node has committed
    (AsyncClient, client/seen.py). The other keywords are AsyncClient's."""

    def __init__(self, endpoints: str | Sequence[str], group: str = "g0", *, read_your_writes: bool = True,
                 **kwargs: Any) -> None:
        self._loop = _new_loop()
        self._queued: deque[tuple[Coroutine[Any, Any, Any], ConcurrentFuture[Any]]] = deque()
        self._wake_lock = threading.Lock()
        self._woken = False  # a wake-up is on its way: calls queued before it runs need no other
        self._thread = threading.Thread(target=self._loop.run_forever, name="quorumlog-client", daemon=True)
        self._thread.start()
        self._closed = False

        async def make() -> AsyncClient:
            return AsyncClient(endpoints, group, read_your_writes=read_your_writes, **kwargs)

        self._ac = self._run(make())

    @property
    def aio(self) -> AsyncClient:
        return self._ac

    def _submit(self, coro: Coroutine[Any, Any, T]) -> ConcurrentFuture[T]:
        if self._closed:
            coro.close()
            raise QuorumLogError("client is closed", ResponseCode.NETWORK_ERROR)
        fut: ConcurrentFuture[T] = ConcurrentFuture()
        self._queued.append((coro, fut))
        with self._wake_lock:
            if self._woken:
                return fut
            self._woken = True
        self._loop.call_soon_threadsafe(self._start_queued)
        return fut

    def _start_queued(self) -> None:
        """On the loop: run every queued call as a task whose outcome settles its caller's future."""
        with self._wake_lock:
            self._woken = False  # before taking: a call queued after the last take wakes the loop again
        queued, loop = self._queued, self._loop
        while queued:
            coro, fut = queued.popleft()
            if fut.cancelled():
                coro.close()
                continue
            task = loop.create_task(coro)
            task.add_done_callback(functools.partial(_settle, fut))
            fut.add_done_callback(functools.partial(_cancel_task, loop, task))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._submit(coro).result()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(Exception):
            self._run(self._ac.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()

    def append(self, body: bytes, *, expected_end: int | None = None) -> AppendResult:
        return self._run(self._ac.append(body, expected_end=expected_end))

    def append_many(self, bodies: Sequence[bytes], *, expected_end: int | None = None) -> list[AppendResult]:
        return self._run(self._ac.append_many(bodies, expected_end=expected_end))

    def append_async(self, body: bytes) -> ConcurrentFuture[AppendResult]:
        """Start an append and return at once (pipelining from synchronous code)."""
        return self._submit(self._ac.append(body))

    def append_batch_raw_async(self, bodies: Sequence[bytes]) -> ConcurrentFuture[tuple[int, int]]:
        """Start an append_batch_raw and return at once: (first index, count) when it completes."""
        return self._submit(self._ac.append_batch_raw(bodies))

    def get(self, index: int) -> Entry:
        return self._run(self._ac.get(index))

    def read_view_async(self, start: int, max_entries: int, max_bytes: int,
                        node: str) -> ConcurrentFuture[tuple[memoryview, int, int]]:
        """Start one AsyncClient.read_view (a READ of one node, its entries a view of the answer)."""
        return self._submit(self._ac.read_view(start, max_entries, max_bytes, node))

    def read_raw_async(self, start: int, max_entries: int = 10000, max_bytes: int = 4 << 20, *,
                       node: str | None = None) -> ConcurrentFuture[tuple[bytes, int, int]]:
        """Start one AsyncClient.read_raw and return at once (so a reader can keep a READ in flight)."""
        return self._submit(self._ac.read_raw(start, max_entries, max_bytes, node=node))

    def read_batch(self, start: int, max_entries: int = 10000, max_bytes: int = 4 << 20,
                   include_control: bool = False) -> tuple[list[Entry], int, int]:
        """One READ: (committed entries from `start`, the next index to ask for, the committed index)."""
        return self._run(self._ac.read_batch(start, max_entries, max_bytes, include_control))

    def read(self, start: int, count: int, *, include_control: bool = False) -> Iterator[Entry]:
        """Committed entries start..start+count-1, fetched a batch at a time."""
        return self._iterate(self._ac.read(start, count, include_control=include_control))

    def tail(self, start: int, *, include_control: bool = False) -> Iterator[Entry]:
        """Committed entries from `start` on, as they commit (blocks waiting for the next one)."""
        return self._iterate(self._ac.tail(start, include_control=include_control))

    def _iterate(self, agen: AsyncIterator[Entry]) -> Iterator[Entry]:
        try:
            while True:
                try:
                    yield self._run(_anext(agen))
                except StopAsyncIteration:
                    return
        finally:
            if not self._closed:
                with contextlib.suppress(Exception):
                    self._run(_aclose(agen))

    def seen_index(self, group: str | None = None) -> int:
        """The highest index of `group` (default: the client's) this client has seen committed; -1 for none."""
        return self._ac.seen_index(group)

    def metadata(self, *, with_nodes: bool = True) -> Metadata:
        return self._run(self._ac.metadata(with_nodes=with_nodes))

    def node_status(self, addr: str, *, all_groups: bool = False) -> dict[str, Any]:
        return self._run(self._ac.node_status(addr, all_groups=all_groups))

    def end(self, group: str | None = None, consistency: str = "linearizable", *, node: str | None = None) -> EndInfo:
        """The group's end, committed index and term: "linearizable" or "local" (AsyncClient.end)."""
        return self._run(self._ac.end(group, consistency, node=node))

    def transfer_leader(self, target: str) -> str | None:
        return self._run(self._ac.transfer_leader(target))

    def promote(self, target: str, *, force: bool = False) -> tuple[str, int]:
        return self._run(self._ac.promote(target, force=force))

    # Membership changes of a Raft group (client/members.py), answered once committed.
    def add_member(self, node: str, address: str, *, learner: bool = False, timeout: float | None = None) -> Members:
        return self._run(self._ac.add_member(node, address, learner=learner, timeout=timeout))

    def promote_member(self, node: str, *, timeout: float | None = None) -> Members:
        return self._run(self._ac.promote_member(node, timeout=timeout))

    def remove_member(self, node: str) -> Members:
        return self._run(self._ac.remove_member(node))

    def set_member_address(self, node: str, address: str) -> Members:
        return self._run(self._ac.set_member_address(node, address))

    def members(self) -> Members:
        return self._run(self._ac.members())


def _settle(fut: ConcurrentFuture[Any], task: asyncio.Task[Any]) -> None:
    with contextlib.suppress(InvalidStateError):  # the caller cancelled it meanwhile
        if task.cancelled():
            fut.cancel()
        elif (e := task.exception()) is not None:
            fut.set_exception(e)
        else:
            fut.set_result(task.result())


def _cancel_task(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], fut: ConcurrentFuture[Any]) -> None:
    """The caller cancelled its future: cancel the running call too."""
    if fut.cancelled() and not task.done():
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(task.cancel)


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed, else asyncio's loop (the wire layer runs on both)."""
    return loop_factory()()


async def _anext(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()


async def _aclose(agen: AsyncIterator[Any]) -> None:
    close: Callable[[], Awaitable[None]] | None = getattr(agen, "aclose", None)
    if close is not None:
        await close()


