"""The one driver of a core's output (a RaftNode, or an HaNode): it applies each `Ready` in the contract's
order (ready.py) and runs the node's flushes one at a time.

The server, the simulator, the scripted tests and the benchmarks all drive the core through this
class, so the ordering the simulator checks over thousands of seeds is the ordering nodes run.

Flushes are group commits. When a Ready asks for one and none is running, the driver calls
`start_flush()`; the caller runs `store.flush()` when it likes (a worker thread, a simulated disk
latency, or at once) and reports the durable index to `flushed()`. Until then further Readies are
applied without a new flush: the running one is followed by another if it did not cover everything.
With no `start_flush`, the driver flushes synchronously.

The stable state (term, vote, recovery flag) is persisted the same way, before any message leaves: while
the store reports it unsaved, messages are held, `start_persist()` is called (the caller runs
`store.persist_stable()` when it likes and reports `persisted()`), and the held messages go out once the
state they depend on is durable. With no `start_persist`, the driver persists synchronously.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..store.base import LogStore
from .ready import Completion, Ready, RoleChange


class Core(Protocol):
    """What the driver needs of a core: a RaftNode, or a primary/backup HaNode (ha/node.py)."""

    store: LogStore

    def on_flushed(self, durable_index: int, now_ms: int) -> Ready: ...


class Driver:
    """Applies one core's Readies: role changes, then messages, then completions, then the flush."""

    __slots__ = ("node", "send", "complete", "on_change", "start_flush", "flushing", "start_persist", "held")

    def __init__(self, node: Core, send: Callable[[Any], None], complete: Callable[[Completion], None],
                 on_change: Callable[[RoleChange], None] | None = None,
                 start_flush: Callable[[], None] | None = None,
                 start_persist: Callable[[], None] | None = None) -> None:
        self.node = node
        self.send = send
        self.complete = complete
        self.on_change = on_change
        self.start_flush = start_flush
        self.flushing = False
        self.start_persist = start_persist
        self.held: list[Any] | None = None  # messages waiting for the stable state to be durable

    def apply(self, ready: Ready, now_ms: int) -> Ready:
        """Emit `ready` and start a flush when it wrote something not yet durable. Returns `ready`.

        Messages may go out before the flush: the core never puts one in a Ready that claims more
        than is durable (durability-dependent acks wait inside the core for `on_flushed`). They wait
        for the stable state instead: a vote, a vote request or an ack of a new term never leaves
        before its term is on disk.
        """
        on_change = self.on_change
        if on_change is not None:
            for change in ready.changes:
                on_change(change)
        if self.held is None and self.node.store.stable_unsaved:
            self.held = []
            self._begin_persist()
        held = self.held
        if held is not None:
            held.extend(ready.messages)
        else:
            send = self.send
            for m in ready.messages:
                send(m)
        complete = self.complete
        for c in ready.completions:
            complete(c)
        if ready.must_flush and not self.flushing:
            self._begin_flush(now_ms)
        return ready

    def persisted(self) -> None:
        """The caller's `store.persist_stable()` returned: send what was held, or persist again first if
        the state changed meanwhile."""
        if self.node.store.stable_unsaved:
            self._begin_persist()
            return
        held, self.held = self.held or [], None
        send = self.send
        for m in held:
            send(m)

    def _begin_persist(self) -> None:
        if self.start_persist is not None:
            self.start_persist()
        else:
            self.node.store.persist_stable()
            self.persisted()

    def flushed(self, durable_index: int, now_ms: int) -> None:
        """A flush finished with `durable_index` durable: release what waited for it, and flush again if
        writes arrived meanwhile."""
        self.flushing = False
        self.apply(self.node.on_flushed(durable_index, now_ms), now_ms)
        self.flush_if_behind(now_ms)

    def flush_if_behind(self, now_ms: int) -> None:
        """Start a flush if the store holds writes that are not durable and none is running (also how a
        driver resumes after an error out of `flushed`)."""
        store = self.node.store
        if not self.flushing and store.durable_index < store.end_index:
            self._begin_flush(now_ms)

    def _begin_flush(self, now_ms: int) -> None:
        self.flushing = True
        if self.start_flush is not None:
            self.start_flush()
        else:
            self.flushed(self.node.store.flush(), now_ms)
